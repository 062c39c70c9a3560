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


_NCCL_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout|watchdog.*timed? ?out", re.I)
_GLOO_TIMEOUT = re.compile(r"gloo.*Timed out waiting (\d+)ms for (?:send|recv) operation", re.I)
_C10D_FRAME = re.compile(r'File "[^"]*distributed_c10d\.py", line \d+, in (\w+)')


def _timeout_rank(ln: LogLine) -> int | None:
    """The global rank a timeout line speaks for: NCCL writes `[Rank N]`, torch prefixes `[rankN]:`."""
    m = re.search(r"\[Rank (\d+)\]", ln.text)
    return int(m.group(1)) if m else ln.rank


def collective_timeout(log: ParsedLog) -> list[Finding]:
    """A collective that waited longer than the process group's timeout: NCCL's watchdog on a GPU, gloo's
    `Timed out waiting ...ms` on a CPU. The ranks that report it were waiting; with the world size known
    (the run's config), the ranks that never report it are the ones that stalled."""
    nccl_hits, gloo_hits = _find(log, _NCCL_WATCHDOG.pattern, re.I), _find(log, _GLOO_TIMEOUT.pattern, re.I)
    hits = nccl_hits or gloo_hits
    if not hits:
        return []
    if nccl_hits:
        m = re.search(r"OpType=(\w+).*?Timeout\(ms\)=(\d+)", hits[0].text)
        op, ms = (m.group(1), int(m.group(2))) if m else (None, None)
    else:
        ms = int(_GLOO_TIMEOUT.search(hits[0].text).group(1))  # type: ignore[union-attr]
        frames = [f for f in _find(log, _C10D_FRAME.pattern) if f.lineno < hits[0].lineno and f.rank == hits[0].rank]
        op = _C10D_FRAME.search(frames[-1].text).group(1) if frames else None  # type: ignore[union-attr]
    waiting = sorted({r for r in map(_timeout_rank, hits) if r is not None})
    world = log.config.get("world_size")
    silent = [r for r in range(world) if r not in waiting] if isinstance(world, int) and waiting else []
    step = _last_step_before(log, hits[0].lineno)
    facts: dict[str, object] = {"timeout_s": ms / 1000 if ms else None, "op": op, "waiting_ranks": waiting,
                                "silent_ranks": silent, "last_step": step}
    title = "A collective timed out" + (f" after {ms / 1000:g} s" if ms else "") + (f" in {op}" if op else "")
    title += f" at step {step + 1}" if step else ""
    if waiting:
        title += f": rank{'s' if len(waiting) > 1 else ''} {', '.join(map(str, waiting))} waited for a rank that never joined"
    if silent:
        title += (f"; rank{'s' if len(silent) > 1 else ''} {', '.join(map(str, silent))} never reported it: "
                  f"{'they' if len(silent) > 1 else 'it'} stalled (hung, stopped, or stuck in I/O)")
    fix = ("find why the silent rank stopped (its node's own output; on a live hang `py-spy dump --pid` shows where "
           "it waits) and fix that; if it recurs on one node, exclude it (#SBATCH --exclude=NODE) and tell the "
           "cluster staff; if none stalled, run `workshop bandwidth` on the same nodes to test the network")
    evidence = [h.text for h in hits[:2]]
    dump = flight_recorder_dir(log) if nccl_hits else None   # gloo keeps the log's diagnosis (its dumps lack
    if dump is not None:                                     # the group names the analyser needs, torch 2.13)
        analysis = analyse_flight_recorder(dump)
        facts["flight_recorder"] = analysis
        if analysis.get("first_error"):
            first = analysis["first_error"]
            title += (f". PyTorch's flight recorder (torchfrtrace on {dump}): the first mismatched collective is "
                      f"#{first['seq']} {first['collective']} in group {first['group']}")
            if first.get("missing_ranks"):
                title += f", missing rank(s) {', '.join(map(str, first['missing_ranks']))}"
            evidence += first["lines"][:4]
        elif analysis.get("error"):
            evidence.append(f"flight recorder: {analysis['error']}")
    return [Finding(title, evidence, fix, "nccl_timeout" if nccl_hits else "collective_timeout", facts)]


