"""A job's output → typed records, so every number in an exercise table comes from the student's log.

Job logs are messy: tqdm rewrites its bar with carriage returns, `srun --label` puts `0: ` before each
line, every node (or rank) may print the same Trainer dict, the job can die half-way through a line,
and Slurm adds its own messages. `parse_log` reads all of that without ever raising and says, in
`ParsedLog.missing`, what it looked for and did not find. `read_run_dir` reads the files a run wrote
(`summary.json`, `metrics.jsonl`, `run_args.json`) into the same `ParsedLog`.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from workshop.training import log_records

# ---------------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class LogLine:
    """One physical piece of output: a `\\n`-line, or one `\\r`-segment of it (tqdm overwrites)."""

    lineno: int  # 1-based line number in the file
    rank: int | None  # from an `srun --label` (`0: `) or torchrun (`[rank0]:`) prefix
    text: str  # without the prefix


@dataclass(frozen=True)
class TrainerRecord:
    """One HF Trainer log dict: kind 'train' (loss), 'eval' (eval_*), 'final' (train_runtime) or 'other'."""

    kind: str
    values: dict[str, float]
    lineno: int

    @property
    def epoch(self) -> float | None:
        return self.values.get("epoch")


@dataclass(frozen=True)
class MetricRecord:
    """One `WORKSHOP_METRICS {json}` line (the same object as a metrics.jsonl line)."""

    kind: str
    data: dict[str, Any]
    lineno: int

    @property
    def step(self) -> int | None:
        s = self.data.get("step")
        return int(s) if isinstance(s, (int, float)) and not isinstance(s, bool) else None


@dataclass(frozen=True)
class StepLine:
    """One human `[workshop] step 3/12 | loss 5.81 | ...` line; a fallback when the JSON is absent."""

    step: int
    total: int | None
    values: dict[str, float]
    lineno: int


@dataclass(frozen=True)
class RankFact:
    """A `[workshop rank R host H] ...` line: a per-rank fact (host, parameters held) kept per rank."""

    rank: int
    host: str
    text: str
    values: dict[str, Any]
    lineno: int


@dataclass(frozen=True)
class BandwidthRow:
    """One row of nccl-tests' table (ours prints the out-of-place columns only)."""

    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    wrong: int | None
    inplace_time_us: float | None = None
    inplace_algbw_GBps: float | None = None
    inplace_busbw_GBps: float | None = None
    inplace_wrong: int | None = None


@dataclass
class Bandwidth:
    """An all_reduce_perf result: rows, the `# Avg bus bandwidth` line and the devices it ran on."""

    rows: list[BandwidthRow] = field(default_factory=list)
    avg_busbw_GBps: float | None = None
    n_ranks: int | None = None
    hosts: list[str] = field(default_factory=list)
    n_nodes: int | None = None  # from our `# Hosts : N (...)` line
    failures: list[str] = field(default_factory=list)  # our `# FAILED: ...` gate lines
    passed: bool | None = None  # our `# PASSED` line (None: the log does not say)
    gate_line_GBps: float | None = None  # our `# Large-message busbw : X GB/s` line
    # NCCL_DEBUG=INFO's "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read": (from rank, to rank, transport)
    channels: list[tuple[int, int, str]] = field(default_factory=list)
    network: str | None = None  # NCCL_DEBUG=INFO's "Using network IB"

    @property
    def max_busbw_GBps(self) -> float | None:
        vals = [max(r.busbw_GBps, r.inplace_busbw_GBps or 0.0) for r in self.rows]
        return max(vals) if vals else None

    @property
    def large_busbw_GBps(self) -> float | None:
        """Bus bandwidth at the largest message (the gate's figure): our line, else the last row's best."""
        if self.gate_line_GBps is not None:
            return self.gate_line_GBps
        if not self.rows:
            return None
        last = max(self.rows, key=lambda r: r.size_bytes)
        return max(last.busbw_GBps, last.inplace_busbw_GBps or 0.0)

    @property
    def transport_note(self) -> str:
        """Which transport NCCL chose, inside a node and between nodes ('' when the log has no
        NCCL_DEBUG=INFO channel lines, e.g. gloo on CPU)."""
        if not self.channels:
            return ""
        kinds: dict[str, set[str]] = {"inside a node": set(), "between nodes": set()}
        for src, dst, via in self.channels:
            parts = via.split("/")
            name = "/".join(parts[:2]) if parts[0] in ("P2P", "NET") else parts[0]
            if "GDRDMA" in parts:
                name += " (GPUDirect RDMA)"
            same = (len(self.hosts) > max(src, dst) and self.hosts[src] == self.hosts[dst]) or parts[0] != "NET"
            kinds["inside a node" if same else "between nodes"].add(name)
        text = "; ".join(f"{where} {', '.join(sorted(v))}" for where, v in kinds.items() if v)
        if self.network:
            text += f" (network {self.network})"
        if any(k.startswith("NET/Socket") for k in kinds["between nodes"]):
            text += (": TCP sockets between nodes. If the site has InfiniBand or RoCE, NCCL did not use it: "
                     "check NCCL_IB_HCA / NCCL_SOCKET_IFNAME with the admins")
        return "transport: " + text


