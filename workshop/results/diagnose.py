"""`workshop diagnose LOG`: why a job failed, in one sentence of what to change.

A failed distributed job prints hundreds of lines, most of them the other ranks reporting that
someone else died. Each rule below recognises one cause, quotes the line(s) that prove it, and gives
ONE change to make. Exit code 0 when the log shows a finished run and nothing went wrong, 1 otherwise.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from workshop.results.logs import LogLine, ParsedLog, load


@dataclass
class Finding:
    title: str
    evidence: list[str]
    fix: str
    kind: str = ""
    facts: dict[str, object] = field(default_factory=dict)

    def render(self) -> str:
        ev = "\n".join(f"    {e.strip()[:300]}" for e in self.evidence)
        return f"* {self.title}\n  evidence:\n{ev}\n  change: {self.fix}"


# ---------------------------------------------------------------------------------------- helpers

_SIZE = r"([\d.]+)\s*([KMGT]i?B)"
_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
          "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def _gib(value: str, unit: str) -> float:
    return float(value) * _UNITS.get(unit, 1) / 2**30


def _find(log: ParsedLog, pattern: str, flags: int = 0) -> list[LogLine]:
    rx = re.compile(pattern, flags)
    return [ln for ln in log.lines if rx.search(ln.text)]


def _last_step_before(log: ParsedLog, lineno: int) -> int | None:
    """The last optimizer step the log reported before `lineno` (human line, JSON or Trainer dict)."""
    steps = [s.step for s in log.steps if s.lineno <= lineno]
    steps += [m.step for m in log.train_metrics if m.lineno <= lineno and m.step is not None]
    if steps:
        return max(steps)
    n = len([r for r in log.train_records if r.lineno <= lineno])
    return n or None


def _config_value(log: ParsedLog, name: str) -> int | None:
    """A config number from run_args.json, or from the text (`--batch-size 8`, `"batch_size": 8`)."""
    v = log.config.get(name)
    if isinstance(v, int):
        return v
    flag = name.replace("_", "-")
    rx = re.compile(rf"(?:--{flag}[ =]|\"{name}\":\s*|{name}=|{name.upper()}=)(\d+)")
    for ln in log.lines:
        m = rx.search(ln.text)
        if m:
            return int(m.group(1))
    return None


# ---------------------------------------------------------------------------------------- rules

Rule = Callable[[ParsedLog], list[Finding]]


def cuda_oom(log: ParsedLog) -> list[Finding]:
    hits = _find(log, r"CUDA out of memory|OutOfMemoryError")
    if not hits:
        return []
    line = hits[0]
    t = line.text
    facts: dict[str, object] = {}
    m = re.search(r"Tried to allocate " + _SIZE, t)
    if m:
        facts["tried_gib"] = round(_gib(*m.groups()), 2)
    m = re.search(r"total capacity of " + _SIZE, t) or re.search(_SIZE + r" total capacity", t)
    if m:
        facts["total_gib"] = round(_gib(*m.groups()), 2)
    m = re.search(r"Of the allocated memory " + _SIZE + " is allocated", t) or re.search(_SIZE + " already allocated", t)
    if m:
        facts["allocated_gib"] = round(_gib(*m.groups()), 2)
    m = re.search(r"of which " + _SIZE + " is free", t) or re.search(_SIZE + " free", t)
    if m:
        facts["free_gib"] = round(_gib(*m.groups()), 2)
    step = _last_step_before(log, line.lineno)
    facts["last_step"] = step
    where = f"during step {step + 1} (step {step} finished)" if step else "before the first optimizer step"
    numbers = ", ".join(f"{k.replace('_gib', '')} {v} GiB" for k, v in facts.items() if k.endswith("_gib"))
    rank = f" on rank {line.rank}" if line.rank is not None else ""
    bs = _config_value(log, "batch_size")
    half = f"{max(1, bs // 2)}" if bs else "half"
    fix = (f"lower batch_size to {half} and double grad_acc (same global batch), or switch to full_shard / "
           f"enable activation_checkpointing")
    return [Finding(f"CUDA out of memory{rank} {where}" + (f": {numbers}" if numbers else ""),
                    [line.text], fix, "cuda_oom", facts)]


def host_oom(log: ParsedLog) -> list[Finding]:
    evs = [e for e in log.slurm if e.kind == "oom_kill"]
    hits = evs or []
    if not hits:
        return []
    return [Finding("Host memory exhausted: Slurm's cgroup killed a process (CPU RAM, not GPU memory)",
                    [e.text for e in hits[:2]],
                    "ask for more memory (#SBATCH --mem=0 or --mem-per-gpu), or turn offload off / load the "
                    "model on fewer ranks at once", "host_oom")]


def nccl(log: ParsedLog) -> list[Finding]:
    out = []
    wd = _find(log, r"Watchdog caught collective operation timeout|watchdog.*timed? ?out", re.I)
    if wd:
        m = re.search(r"OpType=(\w+).*?Timeout\(ms\)=(\d+)", wd[0].text)
        op = f" in {m.group(1)} after {int(m.group(2)) / 1000:.0f} s" if m else ""
        out.append(Finding(f"NCCL watchdog timeout{op}: a collective waited for a rank that never joined",
                           [wd[0].text], "find the rank that stalled or died first (its own error is earlier "
                           "in the log or in its node's output) and fix that; if none, run `workshop bandwidth` "
                           "on the same nodes to test the network", "nccl_timeout"))
    err = _find(log, r"NCCL error|nccl\w*Error|NCCL WARN|DistBackendError")
    err = [e for e in err if "Watchdog" not in e.text and "c10::DistBackendError" not in e.text] or (err if not wd else [])
    if err:
        out.append(Finding("NCCL communication error", [e.text for e in err[:3]],
                           "rerun with NCCL_DEBUG=INFO and check NCCL_SOCKET_IFNAME / the InfiniBand settings "
                           "in the course's env file, then test with `workshop bandwidth`", "nccl_error"))
    return out


def rendezvous(log: ParsedLog) -> list[Finding]:
    hits = _find(log, r"RendezvousTimeoutError|RendezvousConnectionError|RendezvousClosedError|"
                      r"DistStoreError|failed to connect to .*Connection refused|"
                      r"Connection refused.*(?:MASTER|c10d|store)|Timed out after \d+ seconds waiting for clients")
    if not hits:
        return []
    addr = re.search(r"\[([\w.\-]+)\]:(\d+)", " ".join(h.text for h in hits))
    target = f" ({addr.group(1)}:{addr.group(2)})" if addr else ""
    return [Finding(f"Rendezvous failed: the processes could not meet at MASTER_ADDR{target}",
                    [h.text for h in hits[:2]] + ([hits[-1].text] if len(hits) > 2 else []),
                    "set MASTER_ADDR to the first node of the job (`scontrol show hostnames $SLURM_JOB_NODELIST "
                    "| head -1`), a free MASTER_PORT, and --nnodes equal to the job's node count",
                    "rendezvous")]


def slurm(log: ParsedLog) -> list[Finding]:
    out = []
    by_kind: dict[str, list[str]] = {}
    for e in log.slurm:
        by_kind.setdefault(e.kind, []).append(e.text)
    if "time_limit" in by_kind:
        step = log.steps[-1] if log.steps else None
        where = f" at step {step.step}/{step.total}" if step and step.total else ""
        out.append(Finding(f"Slurm stopped the job at its time limit{where}", by_kind["time_limit"][:1],
                           "raise #SBATCH --time (or --max-steps / fewer epochs so it ends in time)", "time_limit"))
    if "node_failure" in by_kind:
        out.append(Finding("A node failed (hardware or network): Slurm ended the job", by_kind["node_failure"][:2],
                           "resubmit, excluding the node (#SBATCH --exclude=NODE) and tell the cluster staff",
                           "node_failure"))
    if "preempted" in by_kind:
        out.append(Finding("The job was preempted by a higher-priority job", by_kind["preempted"][:1],
                           "resubmit (add #SBATCH --requeue to restart automatically)", "preempted"))
    if "cancelled" in by_kind:
        out.append(Finding("The job was cancelled (scancel by you or an admin)", by_kind["cancelled"][:1],
                           "nothing broke: resubmit when ready (check `workshop status` for who cancelled it)",
                           "cancelled"))
    return out


def hub_offline(log: ParsedLog) -> list[Finding]:
    hits = _find(log, r"couldn't connect to 'https://huggingface.co'|LocalEntryNotFoundError|"
                      r"outgoing traffic has been disabled|We couldn't connect to|"
                      r"(?:ConnectionError|MaxRetryError).*huggingface\.co")
    if not hits:
        return []
    return [Finding("The model or tokenizer was not on disk and the Hub cannot be reached (compute nodes are offline)",
                    [h.text for h in hits[:2]],
                    "fill the shared HF_HOME once on a login node (`workshop prefetch --profile <site>`: the model "
                    "and SQuAD, then a read-only offline load), or use model=bloom-560m-random / tiny, which need "
                    "no Hub", "hub_offline")]


_GATE = re.compile(r"(?:bus ?bandwidth|busbw).*(?:below|too low)|(?:below|too low).*(?:GB/s|bandwidth)", re.I)


def bandwidth_gate(log: ParsedLog) -> list[Finding]:
    """`workshop bandwidth` ends with `# FAILED: <why>` lines (wrong values, missing node, slow network)."""
    bw = log.bandwidth
    failures = list(bw.failures) if bw else []
    if not failures:
        failures = [ln.text for ln in log.lines if _GATE.search(ln.text)][:2]
    out = []
    for msg in failures:
        low = msg.lower()
        if "wrong values" in low:
            title, fix = ("all_reduce returned wrong values: the collective itself is broken",
                          "rerun on other nodes (#SBATCH --exclude) and send the log and node list to the cluster staff")
        elif "node" in low and "expected" in low:
            title, fix = ("Not every node joined the bandwidth test",
                          "launch one torchrun per node (srun --ntasks-per-node=1) with --nnodes equal to "
                          "#SBATCH --nodes")
        else:
            title, fix = ("The bandwidth self-test is below its threshold: training would run, but slowly",
                          "check that NCCL uses the fast network (NCCL_SOCKET_IFNAME / NCCL_IB_HCA in the env "
                          "file); if it persists, report the node list to the cluster staff")
        out.append(Finding(title, [msg], fix, "bandwidth_gate"))
    return out


_TB_START = re.compile(r"^Traceback \(most recent call last\):")
_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d+), in (\S+)')
_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning|Failure)\w*|[A-Za-z_][\w.]*Error)"
                  r"(?::\s?(.*))?$")


def _tracebacks(log: ParsedLog) -> list[tuple[str, str, list[str], LogLine]]:
    """(exception, message, [last frame], line) per traceback, following each rank's own lines."""
    out = []
    open_: dict[int | None, list[str]] = {}
    for ln in log.lines:
        t, r = ln.text.rstrip(), ln.rank
        if _TB_START.match(t.strip()):
            open_[r] = []
            continue
        if r not in open_:
            continue
        if _FRAME.match(t):
            open_[r].append(t.strip())
            continue
        if t.startswith(" ") or not t.strip():
            continue
        m = _EXC.match(t.strip())
        frames = open_.pop(r)
        if m:
            out.append((m.group(1), (m.group(2) or "").strip(), frames[-1:], ln))
    return out


