"""One optimizer step's collectives, read from what PyTorch's own recorders wrote: kind, size, dtype,
process group, time; and the step's trace, cut to what a timeline needs.

Why two recorders, both shipped with PyTorch:
- the profiler's trace (`torch.profiler`, `record_shapes=True`) holds every c10d operator a rank
  called (`c10d::_allgather_base_`, `c10d::_reduce_scatter_base_`, `c10d::allreduce_`, ...) with its
  tensors' shapes and dtype, on every backend, and the backend's own span of the work: gloo's worker
  event (`gloo:all_gather`, on the process group's worker thread) or NCCL's kernel on its stream. On
  NCCL, `record_param_comms` (and the kernel) also carry the group's ranks.
- gloo writes no `record_param_comms`, so a gloo collective's group comes from PyTorch's flight
  recorder (`TORCH_FR_BUFFER_SIZE`), which logs each collective's process group by name on every
  backend; the trace's `distributedInfo.pg_config` gives each group's global ranks. Its entries are
  created inside the c10d operator, in the order the operators run, so the i-th entry of the step is
  the i-th operator (checked by size, pair by pair).
gloo runs a reduce-scatter as an all-reduce of the whole tensor, and its worker event and its
flight-recorder entry both say all_reduce: the kind is always the c10d operator's, what the rank asked.

Sizes, per collective: `elements` is the whole tensor (an all-gather's output, a reduce-scatter's
input, an all-reduce's buffer: nccl-tests' "size"); `sent_bytes` what each rank of the group sends
for it under the ring algorithm (nccl-tests' bus factor: (n-1)/n for all-gather and reduce-scatter,
2(n-1)/n for all-reduce); `network_bytes` the part of it that goes to a rank on another node: in a
ring over the group's ranks in order, each rank sends all of it to the next, so it is `sent_bytes`
when the next rank of the group lives on another node, else 0. A backend may send otherwise (gloo's
reduce-scatter sends an all-reduce's bytes; NCCL picks trees for some all-reduces): these are what
the course's ring rule counts, for what the rank really asked.
"""

from __future__ import annotations

import json
import os
import math
import re
from typing import Any, Callable, Iterable, Sequence

# c10d's operators (the dispatcher ops every backend implements) and the course's name for each kind
KINDS = {
    "c10d::_allgather_base_": "all_gather", "c10d::allgather_": "all_gather",
    "c10d::allgather_into_tensor_coalesced_": "all_gather", "c10d::allgather_coalesced_": "all_gather",
    "c10d::_reduce_scatter_base_": "reduce_scatter", "c10d::reduce_scatter_": "reduce_scatter",
    "c10d::reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "c10d::allreduce_": "all_reduce", "c10d::allreduce_coalesced_": "all_reduce",
    "c10d::broadcast_": "broadcast", "c10d::reduce_": "reduce", "c10d::gather_": "gather",
    "c10d::scatter_": "scatter", "c10d::alltoall_base_": "all_to_all", "c10d::alltoall_": "all_to_all",
    "c10d::send": "send", "c10d::recv_": "recv", "c10d::recv_any_source_": "recv",
    "c10d::barrier": "barrier", "c10d::monitored_barrier_": "barrier",
}
# (argument index of the output, of the input); in-place operators read and write the same tensors
OPERANDS = {"all_gather": (0, 1), "reduce_scatter": (0, 1), "all_to_all": (0, 1), "gather": (0, 1),
            "scatter": (0, 1), "all_reduce": (0, 0), "broadcast": (0, 0), "reduce": (0, 0),
            "send": (0, 0), "recv": (0, 0), "barrier": None}