@dataclass(frozen=True)
class SlurmEvent:
    """A Slurm message: kind is time_limit, cancelled, node_failure, oom_kill, preempted or task_exit."""

    kind: str
    text: str
    lineno: int
    job_id: str | None = None
    node: str | None = None
    reason: str | None = None


@dataclass
class ParsedLog:
    """Everything found in one job's output. `missing` names what was looked for and not found."""

    source: str = "<text>"
    lines: list[LogLine] = field(default_factory=list)
    trainer: list[TrainerRecord] = field(default_factory=list)
    metrics: list[MetricRecord] = field(default_factory=list)
    steps: list[StepLine] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    run_args: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None  # WORKSHOP_CHECKPOINT: stopped at a checkpoint, to be resumed
    rank_facts: list[RankFact] = field(default_factory=list)
    bandwidth: Bandwidth | None = None
    slurm: list[SlurmEvent] = field(default_factory=list)
    bad_lines: list[int] = field(default_factory=list)  # records that were there but would not parse
    missing: list[str] = field(default_factory=list)
    # the labels that printed metrics, global rank 0's first: only its lines are read
    record_ranks: list[int] = field(default_factory=list)

    @property
    def rank_note(self) -> str | None:
        """Says whose figures these are when several ranks or nodes printed the same metrics."""
        if len(self.record_ranks) < 2:
            return None
        first = self.record_ranks[0]
        return (f"figures from global rank 0 only{f' (the lines labelled {first}:)' if first != 0 else ''}: ranks "
                f"{', '.join(map(str, sorted(self.record_ranks)))} each printed the run's metrics")

    # Views the tables and diagnose use.
    @property
    def train_records(self) -> list[TrainerRecord]:
        return [r for r in self.trainer if r.kind == "train"]

    @property
    def eval_records(self) -> list[TrainerRecord]:
        return [r for r in self.trainer if r.kind == "eval"]

    @property
    def final_record(self) -> TrainerRecord | None:
        finals = [r for r in self.trainer if r.kind == "final"]
        return finals[-1] if finals else None

    @property
    def train_metrics(self) -> list[MetricRecord]:
        return [m for m in self.metrics if m.kind == "train"]

    @property
    def eval_metrics(self) -> list[MetricRecord]:
        return [m for m in self.metrics if m.kind == "eval"]

    @property
    def config(self) -> dict[str, Any]:
        """The resolved RunConfig when run_args.json was read; empty otherwise."""
        cfg = (self.run_args or {}).get("config")
        return cfg if isinstance(cfg, dict) else {}

    @property
    def label(self) -> str:
        out = self.config.get("output_dir")
        if out:
            return Path(str(out)).name
        return Path(self.source).stem if self.source != "<text>" else "run"

    @property
    def succeeded(self) -> bool:
        """The run reached its end: a summary with an ok status, or Trainer's final dict."""
        if self.summary is not None:
            return str(self.summary.get("status", "ok")).lower() in ("ok", "completed", "success", "done")
        return self.final_record is not None