_SKIP_EXC = ("ChildFailedError", "SystemExit", "KeyboardInterrupt")


def traceback_(log: ParsedLog, already: set[str]) -> list[Finding]:
    out = []
    tbs = _tracebacks(log)
    # torch's `error: config field ...` line from train.py (ConfigError caught and printed)
    for ln in log.lines:
        m = re.search(r"(?:ConfigError: |error: )config field '(\w+)': (.*?)(?:\. Fix: (.*))?$", ln.text)
        if m:
            return [Finding(f"Config error in field '{m.group(1)}': {m.group(2)}", [ln.text],
                            m.group(3) or f"fix the value of {m.group(1)}", "config_error", {"field": m.group(1)})]
    real = [tb for tb in tbs if tb[0].split(".")[-1] not in _SKIP_EXC]
    if not real or already & {"cuda_oom", "hub_offline", "rendezvous", "nccl_error", "nccl_timeout"}:
        return out
    exc, msg, frame, ln = real[0]
    where = f" at {frame[0]}" if frame else ""
    return [Finding(f"Python error {exc.split('.')[-1]}: {msg[:200]}", [*frame, ln.text],
                    f"fix what the message says{where}; the other ranks' errors are consequences of this first one",
                    "traceback", {"exception": exc, "message": msg})]


