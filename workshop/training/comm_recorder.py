"""Every collective of one optimizer step, recorded on every rank: `summary.json`'s `comm` and the
run folder's `comm_trace.json` (Perfetto / chrome://tracing open it; one process per rank).

Why one step: a step of the course's runs repeats the same collectives (the same units gathered and
reduced, on the same groups), so one step says what every step sends; the profiler's trace of one step
stays small (about 0.1 MB per rank for the tiny model, cut from 1.1 MB by
`workshop.training.comm_trace.cut`), and the rest of the run is not slowed.

Which step: the third optimizer step of the run (after the warm-up step and the tensor-memory
tracker's step, which runs under a dispatch mode that would swell every operator's time), or the
latest step that is neither where the run is shorter. The step is left out of the summary's throughput
(`StepCounter.leave_out_of_throughput`, at train start): the window times the steps around it, so
neither the profiled step nor the trace's processing after it is counted.

What is recorded (workshop.training.comm_trace): from the Trainer's `on_step_begin` to its
`on_step_end`, i.e. the forward and backward of every micro-batch, gradient clipping and the optimizer
step; not the batch fetch before it nor the logging after it. PyTorch's flight recorder is switched on
for the run (`enable_flight_recorder`, before the process group exists) because gloo tells the
profiler nothing of a collective's group.

A step whose trace cannot be taken (a profiler error, a collective of unknown kind, a flight recorder
that does not match) still trains: `comm` then says `"status": "not measured"` and why, per rank,
and the tables show "not measured", never zeros.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any, MutableMapping, Sequence

import torch
from transformers import TrainerCallback

from workshop.training import comm_trace, torch_private
from workshop.training.counted_steps import INSTRUMENTED_STEPS
from workshop.training.metrics import StepCounter, all_gather

FLIGHT_RECORDER_ENV = "TORCH_FR_BUFFER_SIZE"
FLIGHT_RECORDER_ENTRIES = "4096"  # collectives kept (a ring buffer); BLOOM-560M's step issues ~80 per micro-batch
TRACE_FILE = "comm_trace.json"
RECORD_STEP = INSTRUMENTED_STEPS["comm"]
KIND_ORDER = ("all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce", "gather", "scatter",
              "all_to_all", "send", "recv", "barrier")


def enable_flight_recorder(env: MutableMapping[str, str] = os.environ) -> None:
    """Switch PyTorch's flight recorder on for the process groups created after this call (it reads
    the variable when a group is made). A value already set (a site's own debugging setting) is kept."""
    env.setdefault(FLIGHT_RECORDER_ENV, FLIGHT_RECORDER_ENTRIES)


def flight_entries() -> list[dict[str, Any]] | None:
    """The flight recorder's entries, or None when it is off or this torch has none."""
    if int(os.environ.get(FLIGHT_RECORDER_ENV, "0") or 0) <= 0:
        return None
    try:
        text = torch_private.flight_recorder_json()
    except torch_private.NotOnThisTorch as e:
        torch_private.not_measured("collectives' process groups from the flight recorder", e)
        return None
    return json.loads(text).get("entries") or []


def start_debug_count() -> Any:
    """PyTorch's CommDebugMode (torch.distributed.tensor.debug, a public dispatch mode) entered around the
    recorded step: a second count of its collectives, independent of the profiler's trace and the
    flight recorder, which the course reads through private surfaces (workshop.training.torch_private).
    tests/test_comm.py holds the two counts equal for every strategy, so a torch upgrade that breaks the
    recorder shows there. None when it cannot start (the step is still recorded)."""
    try:
        from torch.distributed.tensor.debug import CommDebugMode

        mode = CommDebugMode()
        mode.__enter__()
        return mode
    except Exception:  # noqa: BLE001  (a second count is a check, never a reason to stop training)
        return None


def stop_debug_count(mode: Any) -> dict[str, int] | None:
    """The collectives CommDebugMode counted, by the course's kind (comm_trace.debug_mode_kinds)."""
    if mode is None:
        return None
    try:
        mode.__exit__(None, None, None)
        return comm_trace.debug_mode_kinds(mode.get_comm_counts())
    except Exception:  # noqa: BLE001
        return None


def _add_counts(total: dict[str, int] | None, more: dict[str, int] | None) -> dict[str, int] | None:
    """Sum of two counts by kind; None (not counted) if either is."""
    if total is None or more is None:
        return None
    return {k: total.get(k, 0) + more.get(k, 0) for k in {**total, **more}}


def choose_step(first: int, max_steps: int, avoid: int | None, preferred: int = RECORD_STEP) -> int | None:
    """The optimizer step (1-based, counted over the run) to record: `preferred` steps after `first`
    (the step the run starts from, > 0 after a resume), or the latest one that is not `avoid` (the
    tensor-memory tracker's); None when the run has no other step."""
    last = max_steps
    wanted = min(first + preferred, last)
    for step in range(wanted, first, -1):
        if step != avoid:
            return step
    for step in range(wanted + 1, last + 1):
        if step != avoid:
            return step
    return None


class CommRecorder(TrainerCallback):
    """Profiles one optimizer step on every rank and turns it into `comm` (register it FIRST, so that
    its `on_step_end` closes the trace before other callbacks' collectives: the stop flag, the logs)."""

    def __init__(self, out_dir: str | Path, device: torch.device, counter: StepCounter, hosts: Sequence[str],
                 rank: int, is_main: bool, enabled: bool = True, avoid_step: int | None = None,
                 record_step: int = RECORD_STEP) -> None:
        self.out = Path(out_dir)
        self.device, self.counter, self.hosts, self.rank, self.is_main = device, counter, list(hosts), rank, is_main
        self.enabled, self.avoid_step, self.record_step = enabled, avoid_step, record_step
        self.step: int | None = None
        self.reason: str | None = None if enabled else "recording is off (comm_record=false)"
        self.result: list[dict[str, Any]] | None = None  # every rank's outcome, gathered
        self.trace_file: str | None = None
        self.trace_error: str | None = None
        self.steps_s: list[float] = []  # the steady steps' times: not the first, the tracker's or the recorded one
        self._first: int | None = None
        self._avoid: int | None = avoid_step
        self.recorded_s: float | None = None
        self._profiler: Any = None
        self._armed = False
        self._error: str | None = None
        self._started = 0.0
        self._debug: Any = None   # CommDebugMode around the recorded step: the second count
        self._debug_counts: dict[str, int] | None = {}

    # ------------------------------------------------------------------ the Trainer's events
    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
        self._first = state.global_step + 1
        if self.avoid_step is not None:  # the tracker's own rule (TensorMemoryCallback.on_train_begin)
            self._avoid = min(self.avoid_step, max(1, state.max_steps))
        if self.enabled:
            self.step = choose_step(state.global_step, state.max_steps, self._avoid, self.record_step)
            if self.step is None:
                self.reason = (f"the run has no optimizer step to record besides step {self._avoid}, which the "
                               "tensor-memory tracker measures (train for at least 2 steps)")
            else:   # the recorded step is not training at speed: the summary's throughput leaves it out
                self.counter.leave_out_of_throughput(self.step, "comm")

    def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001
        self._started = time.perf_counter()
        if self.step is None or state.global_step + 1 != self.step:
            return
        self._armed, self._error = True, None
        try:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._profiler = torch.profiler.profile(activities=activities, record_shapes=True)
            self._profiler.__enter__()
        except Exception as e:  # noqa: BLE001  (the run trains on; comm says why it has no figures)
            self._profiler, self._error = None, f"the profiler did not start: {type(e).__name__}: {e}"
            return
        self._debug, self._debug_counts = start_debug_count(), {}

    def on_substep_end(self, args, state, control, **kwargs):  # noqa: ANN001
        """Between micro-batches: a new CommDebugMode for the next one. Its module tracker takes a second
        forward in one mode for a nested module and fails (IndexError in _fw_set_module_hook, torch 2.13)."""
        if self._armed and self._debug is not None:
            self._debug_counts = _add_counts(self._debug_counts, stop_debug_count(self._debug))
            self._debug = start_debug_count()

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
        if not self._armed:
            if state.global_step not in (self._first, self._avoid):
                self.steps_s.append(time.perf_counter() - self._started)
            return
        self._armed = False
        local, events = self._read_own_step()
        gathered = all_gather(local)  # every rank calls these two, whatever happened on it
        all_events = _gather_to_main(events)
        self.result = gathered
        if self.is_main and all(r.get("records") is not None for r in gathered):
            self._write_trace(all_events)
        self.recorded_s = time.perf_counter() - self._started

    # ------------------------------------------------------------------ this rank
    def _read_own_step(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(what this rank measured, or why not; its cut trace events)."""
        local: dict[str, Any] = {"rank": self.rank, "host": self.hosts[self.rank] if self.rank < len(self.hosts) else None,
                                 "records": None, "error": self._error}
        if self._profiler is None:
            return local, []
        try:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            local["debug_mode_calls"] = _add_counts(self._debug_counts, stop_debug_count(self._debug)) \
                if self._debug is not None else None
            self._debug = None
            marks = [time.perf_counter()]
            local["step_ms"] = round((marks[0] - self._started) * 1000, 3)  # the step itself, profiled
            self._profiler.__exit__(None, None, None)
            end_ns = time.time_ns()
            marks.append(time.perf_counter())
            trace = comm_trace.from_profiler(self._profiler, end_ns)
            marks.append(time.perf_counter())
            step = comm_trace.Step(trace)
            records = comm_trace.collectives(step, flight_entries(), self.hosts, self.rank)
            events = comm_trace.cut(step, records, self.rank, local["host"] or "?")
            marks.append(time.perf_counter())
            local["records"] = [comm_trace.public(r) for r in records]
            local["profiled_events"] = len(step.events)
            # what reading the step cost after it: the profiler's stop, its events, our parse and cut
            local["reading_ms"] = {name: round((b - a) * 1000, 1) for name, a, b in
                                   zip(("stop", "events", "parse"), marks, marks[1:])}
            return local, events
        except torch_private.NotOnThisTorch as e:
            local["error"] = torch_private.not_measured("the step's collectives (profiler)", e)
            return local, []
        except Exception as e:  # noqa: BLE001
            local["error"] = f"{type(e).__name__}: {e}"
            return local, []
        finally:
            self._profiler = None

    def _write_trace(self, per_rank_events: list[list[dict[str, Any]]]) -> None:
        """One file, every rank a process, time from the step's first event on any rank (the ranks'
        clocks are the nodes' wall clocks: across nodes, as close as the nodes' clock sync)."""
        merged, origin = comm_trace.merge(per_rank_events)
        doc = {"traceEvents": merged, "displayTimeUnit": "ms",
               "workshop": {"step": self.step, "origin_ns": origin, "ranks": len(per_rank_events),
                            "hosts": self.hosts, "device": self.device.type}}
        path = self.out / TRACE_FILE
        try:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(doc, separators=(",", ":")))
            tmp.replace(path)
            self.trace_file = TRACE_FILE
        except OSError as e:
            self.trace_error = f"{type(e).__name__}: {e}"

    # ------------------------------------------------------------------ summary.json
    def summary(self, train_runtime_s: float | None = None) -> dict[str, Any]:
        """`comm` for summary.json (the same on every rank)."""
        if self.result is None:
            reason = self.reason or (f"the run ended before step {self.step}, the one chosen for recording"
                                     if self.step else "nothing was recorded")
            return not_measured(reason, self.step)
        failed = [r for r in self.result if r.get("records") is None]
        if failed:
            by_error: dict[str, list[str]] = {}
            for r in failed:
                by_error.setdefault(r.get("error") or "no trace", []).append(str(r["rank"]))
            why = "; ".join(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(ranks)}: {error}"
                            for error, ranks in by_error.items())
            return not_measured(f"the step's trace could not be read ({why})", self.step,
                                per_rank_errors={r["rank"]: r.get("error") for r in failed})
        out = summarize(self.result, self.hosts, self.step, backend_name())
        out["trace"] = self.trace_file
        if self.trace_error:
            out["missing"] = [f"trace: {TRACE_FILE} could not be written ({self.trace_error})"]
        out["overhead_pct"] = self.overhead_pct(train_runtime_s)
        return out

    def overhead_pct(self, train_runtime_s: float | None) -> float | None:
        """The recorded step's extra time (reading its trace included) over the median steady step (not the
        first, nor the tensor-memory tracker's), as a share of the training time; the flight recorder's
        cost over the run is benchmarks/comm_overhead.py's."""
        if self.recorded_s is None or not self.steps_s or not train_runtime_s:
            return None
        extra = max(0.0, self.recorded_s - statistics.median(self.steps_s))
        return round(100 * extra / train_runtime_s, 2)


def _gather_to_main(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Every rank's cut trace on rank 0 (the others get nothing back: only rank 0 writes)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return [events]
    out: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(events, out, dst=0)
    return out or []


def backend_name() -> str | None:
    import torch.distributed as dist

    return dist.get_backend() if dist.is_available() and dist.is_initialized() else None


def not_measured(reason: str, step: int | None, **extra: Any) -> dict[str, Any]:
    return {"status": "not measured", "reason": reason, "step": step, **extra}


def _add(into: dict[str, dict[str, float]], kind: str, **values: float | None) -> None:
    slot = into.setdefault(kind, {})
    for key, v in values.items():
        if v is not None:
            slot[key] = round(slot.get(key, 0) + v, 4)


def summarize(per_rank: list[dict[str, Any]], hosts: Sequence[str], step: int | None,
              backend: str | None) -> dict[str, Any]:
    """`comm` from every rank's records: per rank, by kind, the collectives' calls, elements, bytes,
    ring-sent bytes and time; those sent bytes split by where their group lives (`intra_node`: a group
    inside one node; `inter_node`: a group that spans nodes) and `network`, what the ring sends to a
    rank on another node; per node, `network` summed over its ranks: the bytes that leave the node."""
    ranks, nodes = [], {}
    for r in sorted(per_rank, key=lambda x: x["rank"]):
        by_kind: dict[str, dict[str, float]] = {}
        intra: dict[str, dict[str, float]] = {}
        inter: dict[str, dict[str, float]] = {}
        network: dict[str, dict[str, float]] = {}
        for c in r["records"]:
            _add(by_kind, c["kind"], calls=1, elements=c["elements"], bytes=c["bytes"], sent_elements=c["sent_elements"],
                 sent_bytes=c["sent_bytes"], time_ms=c["time_ms"])
            _add(inter if c["spans_nodes"] else intra, c["kind"], sent_bytes=c["sent_bytes"])
            _add(network, c["kind"], sent_bytes=c["network_bytes"])
        ordered = {k: by_kind[k] for k in sorted(by_kind, key=_kind_rank)}
        entry = {"rank": r["rank"], "host": r.get("host"), "by_kind": ordered,
                 "intra_node_bytes": {k: v["sent_bytes"] for k, v in sorted(intra.items(), key=lambda kv: _kind_rank(kv[0]))},
                 "inter_node_bytes": {k: v["sent_bytes"] for k, v in sorted(inter.items(), key=lambda kv: _kind_rank(kv[0]))},
                 "network_bytes": {k: v["sent_bytes"] for k, v in sorted(network.items(), key=lambda kv: _kind_rank(kv[0]))
                                   if v["sent_bytes"]},
                 "collectives": len(r["records"]), "step_ms": r.get("step_ms"),
                 "debug_mode_calls": r.get("debug_mode_calls"),
                 "collective_ms": round(sum(c["time_ms"] or 0 for c in r["records"]), 3),
                 "profiled_events": r.get("profiled_events"), "reading_ms": r.get("reading_ms")}
        ranks.append(entry)
        node = nodes.setdefault(str(r.get("host")), {"ranks": [], "network_bytes": {}})
        node["ranks"].append(r["rank"])
        for k, v in entry["network_bytes"].items():
            node["network_bytes"][k] = node["network_bytes"].get(k, 0) + v
    groups: dict[tuple[int, ...], dict[str, Any]] = {}
    for r in per_rank:
        for c in r["records"]:
            groups.setdefault(tuple(c["group"]), {"ranks": c["group"], "desc": c.get("group_desc"),
                                                  "spans_nodes": c["spans_nodes"], "nodes": c["nodes"]})
    return {"status": "measured", "step": step, "backend": backend, "per_rank": ranks, "per_node": nodes,
            "groups": sorted(groups.values(), key=lambda g: (len(g["ranks"]), g["ranks"]))}


def _kind_rank(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