# ---------------------------------------------------------------------------------------- patterns

_LABEL = re.compile(r"^\s{0,4}(\d{1,5}): ")  # srun --label
_RANK_TAG = re.compile(r"^\[(?:rank|default)(\d{1,5})\]:\s?")  # torchrun / torch excepthook
_DICT = re.compile(r"\{'[A-Za-z_][\w/]*':[^{}]*\}")
_PAIR = re.compile(r"'([A-Za-z_][\w/]*)':\s*'?([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?"
                   r"|nan|inf|NaN|Infinity))'?\s*(?=[,}])")
_METRICS = log_records.pattern(log_records.METRICS)
# lines a run prints once, each a JSON object kept whole on the ParsedLog: (marker, pattern, attribute)
_ONCE_LINES = tuple((log_records.marker(kind), log_records.pattern(kind), attr) for kind, attr in
                    ((log_records.SUMMARY, "summary"), (log_records.RUN_ARGS, "run_args"),
                     (log_records.CHECKPOINT, "checkpoint")))
# the lines whose figures describe the run; when several ranks print them, global rank 0's are read
_RECORD_MARKERS = (*(log_records.marker(k) for k in (log_records.SUMMARY, log_records.METRICS, log_records.CHECKPOINT)),
                   "[workshop] step", "{'")
_STEP = re.compile(r"\[workshop\] step (\d+)(?:/(\d+))?((?:\s*\|[^|]*)*)")
_RANKLINE = re.compile(r"\[workshop rank (\d+) host ([^\]\s]+)\]\s*(.*)")
_KV = re.compile(r"([A-Za-z_]\w*)[=:]\s*([^\s,;|]+)")
_BW_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)((?:\s+(?:[-+]?[\d.]+(?:e[-+]?\d+)?|N/A))+)\s*$")
_BW_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([-+]?[\d.]+(?:e[-+]?\d+)?|nan)", re.I)
_BW_DEV = re.compile(r"#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)")
_BW_HOSTS = re.compile(r"#\s*Hosts\s*:\s*(\d+)\s*\(.*?\),\s*(\d+) ranks")
_BW_VERDICT = re.compile(r"#\s*(FAILED|PASSED)\b:?\s*(.*)")
_BW_NGPUS = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_BW_GATE = re.compile(r"#\s*Large-message busbw\s*:\s*([-+]?[\d.]+(?:e[-+]?\d+)?|nan)\s*GB/s", re.I)
_NCCL_CHANNEL = re.compile(r"NCCL INFO Channel \d+/\d+ : (\d+)\[\w+\] -> (\d+)\[\w+\] (?:\[\w+\] )?via (\S+)")
_NCCL_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
_SLURM_CANCEL = re.compile(r"\*\*\*\s*(JOB|STEP)\s+([\w.]+)\s+ON\s+(\S+)\s+CANCELLED AT\s+(\S+)(.*?)(?:\*\*\*|$)",
                           re.I)
_SLURM_OOM = re.compile(r"Detected\s+(\d+)\s+oom[-_]kill event", re.I)
_SLURM_NODEFAIL = re.compile(r"(?:srun: error: Node failure on (\S+))|(?:NODE[_ ]FAIL)", re.I)
_SLURM_TASK = re.compile(r"srun: error: (\S+): tasks? ([\d\-,]+): (.*)")


# ---------------------------------------------------------------------------------------- helpers


def _to_float(text: str) -> float | None:
    try:
        return float(text.replace(",", "").replace("_", ""))
    except ValueError:
        return None


def parse_trainer_dict(text: str) -> dict[str, float] | None:
    """A Trainer log dict, 4.x (floats) or 5.x (strings), as floats; None when it is not one."""
    try:
        obj = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        obj = None
    if isinstance(obj, dict):
        out: dict[str, float] = {}
        for k, v in obj.items():
            if isinstance(v, bool) or not isinstance(k, str):
                continue
            if isinstance(v, (int, float)):
                out[k] = float(v)
            elif isinstance(v, str):
                f = _to_float(v.strip())
                if f is not None:
                    out[k] = f
        return out or None
    # nan/inf are not Python literals: fall back to key/value pairs.
    pairs = {k: _to_float(v) for k, v in _PAIR.findall(text)}
    pairs = {k: v for k, v in pairs.items() if v is not None}
    return pairs or None