FLIGHT_RECORDER_DIR = "flight_recorder"   # workshop.slurm.render.FLIGHT_RECORDER_DIR: where NCCL runs dump
_FR_ERROR = re.compile(r"Collective sequence number: (\d+) has errors")


def flight_recorder_dir(log: ParsedLog) -> Path | None:
    """The job's flight-recorder dumps (rank_<N> files, written on an NCCL timeout), beside the log or its
    run folder; None when there are none."""
    if log.source == "<text>":
        return None
    source = Path(log.source)
    here = source if source.is_dir() else source.parent
    for folder in (here / FLIGHT_RECORDER_DIR, here.parent / FLIGHT_RECORDER_DIR):
        if folder.is_dir() and any(folder.glob("rank_*")):
            return folder
    return None


def analyse_flight_recorder(folder: Path, timeout_s: float = 120) -> dict[str, object]:
    """Run PyTorch's flight-recorder analyser (`torchfrtrace`, torch.distributed.flight_recorder) on the
    dumps and read its report (`read_torchfrtrace`), or say why it could not run."""
    import subprocess

    cmd = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder), "-p", "rank_",
           "--allow-incomplete-ranks"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"torchfrtrace did not run: {type(e).__name__}: {e}"}
    return read_torchfrtrace(done.stdout + done.stderr, done.returncode)


def read_torchfrtrace(text: str, returncode: int) -> dict[str, object]:
    """torchfrtrace's report (its output and exit status): its first mismatched collective (sequence number,
    collective, group, the analyser's error line, missing ranks), the output's tail, or why it failed."""
    out: dict[str, object] = {"returncode": returncode, "output_tail": text[-4000:]}
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if _FR_ERROR.search(ln)), None)
    if start is None:
        if returncode:
            out["error"] = f"torchfrtrace exited {returncode}: {(lines or ['(no output)'])[-1][:300]}"
        return out
    block = []
    for ln in lines[start:]:
        if block and _FR_ERROR.search(ln):
            break
        block.append(ln)
    field_of = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in block[1:]) if v}
    missing = re.search(r"[Mm]issing ranks?[^{\[]*[{\[]([\d, ]*)[}\]]", "\n".join(block))
    culprit = re.search(r"Culprit rank (\d+)", "\n".join(block))
    ranks = [int(r) for r in re.findall(r"\d+", missing.group(1))] if missing else []
    if not ranks and culprit:
        ranks = [int(culprit.group(1))]
    out["first_error"] = {"seq": int(_FR_ERROR.search(block[0]).group(1)),  # type: ignore[union-attr]
                          "collective": field_of.get("collective"), "group": field_of.get("group info"),
                          "error": field_of.get("error msg"), "missing_ranks": ranks,
                          "lines": [ln for ln in block if ln.strip()][:8]}
    return out


def nccl(log: ParsedLog) -> list[Finding]:
    wd = _find(log, _NCCL_WATCHDOG.pattern, re.I)
    err = _find(log, r"NCCL error|nccl\w*Error|NCCL WARN|DistBackendError")
    err = [e for e in err if "Watchdog" not in e.text and "c10::DistBackendError" not in e.text] or (err if not wd else [])
    if err:
        return [Finding("NCCL communication error", [e.text for e in err[:3]],
                        "rerun with NCCL_DEBUG=INFO and check NCCL_SOCKET_IFNAME / the InfiniBand settings "
                        "in the course's env file, then test with `workshop bandwidth`", "nccl_error")]
    return []


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
    if not real or already & {"cuda_oom", "hub_offline", "rendezvous", "nccl_error", "nccl_timeout", "collective_timeout"}:
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


RULES: tuple[Rule, ...] = (cuda_oom, host_oom, collective_timeout, nccl, rendezvous, slurm, hub_offline, bandwidth_gate)


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