def exit_codes(log: ParsedLog, already: set[str]) -> list[Finding]:
    if already:
        return []
    bad = [e for e in log.slurm if e.kind == "task_exit"]
    if not bad:
        return []
    return [Finding("A task exited with an error and the log says no more about why", [e.text for e in bad[:2]],
                    "look at the job's stderr file (#SBATCH --error) for the traceback", "task_exit")]


RULES: tuple[Rule, ...] = (cuda_oom, host_oom, nccl, rendezvous, slurm, hub_offline, bandwidth_gate)


def diagnose(log: ParsedLog | str | Path) -> list[Finding]:
    """Every cause found in the log, most specific first."""
    parsed = load(log)
    if parsed.run_args is None and parsed.source != "<text>":
        # A log saved inside its run folder: the config there gives e.g. the batch size to halve.
        sibling = Path(parsed.source).parent / "run_args.json"
        if Path(parsed.source).is_file() and sibling.is_file():
            import json

            try:
                parsed.run_args = json.loads(sibling.read_text())
            except ValueError:
                pass
    found: list[Finding] = []
    for rule in RULES:
        found += rule(parsed)
    kinds = {f.kind for f in found}
    found += traceback_(parsed, kinds)
    found += exit_codes(parsed, {f.kind for f in found})
    if not found and not parsed.succeeded and not _bandwidth_ok(parsed):
        tail = [ln.text for ln in parsed.lines[-3:]]
        found.append(Finding("The run did not finish: no summary and no final Trainer record", tail or ["(empty log)"],
                             "check whether the job is still running (`workshop status`); if not, read the end of "
                             "its stderr file", "unfinished"))
    return found


def _bandwidth_ok(log: ParsedLog) -> bool:
    bw = log.bandwidth
    return bw is not None and bool(bw.rows) and bw.avg_busbw_GBps is not None and bw.passed is not False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="workshop diagnose", description="Explain why a job failed and what to change.")
    p.add_argument("log", help="a job's output file, or a run folder")
    args = p.parse_args(argv)
    path = Path(args.log)
    if not path.exists():
        print(f"workshop diagnose: {path} does not exist; give the job's .out file or its run folder",
              file=sys.stderr)
        return 2
    findings = diagnose(path)
    if not findings:
        print(f"{path}: the log shows success; nothing to fix.")
        return 0
    print(f"{path}: {len(findings)} finding(s)")
    for f in findings:
        print(f.render())
    return 1