def classify_trainer_dict(values: dict[str, float]) -> str:
    if "train_runtime" in values:
        return "final"
    if any(k.startswith("eval_") for k in values):
        return "eval"
    if "loss" in values:
        return "train"
    return "other"


def split_lines(text: str) -> list[LogLine]:
    """Lines, then their `\\r` segments (a file keeps every overwritten tqdm frame), with rank prefixes."""
    out: list[LogLine] = []
    for i, raw in enumerate(text.split("\n"), start=1):
        raw = raw.rstrip("\r")
        rank = None
        m = _LABEL.match(raw)
        if m:
            rank, raw = int(m.group(1)), raw[m.end():]
        for seg in raw.split("\r"):
            r = rank
            m2 = _RANK_TAG.match(seg)
            if m2:
                r, seg = int(m2.group(1)), seg[m2.end():]
            if seg.strip():
                out.append(LogLine(i, r, seg))
    return out


def _step_values(rest: str) -> dict[str, float]:
    """`| loss 5.81 | 12.3 samples/s | mem 480 MB` → {'loss': 5.81, 'samples/s': 12.3, 'mem': 480.0}."""
    vals: dict[str, float] = {}
    for part in rest.split("|"):
        words = part.split()
        if len(words) < 2:
            continue
        first = _to_float(words[0].rstrip("%"))
        if first is not None:  # "12.3 samples/s"
            vals[words[1]] = first
        else:  # "loss 5.81", "mem 480 MB", "mfu 0.01%"
            value = _to_float(words[1].rstrip("%"))
            if value is not None:
                vals[words[0]] = value
    return vals


def _parse_bw_row(m: re.Match[str]) -> BandwidthRow | None:
    cols = m.group(6).split()
    if len(cols) < 4:
        return None

    def num(s: str) -> float | None:
        return None if s == "N/A" else _to_float(s)

    def wrong(s: str) -> int | None:
        f = num(s)
        return int(f) if f is not None and math.isfinite(f) else None

    t, a, b = num(cols[0]), num(cols[1]), num(cols[2])
    if t is None or a is None or b is None:
        return None
    row = dict(size_bytes=int(m.group(1)), count=int(m.group(2)), dtype=m.group(3), redop=m.group(4),
               root=int(m.group(5)), time_us=t, algbw_GBps=a, busbw_GBps=b, wrong=wrong(cols[3]))
    if len(cols) >= 8:
        row.update(inplace_time_us=num(cols[4]), inplace_algbw_GBps=num(cols[5]),
                   inplace_busbw_GBps=num(cols[6]), inplace_wrong=wrong(cols[7]))
    return BandwidthRow(**row)


def _slurm_event(line: LogLine) -> SlurmEvent | None:
    t = line.text
    m = _SLURM_CANCEL.search(t)
    if m:
        reason = m.group(5).strip().strip("*").strip()
        low = reason.lower()
        kind = "cancelled"
        if "time limit" in low:
            kind = "time_limit"
        elif "node fail" in low:
            kind = "node_failure"
        elif "preempt" in low:
            kind = "preempted"
        reason = re.sub(r"^due to\s+", "", reason, flags=re.I) or None
        return SlurmEvent(kind, t.strip(), line.lineno, job_id=m.group(2), node=m.group(3), reason=reason)
    if _SLURM_OOM.search(t) and ("slurmstepd" in t or "cgroup" in t or "StepId" in t):
        return SlurmEvent("oom_kill", t.strip(), line.lineno)
    m = _SLURM_NODEFAIL.search(t)
    if m and ("srun" in t or "slurm" in t.lower() or "JOB" in t):
        return SlurmEvent("node_failure", t.strip(), line.lineno, node=m.group(1))
    m = _SLURM_TASK.search(t)
    if m:
        return SlurmEvent("task_exit", t.strip(), line.lineno, node=m.group(1), reason=m.group(3).strip())
    return None