# bytes each rank of an n-rank group sends, as a share of the collective's size, under the ring
# algorithm (nccl-tests' bus-bandwidth factors); broadcast, reduce, gather, scatter: the mean over ranks
RING_SHARE: dict[str, Callable[[int], float]] = {
    "all_gather": lambda n: (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
    "all_reduce": lambda n: 2 * (n - 1) / n, "broadcast": lambda n: (n - 1) / n,
    "reduce": lambda n: (n - 1) / n, "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n, "send": lambda n: 1.0, "recv": lambda n: 0.0, "barrier": lambda n: 0.0,
}
# the profiler's, the flight recorder's and record_param_comms' spellings of dtypes
DTYPES = {
    "float": ("float32", 4), "Float": ("float32", 4), "c10::BFloat16": ("bfloat16", 2), "BFloat16": ("bfloat16", 2),
    "c10::Half": ("float16", 2), "Half": ("float16", 2), "double": ("float64", 8), "Double": ("float64", 8),
    "long int": ("int64", 8), "Long": ("int64", 8), "int": ("int32", 4), "Int": ("int32", 4),
    "unsigned char": ("uint8", 1), "Byte": ("uint8", 1), "bool": ("bool", 1), "Bool": ("bool", 1),
    "signed char": ("int8", 1), "Char": ("int8", 1), "short int": ("int16", 2), "Short": ("int16", 2),
    "c10::Float8_e4m3fn": ("float8_e4m3fn", 1), "Float8_e4m3fn": ("float8_e4m3fn", 1),
}
GLOO_PREFIX, NCCL_PREFIX = "gloo:", "nccl"
# the functional collectives' names (torch.ops._c10d_functional / c10d_functional) CommDebugMode counts
FUNCTIONAL_KINDS = {
    "all_reduce": "all_reduce", "all_reduce_": "all_reduce", "all_reduce_coalesced": "all_reduce",
    "all_reduce_coalesced_": "all_reduce", "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_out": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_to_all_single": "all_to_all", "broadcast": "broadcast", "broadcast_": "broadcast",
}
# Copies, apart from compute and communication (issue #35): the operators FSDP2 registers for its
# buffers (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: `torch.library.Library("fsdp",
# "FRAGMENT")` defines all_gather_copy_in, split_with_sizes_copy and chunk_cat; _fsdp_param.py copy_),
# which the profiler records as `fsdp::<name>`, and FSDP2's own range around the all-gather's copy-out
# (`record_function("FSDP::all_gather_copy_out")` in _fsdp_param_group.py); on a GPU every kernel such
# an operator launched, and the copies Kineto records as their own activities (`gpu_memcpy`: "Memcpy
# HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)", "Memcpy DtoD (Device -> Device)", what
# CPU offload's transfers are; `gpu_memset`: "Memset (Device)").
COPY_OPS = ("fsdp::all_gather_copy_in", "fsdp::split_with_sizes_copy", "fsdp::chunk_cat", "fsdp::copy_",
            "FSDP::all_gather_copy_out")
COPY_ACTIVITIES = ("gpu_memcpy", "gpu_memset")


def debug_mode_kinds(counts: dict[Any, int]) -> dict[str, int]:
    """CommDebugMode's counts (keyed by operator packets, printed `c10d._allgather_base_`,
    `c10d_functional.all_reduce`) as {course kind: calls}; an operator of no known kind counts under its name."""
    out: dict[str, int] = {}
    for op, n in counts.items():
        namespace, _, name = str(op).rpartition(".")
        kind = KINDS.get(f"c10d::{name}") if namespace.endswith("c10d") else FUNCTIONAL_KINDS.get(name)
        kind = kind or str(op)
        out[kind] = out.get(kind, 0) + int(n)
    return out


def is_copy(name: str) -> bool:
    """An FSDP2 buffer copy (its operator or its range): see COPY_OPS."""
    return name.startswith(COPY_OPS)


class TraceError(ValueError):
    """The trace cannot be read into collectives: the message says what is missing and why."""


# ---------------------------------------------------------------------------------------- the trace


def load(path: Any) -> dict[str, Any]:
    """A trace the profiler exported (`export_chrome_trace`)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# the operators whose arguments the parser reads (the others' shapes are not asked for: a BLOOM-560M
# step has ~40,000 events)
_SHAPED = ("c10d::", GLOO_PREFIX, "record_param_comms")
GPU_TID = 1_000_000  # a GPU stream's row: GPU_TID * (device + 1) + stream, apart from the CPU's thread ids


def from_profiler(profiler: Any, end_ns: int) -> dict[str, Any]:
    """The profiled step as the exported trace would hold it, read from the profiler's results in
    memory: writing BLOOM-560M's whole trace (10 MB a rank) and reading it back cost seconds.

    CPU operators keep their correlation id as "External id", GPU kernels the id of the operator that
    launched them (Kineto's link, which torch's own event tree follows), so the two match as in an
    exported trace; `end_ns` is when the profiler stopped (wall clock)."""
    from torch.autograd import DeviceType

    from workshop.training import torch_private

    results = torch_private.kineto_results(profiler)
    if results is None:
        raise TraceError("the profiler holds no results for the step (it did not run)")
    recorded = results.events()
    if recorded and not all(hasattr(recorded[0], m) for m in _EVENT_API):
        return _exported(profiler)  # torch 2.11's events lack some of these (benchmarks/compat/compat-2026-11-28.md)
    events: list[dict[str, Any]] = []
    cpu = DeviceType.CPU
    base = results.trace_start_ns()  # `ts` counts from here, as in an exported trace: microseconds since
    # 1970 as floats would keep only a quarter of a microsecond, and nested events would seem to cross
    for e in recorded:  # as few calls per event as the parser needs: ~40,000 events for BLOOM-560M
        name = e.name()
        event = {"ph": "X", "cat": e.activity_type(), "name": name, "ts": (e.start_ns() - base) / 1000,
                 "dur": e.duration_ns() / 1000}
        if e.device_type() != cpu:
            device, stream = e.device_index(), e.device_resource_id()
            args = {"External id": e.linked_correlation_id(), "stream": stream}
            if name.lower().startswith(NCCL_PREFIX):
                args.update(e.extra_meta())
            event.update(pid=device, tid=GPU_TID * (device + 1) + stream, args=args)
        else:  # the id an NCCL kernel names when this operator (or one inside a collective's call) launched it
            event.update(pid=0, tid=e.start_thread_id(), args={"External id": e.correlation_id()})
            if name.startswith(_SHAPED):
                event["args"].update({"Input Dims": e.structured_input_shapes(), "Input type": e.dtypes(),
                                      **e.extra_meta()})  # record_param_comms' metadata
        events.append(event)
    if not events:
        raise TraceError("the profiler recorded no event in the step (was another profiler running in this "
                         "process? PyTorch's profilers do not nest: the inner one takes the events)")
    events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler", "pid": "Spans", "tid": "Trace",
                   "ts": 0.0, "dur": max(0, end_ns - base) / 1000})
    info: dict[str, Any] = {}
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        info = {"backend": dist.get_backend()}
        try:
            info["pg_config"] = torch_private.all_pg_configs()
        except torch_private.NotOnThisTorch as e:  # gloo groups' ranks then come from the flight recorder alone
            torch_private.not_measured("process groups' ranks (pg_config)", e)
    return {"traceEvents": events, "distributedInfo": info, "baseTimeNanoseconds": base}


# what from_profiler reads of each event: torch 2.13's events have all of it, torch 2.11's lack activity_type,
# extra_meta and structured_input_shapes
_EVENT_API = ("activity_type", "extra_meta", "structured_input_shapes", "linked_correlation_id", "device_resource_id")


def _exported(profiler: Any) -> dict[str, Any]:
    """The step through the profiler's own export, for a torch whose events lack what from_profiler reads:
    slower (the whole trace written and read back), same content."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="workshop-trace-") as tmp:
        path = os.path.join(tmp, "trace.json")
        profiler.export_chrome_trace(path)
        return load(path)


def spans(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace's complete events ("X") that belong to a thread of this process, in time order."""
    out = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and isinstance(e.get("tid"), int)
           and "dur" in e and e.get("cat") != "Trace"]
    return sorted(out, key=lambda e: (e["ts"], -e["dur"]))


def parents(events: Sequence[dict[str, Any]]) -> list[int | None]:
    """Index of each event's innermost enclosing event on the same thread (None at the top)."""
    out: list[int | None] = [None] * len(events)
    stacks: dict[Any, list[tuple[float, int]]] = {}  # per thread: (end, index) of the open events
    for i, e in enumerate(events):
        end = e["ts"] + e["dur"]
        stack = stacks.setdefault((e.get("pid"), e["tid"]), [])
        while stack and stack[-1][0] < end - 1e-3:
            stack.pop()
        if stack:
            out[i] = stack[-1][1]
        stack.append((end, i))
    return out


class Step:
    """A profiler trace read once: its thread events in time order, each one's enclosing event and children."""

    def __init__(self, trace: dict[str, Any]) -> None:
        self.trace = trace
        self.events = spans(trace)
        self.parent = parents(self.events)
        self.base = base_ns(trace)
        self.children: dict[int, list[int]] = {}
        for i, p in enumerate(self.parent):
            if p is not None:
                self.children.setdefault(p, []).append(i)


def as_step(trace: dict[str, Any] | Step) -> Step:
    return trace if isinstance(trace, Step) else Step(trace)


def base_ns(trace: dict[str, Any]) -> int:
    """The trace's `ts` (microseconds) count from this wall-clock time; a trace without it counts from 0."""
    return int(trace.get("baseTimeNanoseconds") or 0)


def window_ns(trace: dict[str, Any]) -> tuple[int, int] | None:
    """Wall-clock start and end of the profiled span (the profiler's own "Trace" event)."""
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "X" and e.get("cat") == "Trace":
            start = base_ns(trace) + int(e["ts"] * 1000)
            return start, start + int(e["dur"] * 1000)
    return None


def group_table(trace: dict[str, Any]) -> dict[str, tuple[list[int], str]]:
    """Process group name -> (global ranks, description), from the profiler's distributedInfo."""
    info = trace.get("distributedInfo") or {}
    return {str(g.get("pg_name")): (list(g.get("ranks") or []), str(g.get("pg_desc") or ""))
            for g in info.get("pg_config") or [] if isinstance(g, dict)}


def dtype_of(name: Any) -> tuple[str, int] | None:
    if not isinstance(name, str):
        return None
    return DTYPES.get(name) or DTYPES.get(name.removeprefix("c10::"))


def numel(dims: Any, kind: Any = None) -> int | None:
    """Elements of one argument as the profiler lists it: a tensor's dims, or a TensorList's."""
    if kind == "TensorList" or (isinstance(dims, list) and dims and all(isinstance(d, list) for d in dims)):
        parts = [numel(d) for d in dims] if isinstance(dims, list) else [None]
        return None if not parts or None in parts else sum(parts)  # type: ignore[arg-type]
    if isinstance(dims, list) and all(isinstance(d, int) for d in dims) and kind not in (None, "", "Scalar",
                                                                                          "ScalarList", "GenericList"):
        return math.prod(dims)
    return None


def parse_ranks(text: Any, args: dict[str, Any]) -> list[int] | None:
    """record_param_comms' "Process Group Ranks" ("[0, 1, 2, 3]"); past 30 ranks it is cut ("[0, 1, ...,
    63]") and the group is rebuilt from its start, stride and size where they are given."""
    if isinstance(text, list):
        return [int(r) for r in text]
    if not isinstance(text, str) or not text.strip():
        return None
    if "..." not in text:
        try:
            return [int(r) for r in json.loads(text)]
        except (ValueError, TypeError):
            return None
    start, stride, size = (_int(args.get(k)) for k in ("Global rank start", "Global rank stride", "Group size"))
    if start is not None and stride is not None and size is not None and stride > 0:
        return [start + i * stride for i in range(size)]
    return None


# ---------------------------------------------------------------------------------------- collectives


def collectives(trace: dict[str, Any] | Step, flight: list[dict[str, Any]] | None, hosts: Sequence[str],
                rank: int) -> list[dict[str, Any]]:
    """Every collective this rank called in the profiled span, in order, as records (module docstring).

    `flight` is the flight recorder's entries (`_dump_fr_trace_json`'s "entries"); `hosts[r]` is rank r's
    node. Raises TraceError when a collective cannot be named, sized or placed in a group."""
    step = as_step(trace)
    trace, events, parent, children = step.trace, step.events, step.parent, step.children
    calls = [i for i, e in enumerate(events) if e["name"].startswith("c10d::")]
    calls = [i for i in calls if not _inside_call(i, parent, events)]
    unknown = sorted({events[i]["name"] for i in calls if events[i]["name"] not in KINDS})
    if unknown:
        raise TraceError(f"the trace holds collectives of unknown kind {', '.join(unknown)}: their bytes cannot "
                         "be counted (add them to workshop.training.comm_trace.KINDS)")
    groups = group_table(trace)
    window = window_ns(trace)
    entries = _flight_in_window(flight, window)
    records = []
    for n, i in enumerate(calls):
        op = events[i]
        kind = KINDS[op["name"]]
        comms = _first_named(events, children, i, "record_param_comms")
        records.append(_record(n, op, kind, comms, _context(i, parent, events)) | {"_call": i})
    _place_groups(records, entries, groups, hosts, rank)
    _time_on_backend(records, calls, events, children, step.base)
    return records


def _inside_call(i: int, parent: list[int | None], events: Sequence[dict[str, Any]]) -> bool:
    """A c10d operator called by another (a coalesced op's parts): the outer one is the collective."""
    p = parent[i]
    while p is not None:
        if events[p]["name"].startswith("c10d::"):
            return True
        p = parent[p]
    return False


def _descendants(children: dict[int, list[int]], i: int) -> Iterable[int]:
    stack = list(children.get(i, ()))
    while stack:
        j = stack.pop()
        yield j
        stack.extend(children.get(j, ()))


def _first_named(events: Sequence[dict[str, Any]], children: dict[int, list[int]], i: int, name: str) -> dict | None:
    return next((events[j] for j in _descendants(children, i) if events[j]["name"] == name), None)


def _context(i: int, parent: list[int | None], events: Sequence[dict[str, Any]]) -> str | None:
    """The innermost annotation around a collective (FSDP's `FSDP::all_gather (transformer.h.0)`, ...)."""
    p = parent[i]
    while p is not None:
        if events[p].get("cat") == "user_annotation":
            return str(events[p]["name"])
        p = parent[p]
    return None


def _record(n: int, op: dict[str, Any], kind: str, comms: dict | None, context: str | None) -> dict[str, Any]:
    args = op.get("args") or {}
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    where = OPERANDS.get(kind)
    out_n = in_n = None
    dtype = None
    if where is not None:
        out_i, in_i = where
        out_n = numel(dims[out_i], types[out_i] if out_i < len(types) else None) if out_i < len(dims) else None
        in_n = numel(dims[in_i], types[in_i] if in_i < len(types) else None) if in_i < len(dims) else None
        dtype = dtype_of(types[in_i]) if in_i < len(types) else None
    else:
        out_n = in_n = 0
    if comms is not None:  # NCCL: the backend's own account of the same call
        c = comms.get("args") or {}
        in_n = in_n if in_n is not None else _int(c.get("In msg nelems"))
        out_n = out_n if out_n is not None else _int(c.get("Out msg nelems"))
        dtype = dtype or dtype_of(c.get("dtype"))
    return {"seq": n, "kind": kind, "op": op["name"], "in_elements": in_n, "out_elements": out_n,
            "dtype": dtype[0] if dtype else None, "_dtype_bytes": dtype[1] if dtype else None,
            "context": context, "_comms": comms}


def _int(value: Any) -> int | None:
    """An integer the profiler may hand over as text (Kineto's metadata strings)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _flight_in_window(flight: list[dict[str, Any]] | None, window: tuple[int, int] | None) -> list[dict] | None:
    if flight is None:
        return None
    entries = [e for e in flight if not e.get("is_p2p")]
    if window is not None:
        start, end = window
        entries = [e for e in entries if start <= int(e.get("time_created_ns") or 0) <= end]
    return sorted(entries, key=lambda e: e.get("record_id", 0))


def _fr_numel(sizes: Any) -> int | None:
    try:
        return sum(math.prod(s) for s in sizes)
    except TypeError:
        return None


def _place_groups(records: list[dict[str, Any]], entries: list[dict] | None, groups: dict[str, tuple[list[int], str]],
                  hosts: Sequence[str], rank: int) -> None:
    """Each record's group (ranks, name), its size fixed where the profiler could not read it, and the
    bytes it moves; from record_param_comms where the backend writes it (NCCL), else the flight recorder."""
    need_flight = [r for r in records if parse_ranks((r["_comms"] or {}).get("args", {}).get("Process Group Ranks"),
                                                     (r["_comms"] or {}).get("args", {})) is None]
    if need_flight and entries is None:
        raise TraceError(f"the process group of {len(need_flight)} collective(s) is unknown: the backend wrote no "
                         "record_param_comms and the flight recorder was not on (TORCH_FR_BUFFER_SIZE)")
    if need_flight and len(entries) != len(records):
        raise TraceError(f"the flight recorder logged {len(entries)} collective(s) in the profiled step, the profiler "
                         f"{len(records)}: the two cannot be paired, so their process groups are unknown")
    for r, entry in zip(records, entries if need_flight else [None] * len(records)):
        c = (r["_comms"] or {}).get("args", {})
        ranks = parse_ranks(c.get("Process Group Ranks"), c)
        name, desc = c.get("Process Group Name"), c.get("Process Group Description")
        if ranks is None:
            fr_in, fr_out = _fr_numel(entry.get("input_sizes")), _fr_numel(entry.get("output_sizes"))
            expected = r["in_elements"] if r["in_elements"] is not None else fr_in
            if r["kind"] != "barrier" and fr_in != expected:
                raise TraceError(f"collective #{r['seq']} ({r['op']}, {r['in_elements']} elements in) does not match "
                                 f"the flight recorder's entry ({entry.get('profiling_name')}, {fr_in} elements in): "
                                 "their process groups are unknown")
            name, desc = (list(entry.get("process_group") or []) + [None, None])[:2]
            ranks = groups.get(str(name), (None, ""))[0]
            if ranks is None:
                raise TraceError(f"collective #{r['seq']} ran on process group {name!r} ({desc}), which the trace's "
                                 "distributedInfo does not list: its ranks are unknown")
            if r["in_elements"] is None:
                r["in_elements"] = fr_in
            if r["out_elements"] is None:
                r["out_elements"] = fr_out
            if r["dtype"] is None and entry.get("input_dtypes"):
                d = dtype_of(entry["input_dtypes"][0])
                r["dtype"], r["_dtype_bytes"] = (d[0], d[1]) if d else (None, None)
        r.update(group=list(ranks), group_name=str(name) if name is not None else None, group_desc=desc or None)
        _sizes(r, hosts, rank)


def _sizes(r: dict[str, Any], hosts: Sequence[str], rank: int) -> None:
    kind, group = r["kind"], r["group"]
    if r["in_elements"] is None or r["out_elements"] is None:
        raise TraceError(f"collective #{r['seq']} ({r['op']}): the trace gives no size for its tensors")
    if r["_dtype_bytes"] is None and kind != "barrier":
        raise TraceError(f"collective #{r['seq']} ({r['op']}): the trace gives no dtype for its tensors")
    elements = r["in_elements"] if kind in ("all_to_all", "send", "recv") else max(r["in_elements"], r["out_elements"])
    nbytes = elements * (r["_dtype_bytes"] or 0)
    n = len(group)
    sent = round(RING_SHARE[kind](n) * nbytes) if n > 1 else 0
    nodes = [hosts[g] if g < len(hosts) else None for g in group]
    me = group.index(rank) if rank in group else 0
    successor = nodes[(me + 1) % n] if n > 1 else nodes[me]
    r.update(elements=elements, bytes=nbytes, sent_bytes=sent,
             sent_elements=round(RING_SHARE[kind](n) * elements) if n > 1 else 0,
             spans_nodes=len(set(nodes)) > 1, nodes=len(set(nodes)),
             network_bytes=sent if successor != nodes[me] else 0)


def _time_on_backend(records: list[dict[str, Any]], calls: list[int], events: Sequence[dict[str, Any]],
                     children: dict[int, list[int]], base: int) -> None:
    """Each collective's span on the backend: gloo's worker event or NCCL's kernel (waiting for the
    slowest rank included). A collective without one keeps its call's span, `time_source` "call"."""
    gloo = [j for j, e in enumerate(events) if e["name"].startswith(GLOO_PREFIX)]
    kernels = {j: e for j, e in enumerate(events) if e.get("cat") == "kernel" and e["name"].lower().startswith(NCCL_PREFIX)}
    by_ext: dict[Any, int] = {}
    for j, e in kernels.items():
        by_ext.setdefault((e.get("args") or {}).get("External id"), j)
    taken: set[int] = set()
    for r, i in zip(records, calls):
        op = events[i]
        ids = {(events[k].get("args") or {}).get("External id") for k in (i, *_descendants(children, i))} - {None}
        found = next((by_ext[x] for x in ids if x in by_ext and by_ext[x] not in taken), None)
        source = "nccl kernel" if found is not None else None
        if found is None:  # gloo's event holds what its worker ran: the shard an all-gather sends, the
            want = r["in_elements"]  # whole tensor a reduce-scatter reduces (gloo all-reduces it), the buffer
            for j in gloo:
                e = events[j]
                if j in taken or e["ts"] < op["ts"] - 1.0:
                    continue
                g_args = e.get("args") or {}
                dims, types = g_args.get("Input Dims") or [], g_args.get("Input type") or []
                if dims and numel(dims[0], types[0] if types else "float") == want:
                    found, source = j, "gloo worker"
                    break
        if found is not None:
            taken.add(found)
            span = events[found]
        else:
            span, source = op, "call"
        r.update(start_ns=base + int(span["ts"] * 1000), time_ms=round(span["dur"] / 1000, 4), time_source=source,
                 _exec=found)


