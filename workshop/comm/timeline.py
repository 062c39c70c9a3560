"""One recorded step as a timeline: per rank, when it computed and when each collective ran, read from
the run's `comm_trace.json` (workshop.training.comm_recorder writes it; Perfetto opens the same file).

Why its own reader: the plot (workshop.comm.plots.step_timeline) and the figures a notebook
quotes under it (how much of each rank's collective time overlapped compute, how much was exposed)
come from the same spans, so they cannot disagree.

Compute is the outermost PyTorch operators on the threads that run the step (on a GPU: the kernels
on its streams, the CPU's operators only launch them); a collective's span is the backend's (gloo's
worker thread, NCCL's kernel), waiting for the slowest rank included. On the CPU profiles a rank's
thread waits for each collective before it goes on, so compute and collectives alternate; on a GPU,
NCCL's kernels run on their own stream beside the compute kernels, and `overlapped_ms` shows what
the prefetch hid.

Overlap means a collective running while the rank computes the model: its time counts as overlapped
only where a compute span (an operator of the model's forward, backward or optimizer step; on a GPU a
compute kernel) covers it. Copies are a lane of their own (`copy_ms`), never compute: FSDP2's copy-in
of an all-gather's or reduce-scatter's buffer and its copy-out after it, and CPU offload's host<->device
transfers (workshop.training.comm_trace.COPY_OPS). They serve the collective; a collective beside one
is not hidden behind the model's work, so counting copies as compute would overstate what prefetch hid.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRACE_FILE = "comm_trace.json"


@dataclass
class RankLane:
    """One rank's step: compute spans and collectives, milliseconds from the step's first event."""

    rank: int
    host: str
    compute: list[tuple[float, float]] = field(default_factory=list)  # (start_ms, end_ms), merged
    collectives: list[dict[str, Any]] = field(default_factory=list)  # record + start_ms, end_ms
    copies: list[tuple[float, float]] = field(default_factory=list)  # (start_ms, end_ms), merged

    @property
    def copy_ms(self) -> float:
        return sum(end - start for start, end in self.copies)

    @property
    def collective_ms(self) -> float:
        return sum(c["end_ms"] - c["start_ms"] for c in self.collectives)

    @property
    def compute_ms(self) -> float:
        return sum(end - start for start, end in self.compute)

    @property
    def overlapped_ms(self) -> float:
        """Collective time during which this rank also computed the model (what prefetch and overlap hid);
        time beside a copy only is not overlap (module docstring)."""
        return sum(_overlap(span, self.compute) for span in _merged_collectives(self))

    @property
    def exposed_ms(self) -> float:
        """Collective time with no compute beside it: what the step waited for."""
        return sum(end - start for start, end in _merged_collectives(self)) - self.overlapped_ms


@dataclass
class Timeline:
    step: int | None
    device: str
    lanes: list[RankLane]

    def summary(self) -> list[dict[str, Any]]:
        """Per rank: compute, collective, overlapped and exposed milliseconds of the step."""
        return [{"rank": lane.rank, "host": lane.host, "compute_ms": round(lane.compute_ms, 3),
                 "copy_ms": round(lane.copy_ms, 3),
                 "collective_ms": round(lane.collective_ms, 3), "overlapped_ms": round(lane.overlapped_ms, 3),
                 "exposed_ms": round(lane.exposed_ms, 3)} for lane in self.lanes]


def trace_path(source: Any) -> Path:
    """The trace of a job (its `run_dir`), a run folder, a job folder (its `run/`), a job log beside a
    `run/` folder, or the file itself."""
    if hasattr(source, "run_dir"):
        source = source.run_dir
    path = Path(source)
    if path.is_file() and path.name.endswith(".json"):
        return path
    folder = path.parent if path.is_file() else path  # a job log: its run folder is beside it
    for candidate in (folder / TRACE_FILE, folder / "run" / TRACE_FILE):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no {TRACE_FILE} for {source}: the run recorded no step trace (its summary.json's "
                            "comm says why), or it ran before this version of workshop")


def read_timeline(source: Any) -> Timeline:
    """The recorded step of a run (see trace_path for what `source` may be)."""
    doc = json.loads(trace_path(source).read_text())
    meta = doc.get("workshop") or {}
    hosts = meta.get("hosts") or []
    lanes: dict[int, RankLane] = {}
    raw: dict[int, list[tuple[float, float]]] = {}
    copies: dict[int, list[tuple[float, float]]] = {}
    for e in doc.get("traceEvents", []):
        if e.get("ph") != "X" or not isinstance(e.get("pid"), int):
            continue
        rank = e["pid"]
        lane = lanes.setdefault(rank, RankLane(rank, hosts[rank] if rank < len(hosts) else "?"))
        start, end = e["ts"] / 1000, (e["ts"] + e["dur"]) / 1000
        kind = (e.get("args") or {}).get("lane")
        if kind == "compute":
            raw.setdefault(rank, []).append((start, end))
        elif kind == "copy":
            copies.setdefault(rank, []).append((start, end))
        elif kind == "collective":
            args = e["args"]
            lane.collectives.append({**{k: v for k, v in args.items() if k != "lane"}, "start_ms": start, "end_ms": end})
    for rank, spans in raw.items():
        lanes[rank].compute = _merge(spans)
    for rank, spans in copies.items():
        lanes[rank].copies = _merge(spans)
    for lane in lanes.values():
        lane.collectives.sort(key=lambda c: c["start_ms"])
    return Timeline(meta.get("step"), str(meta.get("device") or "cpu"), [lanes[r] for r in sorted(lanes)])


def _merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _merged_collectives(lane: RankLane) -> list[tuple[float, float]]:
    return _merge([(c["start_ms"], c["end_ms"]) for c in lane.collectives])


def _overlap(span: tuple[float, float], spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(span[1], end) - max(span[0], start)) for start, end in spans)