# ---------------------------------------------------------------------------------------- parsing


def read_text(source: str | Path) -> tuple[str, str]:
    """(text, name) of a log given as a path or as the text itself; undecodable bytes are replaced."""
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and len(source) < 4096
                                    and source and Path(source).is_file()):
        p = Path(source)
        return p.read_bytes().decode("utf-8", errors="replace"), str(p)
    return str(source), "<text>"


def parse_log(source: str | Path) -> ParsedLog:
    """Parse a job's stdout/stderr (a path or the text). Never raises on bad input."""
    text, name = read_text(source)
    return parse_text(text, name)


# lines only the training script's global rank 0 prints: the label in front of them is rank 0's
_RANK0_MARKERS = (*(log_records.marker(k) for k in log_records.KINDS), "[workshop] ")


def _record_ranks(lines: list[LogLine]) -> list[int]:
    """The labels (`srun --label` / `[rankN]:` prefixes) whose lines hold the run's metrics, global rank 0's
    first. A label is a Slurm task id, not a global rank: with c10d rendezvous the node that holds rank 0
    can be any task. Only rank 0 prints WORKSHOP_* and `[workshop]` lines, so the label in front of them
    is rank 0's; without them (a log cut short), the lowest label is taken."""
    ranks = sorted({ln.rank for ln in lines if ln.rank is not None and any(m in ln.text for m in _RECORD_MARKERS)})
    zero = next((ln.rank for ln in lines if ln.rank in ranks and any(m in ln.text for m in _RANK0_MARKERS)), None)
    return ranks if zero is None else [zero, *(r for r in ranks if r != zero)]