def public(record: dict[str, Any]) -> dict[str, Any]:
    """A record without the parser's working fields (those starting with "_")."""
    return {k: v for k, v in record.items() if not k.startswith("_")}


# ---------------------------------------------------------------------------------------- the cut trace

def cut(trace: dict[str, Any] | Step, records: list[dict[str, Any]], rank: int, host: str) -> list[dict[str, Any]]:
    """The events a one-step timeline needs, this rank's process as `pid` = rank and the wall-clock
    nanoseconds of their start as `ts_ns` (`merge` turns them into the trace's `ts`):
    - on the CPU threads that run the step: annotations (FSDP's units, the optimizer step), the c10d
      calls (args: the collective's record), and the outermost `aten::` operators ("compute");
    - the collectives' spans on the backend (gloo's worker threads, NCCL's stream), named by kind;
    - on a GPU: every kernel and copy on its stream ("compute", or the collective it runs).
    Lanes: "collective" (the backend's span), "compute", "copy" (FSDP2's copy-in/copy-out of its
    all-gather and reduce-scatter buffers, host<->device transfers: COPY_OPS, COPY_ACTIVITIES), "host"
    (on a GPU, the CPU's operators: they only launch kernels), "call" and "annotation". A copy is not
    compute: a collective beside a copy-in is not hidden behind the model's work.
    The profiler's per-operator shapes, strides and flows are left out: they made the whole trace of a
    tiny model's step 1.1 MB per rank and BLOOM-560M's ten times that."""
    step = as_step(trace)
    trace, events, parent, base = step.trace, step.events, step.parent, step.base
    by_call = {r["_call"]: r for r in records}
    exec_of = {r["_exec"]: r for r in records if r.get("_exec") is not None}
    worker_tids = {e["tid"] for e in events if e["name"].startswith(GLOO_PREFIX)}
    # on a GPU the kernels are the compute, and the CPU's operators only launch them
    cpu_lane = "host" if any(e.get("cat") == "kernel" for e in events) else "compute"
    # an event lies under an aten:: operator when its parent is one or lies under one (parents come first)
    under_aten = [False] * len(events)
    in_copy = [is_copy(e["name"]) for e in events]   # a copy, or inside one (an operator or FSDP's range)
    for i, p in enumerate(parent):
        if p is not None:
            under_aten[i] = under_aten[p] or events[p]["name"].startswith("aten::")
            in_copy[i] = in_copy[i] or in_copy[p]
    # a GPU activity's "External id" is the correlation id of the CPU operator that launched it
    launched_by = {(e.get("args") or {}).get("External id"): i for i, e in enumerate(events)
                   if e.get("cat") == "cpu_op"}
    out: list[dict[str, Any]] = []

    def emit(e: dict[str, Any], name: str, cat: str, args: dict[str, Any]) -> None:
        out.append({"ph": "X", "name": name, "cat": cat, "pid": rank, "tid": e["tid"],
                    "ts_ns": base + round(e["ts"] * 1000), "dur": round(e["dur"], 3), "args": args})

    for i, e in enumerate(events):
        name, cat = e["name"], e.get("cat", "")
        if i in exec_of:
            r = exec_of[i]
            emit(e, f"{r['kind']} {r['elements']:,} {r['dtype']}", "collective", {"lane": "collective", **public(r)})
        elif e["tid"] in worker_tids:
            continue
        elif i in by_call:
            r = by_call[i]
            emit(e, name, "c10d", {"lane": "call", "seq": r["seq"], "kind": r["kind"]})
        elif cat == "user_annotation":
            emit(e, name, cat, {"lane": "annotation"})
        elif cat in ("kernel", *COPY_ACTIVITIES):
            launcher = launched_by.get((e.get("args") or {}).get("External id"))
            copy = cat in COPY_ACTIVITIES or (launcher is not None and in_copy[launcher])
            emit(e, name, cat, {"lane": "copy" if copy else "compute", "stream": (e.get("args") or {}).get("stream")})
        elif is_copy(name) and not under_aten[i] and (parent[i] is None or not in_copy[parent[i]]):
            emit(e, name, "cpu_op", {"lane": "host" if cpu_lane == "host" else "copy"})   # FSDP2's copy operator
        elif name.startswith("aten::") and not under_aten[i]:
            emit(e, name, "cpu_op", {"lane": "host" if cpu_lane == "host" else "copy" if in_copy[i] else "compute"})
    tids = sorted({(e["tid"]) for e in out})
    meta = [{"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "ts": 0, "args": {"name": f"rank {rank} ({host})"}},
            {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "ts": 0, "args": {"sort_index": rank}}]
    names = _thread_names(trace)
    for tid in tids:
        label = names.get(tid) or f"thread {tid}"
        if tid in worker_tids:
            label = f"collectives ({label})"
        meta.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "ts": 0, "args": {"name": label}})
    return meta + out


def _thread_names(trace: dict[str, Any]) -> dict[Any, str]:
    """Thread id -> name; gloo's worker threads are named once as `pt_gloo_runloop` and once as `python`."""
    names: dict[Any, str] = {}
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            label = str((e.get("args") or {}).get("name", ""))
            label = re.sub(r"^thread \d+ \((.*)\)$", r"\1", label)
            if e.get("tid") not in names or "gloo" in label:
                names[e.get("tid")] = label
    return names


def merge(per_rank: Sequence[Sequence[dict[str, Any]]]) -> tuple[list[dict[str, Any]], int]:
    """Every rank's cut events in one trace, `ts` in microseconds from the first event on any rank (the
    ranks' clocks are their nodes' wall clocks: across nodes, as close as the nodes keep them);
    returns the events and that origin (wall-clock nanoseconds)."""
    starts = [e["ts_ns"] for events in per_rank for e in events if "ts_ns" in e]
    origin = min(starts) if starts else 0
    merged = []
    for events in per_rank:
        for e in events:
            if "ts_ns" in e:
                e = {k: v for k, v in e.items() if k != "ts_ns"} | {"ts": round((e["ts_ns"] - origin) / 1000, 3)}
            merged.append(e)
    return merged, origin