class _Reader:
    """One pass over a log's lines: each kind of line has its rule (`_RULES`, in order; a rule returns whether it
    took the line), and whatever repeats (several nodes print the same records) is kept once."""

    def __init__(self, log: ParsedLog) -> None:
        self.log, self.seen, self.bw, self.bw_hosts = log, set(), Bandwidth(), {}
        # Several nodes each print the Trainer's dicts (with their own throughput): read global rank 0's.
        self.other_ranks = set(log.record_ranks[1:])

    def once(self, key: tuple[Any, ...]) -> bool:
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def other_rank(self, line: LogLine, t: str) -> bool:
        return line.rank in self.other_ranks and any(m in t for m in _RECORD_MARKERS)

    def once_line(self, line: LogLine, t: str) -> bool:
        found = next(((pattern, attr) for marker, pattern, attr in _ONCE_LINES if marker in t), None)
        if found is None:
            return False
        m = found[0].search(t)
        obj = json_obj(m.group(1)) if m else None
        if obj is None:
            self.log.bad_lines.append(line.lineno)
        else:
            setattr(self.log, found[1], obj)
        return True

    def metrics(self, line: LogLine, t: str) -> bool:
        m = _METRICS.search(t)
        obj = json_obj(m.group(1)) if m else None
        if obj is None:
            self.log.bad_lines.append(line.lineno)
        elif self.once(("metrics", json.dumps(obj, sort_keys=True, default=str))):
            self.log.metrics.append(MetricRecord(str(obj.get("kind", "train")), obj, line.lineno))
        return True

    def rank_fact(self, line: LogLine, t: str) -> bool:
        m = _RANKLINE.search(t)
        if m and self.once(("rank", m.group(1), m.group(2), m.group(3))):
            values: dict[str, Any] = {}
            for k, v in _KV.findall(m.group(3)):
                f = _to_float(v)
                values[k] = f if f is not None else v
            self.log.rank_facts.append(RankFact(int(m.group(1)), m.group(2), m.group(3), values, line.lineno))
        return True

    def step(self, line: LogLine, t: str) -> bool:
        m = _STEP.search(t)
        if m and self.once(("step", m.group(0))):
            total = int(m.group(2)) if m.group(2) else None
            self.log.steps.append(StepLine(int(m.group(1)), total, _step_values(m.group(3)), line.lineno))
        return True

    def trainer(self, line: LogLine, t: str) -> bool:
        for m in _DICT.finditer(t):
            values = parse_trainer_dict(m.group(0))
            if values is not None and self.once(("trainer", tuple(sorted(values.items())))):
                self.log.trainer.append(TrainerRecord(classify_trainer_dict(values), values, line.lineno))
        return True

    def nccl(self, line: LogLine, t: str) -> bool:
        m = _NCCL_CHANNEL.search(t)
        if m and self.once(("nccl", m.groups())):
            self.bw.channels.append((int(m.group(1)), int(m.group(2)), m.group(3)))
        m = _NCCL_NETWORK.search(t)
        if m:
            self.bw.network = m.group(1)
        return True

    def bandwidth_comment(self, line: LogLine, t: str) -> bool:
        """The self-test's `#` lines (workshop.comm.bandwidth prints nccl-tests' shape)."""
        bw = self.bw
        if m := _BW_AVG.search(t):
            bw.avg_busbw_GBps = _to_float(m.group(1))
        elif m := _BW_GATE.search(t):
            bw.gate_line_GBps = _to_float(m.group(1))
        elif m := _BW_DEV.search(t):
            self.bw_hosts[int(m.group(1))] = m.group(2)
        elif m := _BW_HOSTS.search(t):
            bw.n_nodes, bw.n_ranks = int(m.group(1)), int(m.group(2))
        elif m := _BW_VERDICT.match(t.strip()):
            if m.group(1) == "PASSED":
                bw.passed = bw.passed if bw.passed is False else True
            else:
                bw.passed = False
                if m.group(2) and m.group(2) not in bw.failures:
                    bw.failures.append(m.group(2))
        elif m := _BW_NGPUS.search(t):
            bw.n_ranks = int(m.group(1)) * int(m.group(2))
        return True

    def bandwidth_row(self, line: LogLine, t: str) -> bool:
        m = _BW_ROW.match(t)
        if not m:
            return False     # not a row: a Slurm line may still start with a digit or a space
        row = _parse_bw_row(m)
        if row is not None and self.once(("bw", row)):
            self.bw.rows.append(row)
        return True

    def slurm(self, line: LogLine, t: str) -> bool:
        ev = _slurm_event(line)
        if ev is not None and self.once(("slurm", ev.kind, ev.job_id, ev.node, ev.reason, ev.text)):
            self.log.slurm.append(ev)
        return True

    def finish(self) -> None:
        bw = self.bw
        if bw.rows or bw.avg_busbw_GBps is not None or bw.failures:
            if self.bw_hosts:
                bw.hosts = [self.bw_hosts[r] for r in sorted(self.bw_hosts)]
                bw.n_ranks = max(bw.n_ranks or 0, len(self.bw_hosts))
                bw.n_nodes = bw.n_nodes or len(set(bw.hosts))
            self.log.bandwidth = bw


# (the line holds..., the rule that reads it), tried in order; the first rule that takes a line ends its reading
_RULES: tuple[tuple[Callable[[str], bool], Callable[[_Reader, LogLine, str], bool]], ...] = (
    (lambda t: True, _Reader.other_rank),
    (lambda t: True, _Reader.once_line),
    (lambda t: log_records.marker(log_records.METRICS) in t, _Reader.metrics),
    (lambda t: "[workshop rank" in t, _Reader.rank_fact),
    (lambda t: "[workshop] step" in t, _Reader.step),
    (lambda t: "{'" in t, _Reader.trainer),
    (lambda t: "NCCL INFO" in t, _Reader.nccl),
    (lambda t: t.lstrip().startswith("#"), _Reader.bandwidth_comment),
    (lambda t: t[:1].isspace() or t[:1].isdigit(), _Reader.bandwidth_row),
    (lambda t: "***" in t or "slurmstepd" in t or "srun:" in t, _Reader.slurm),
)


def parse_text(text: str, name: str = "<text>") -> ParsedLog:
    log = ParsedLog(source=name)
    log.lines = split_lines(text.replace("\x00", ""))
    log.record_ranks = _record_ranks(log.lines)
    reader = _Reader(log)
    for line in log.lines:
        for holds, rule in _RULES:
            if holds(line.text) and rule(reader, line, line.text):
                break
    reader.finish()
    log.missing = _missing(log)
    return log


def json_obj(text: str) -> dict[str, Any] | None:
    """The JSON object at the start of `text`, None if there is none. What follows it is ignored: a
    line another process wrote into the middle of ours (before our newline) must not lose our record."""
    try:
        obj, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _missing(log: ParsedLog) -> list[str]:
    """What a table might want and the log does not hold (bandwidth-only logs need no training)."""
    missing = []
    if log.bandwidth is not None and not (log.trainer or log.metrics or log.summary):
        if not log.bandwidth.rows:
            missing.append("bandwidth rows")
        if log.bandwidth.avg_busbw_GBps is None:
            missing.append("average bus bandwidth")
        return missing
    if log.summary is None:
        missing.append("summary (WORKSHOP_SUMMARY / summary.json)")
    if not log.metrics:
        missing.append("metrics (WORKSHOP_METRICS / metrics.jsonl)")
    if not log.train_records and not log.train_metrics:
        missing.append("train loss records")
    if not log.eval_records and not log.eval_metrics:
        missing.append("eval records")
    if log.final_record is None and log.summary is None:
        missing.append("final train_runtime record")
    if log.run_args is None:
        missing.append("run args (WORKSHOP_RUN_ARGS / run_args.json)")
    return missing


# ---------------------------------------------------------------------------------------- run folders

LOG_GLOBS = ("*.out", "*.err", "*.log", "slurm-*.txt")


def read_run_dir(path: str | Path) -> ParsedLog:
    """A run folder: summary.json, metrics.jsonl, run_args.json, plus any job log files inside it."""
    path = Path(path)
    texts = []
    for pattern in LOG_GLOBS:
        for p in sorted(path.glob(pattern)):
            texts.append(p.read_bytes().decode("utf-8", errors="replace"))
    log = parse_text("\n".join(texts), str(path))
    summary = _read_json(path / "summary.json")
    if summary is not None:
        log.summary = summary
    run_args = _read_json(path / "run_args.json")
    if run_args is not None:
        log.run_args = run_args
    mpath = path / "metrics.jsonl"
    if mpath.is_file():
        recs: list[MetricRecord] = []
        for i, line in enumerate(mpath.read_text(errors="replace").splitlines(), start=1):
            obj = json_obj(line.strip()) if line.strip() else None
            if obj is None:
                if line.strip():
                    log.bad_lines.append(i)
                continue
            recs.append(MetricRecord(str(obj.get("kind", "train")), obj, i))
        if recs:
            log.metrics = recs  # the file is the record; printed copies may be partial
    log.missing = _missing(log)
    return log


def _read_json(p: Path) -> dict[str, Any] | None:
    if not p.is_file():
        return None
    return json_obj(p.read_text(errors="replace"))


def load(source: str | Path | ParsedLog) -> ParsedLog:
    """A ParsedLog from a log file, a run folder, log text or an already parsed log."""
    if isinstance(source, ParsedLog):
        return source
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and len(source) < 4096):
        p = Path(source)
        try:
            if p.is_dir():
                return read_run_dir(p)
        except OSError:
            pass
    return parse_log(source)


def load_all(sources: Iterable[str | Path | ParsedLog]) -> list[ParsedLog]:
    return [load(s) for s in sources]


def load_named(sources: Sequence[str | Path | ParsedLog], names: Sequence[str] | None = None) -> list[tuple[str, ParsedLog]]:
    """(name, log) per source: the caller's names, one per source, else each log's own label. The
    comparison tables (memory, communication) name their rows this way."""
    logs = load_all(sources)
    if names is not None and len(names) != len(logs):
        raise ValueError(f"{len(names)} names for {len(logs)} runs")
    return [(names[i] if names is not None else log.label, log) for i, log in enumerate(logs)]
