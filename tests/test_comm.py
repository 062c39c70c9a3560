"""Communication you can see: every collective of one step, recorded on every rank by PyTorch's own
recorders, and the communication model beside it.

Real parts: tests/comm_probe.py is a 2-rank FSDP2 job on gloo that drives the course's CommRecorder
(and keeps one step's raw profiler trace and flight-recorder entries for the parser); the training
runs are tests/runs.py's, shared with the memory and training tests.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.runs import RunCache, fork
from workshop.comm import model as comm
from workshop.results.logs import ParsedLog
from workshop.training import comm_trace
from workshop.training.comm_recorder import choose_step, summarize

PROBE = Path(__file__).with_name("comm_probe.py")
# the tests that read the probe are `slow` too: it is a 2-rank run (forked from the warm parent, tests/runs.py)
probe_test = pytest.mark.slow


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("comm-probe")
    (log,), _ = fork([str(out)], nproc=2, script=str(PROBE)).finish(300)     # 2 ranks forked (tests/runs.py)
    assert (out / "done-0.json").is_file() and (out / "done-1.json").is_file(), log[-6000:]
    return out


def done(probe: Path, rank: int = 0) -> dict[str, Any]:
    return json.loads((probe / f"done-{rank}.json").read_text())


def raw(probe: Path, rank: int = 0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return (comm_trace.load(probe / "raw" / f"trace-{rank}.json"),
            json.loads((probe / "raw" / f"flight-{rank}.json").read_text()))


# ---------------------------------------------------------------------------------------- the recorder


@probe_test
def test_the_recorder_sees_every_collective_of_an_fsdp_step(probe: Path) -> None:
    """Two Linear(64, 64) units (4,160 parameters each) on 2 ranks: all-gathered in forward and again in
    backward, reduce-scattered once, the gradient norms all-reduced (4 tensors): FSDP2 as FINDINGS saw it."""
    s = done(probe)["ok"]
    assert s["status"] == "measured" and s["step"] == 3 and s["backend"] == "gloo"
    for rank in s["per_rank"]:
        kinds = rank["by_kind"]
        assert kinds["all_gather"]["calls"] == 4 and kinds["all_gather"]["elements"] == 4 * 4160
        assert kinds["reduce_scatter"]["calls"] == 2 and kinds["reduce_scatter"]["elements"] == 2 * 4160
        assert kinds["all_reduce"] == {**kinds["all_reduce"], "calls": 1, "elements": 4}
        assert kinds["all_gather"]["bytes"] == 4 * kinds["all_gather"]["elements"]  # fp32
        assert kinds["all_gather"]["sent_bytes"] == kinds["all_gather"]["bytes"] // 2  # ring: (n-1)/n
        assert all(v["time_ms"] > 0 for v in kinds.values())
        assert rank["intra_node_bytes"]["all_gather"] == kinds["all_gather"]["sent_bytes"]
        assert rank["inter_node_bytes"] == {} and rank["network_bytes"] == {}
    assert s["groups"] == [{"ranks": [0, 1], "desc": "default_pg", "spans_nodes": False, "nodes": 1}]
    other = done(probe, 1)["ok"]  # every rank gathers every rank's figures; only rank 0 writes the trace
    assert {k: other[k] for k in ("per_rank", "per_node", "groups")} == {k: s[k] for k in ("per_rank", "per_node", "groups")}
    assert s["trace"] == "comm_trace.json" and other["trace"] is None


@probe_test
def test_its_trace_opens_as_a_chrome_trace_with_one_process_per_rank(probe: Path) -> None:
    from torch.profiler._trace_validator import validate_trace

    path = probe / "ok" / "comm_trace.json"
    passed, violations = validate_trace(str(path))
    assert passed, violations
    doc = json.loads(path.read_text())
    check_trace_format(doc)
    events = doc["traceEvents"]
    assert {e["pid"] for e in events} == {0, 1}
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"rank 0 (probe-node)", "rank 1 (probe-node)"}
    collectives = [e for e in events if e.get("cat") == "collective"]
    assert len(collectives) == 2 * 7
    first = min(collectives, key=lambda e: e["ts"])
    assert {"kind", "elements", "bytes", "dtype", "group", "spans_nodes", "time_ms"} <= set(first["args"])
    assert any(e.get("args", {}).get("lane") == "compute" for e in events)
    assert path.stat().st_size < 2 * 100_000  # cut from the profiler's 250 KB a rank (raw/trace-*.json)


def check_trace_format(doc: dict[str, Any]) -> None:
    """The Trace Event Format's JSON object form, as Perfetto and chrome://tracing read it: complete
    events with name, ts, dur, pid, tid; metadata events; slices on one thread nested, never crossing."""
    assert isinstance(doc["traceEvents"], list) and doc.get("displayTimeUnit") in ("ms", "ns")
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and isinstance(e["name"], str)
        if e["ph"] == "X":
            assert e["ts"] >= 0 and e["dur"] >= 0
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
        json.dumps(e.get("args", {}))
    for spans in by_thread.values():
        stack: list[float] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start + 1e-3:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-3, "slices on one thread cross"
            stack.append(end)


@probe_test
def test_a_step_whose_trace_cannot_be_taken_still_trains_and_says_why(probe: Path) -> None:
    """The job profiles step 4 itself, inside the recorder's profile of it: the recorder's profiler
    gets no events. The job trains on to its last step; every rank records `comm` as not measured,
    naming each rank and why; no trace file is left."""
    for rank in (0, 1):
        d = done(probe, rank)
        assert d["trained"] == 6
        blocked = d["blocked"]
        assert blocked["status"] == "not measured" and blocked["step"] == 4
        assert "ranks 0, 1: TraceError: the profiler recorded no event" in blocked["reason"]
        assert "another profiler" in blocked["reason"] and "per_rank" not in blocked
    assert not (probe / "blocked" / "comm_trace.json").exists()


@probe_test
def test_an_unknown_collective_is_named_not_counted(probe: Path) -> None:
    trace, flight = raw(probe)
    assert len(comm_trace.collectives(trace, flight, ["n"] * 2, 0)) == 7
    renamed = copy.deepcopy(trace)
    op = next(e for e in renamed["traceEvents"] if e.get("name") == "c10d::_reduce_scatter_base_")
    op["name"] = "c10d::_reduce_scatter_v_"
    with pytest.raises(comm_trace.TraceError, match=r"unknown kind c10d::_reduce_scatter_v_.*cannot be counted"):
        comm_trace.collectives(renamed, flight, ["n"] * 2, 0)


@probe_test
def test_groups_come_from_the_flight_recorder_and_must_line_up(probe: Path) -> None:
    """gloo tells the profiler nothing of a collective's group: the flight recorder does, entry by entry."""
    trace, flight = raw(probe)
    records = comm_trace.collectives(trace, flight, ["a", "b"], 0)
    assert {tuple(r["group"]) for r in records} == {(0, 1)}
    assert all(r["spans_nodes"] and r["network_bytes"] == r["sent_bytes"] for r in records)  # ranks on 2 nodes
    with pytest.raises(comm_trace.TraceError, match="flight recorder was not on"):
        comm_trace.collectives(trace, None, ["n"] * 2, 0)
    start, end = comm_trace.window_ns(trace)
    one_of_the_step = next(i for i, e in enumerate(flight) if start <= e["time_created_ns"] <= end)
    with pytest.raises(comm_trace.TraceError, match="cannot be paired"):
        comm_trace.collectives(trace, flight[:one_of_the_step] + flight[one_of_the_step + 1:], ["n"] * 2, 0)


@probe_test
def test_the_gloo_reduce_scatter_keeps_its_kind(probe: Path) -> None:
    """gloo runs a reduce-scatter as an all-reduce (its worker event and flight entry say so); the record
    keeps what the rank asked for, timed by gloo's worker."""
    trace, flight = raw(probe)
    workers = [e for e in trace["traceEvents"] if e.get("name") == "gloo:all_reduce"]
    assert len(workers) == 3  # 2 reduce-scatters, 1 all-reduce
    records = comm_trace.collectives(trace, flight, ["n"] * 2, 0)
    rs = [r for r in records if r["kind"] == "reduce_scatter"]
    assert len(rs) == 2 and all(r["time_source"] == "gloo worker" and r["out_elements"] == 2080 for r in rs)


# An NCCL step as Kineto writes it (record_param_comms' arguments; the kernel carries the External id of
# the operator that launched it). No GPU here: shaped after PyTorch's own trace validator and Kineto's
# field names, not recorded on a GPU.
NCCL_TRACE = {
    "baseTimeNanoseconds": 1_000_000_000, "traceEvents": [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "x", "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 9, "tid": 9, "ts": 10, "dur": 20,
         "args": {"External id": 1}},
        {"ph": "X", "cat": "user_annotation", "name": "FSDP::all_gather (transformer.h.0)", "pid": 9, "tid": 9,
         "ts": 40, "dur": 60, "args": {"External id": 2}},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::_allgather_base_", "pid": 9, "tid": 9, "ts": 50, "dur": 40,
         "args": {"External id": 3, "Input Dims": [[16], [4], [], [], []],
                  "Input type": ["c10::BFloat16", "c10::BFloat16", "", "Scalar", "Scalar"]}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 9, "tid": 9, "ts": 55, "dur": 30,
         "args": {"External id": 4, "Collective name": "_allgather_base", "dtype": "BFloat16", "In msg nelems": 4,
                  "Out msg nelems": 16, "Group size": 4, "Process Group Name": "3",
                  "Process Group Description": "mesh_dp_shard", "Process Group Ranks": "[0, 1, 2, 3]"}},
        {"ph": "X", "cat": "kernel", "name": "ampere_bf16_gemm", "pid": 0, "tid": 7, "ts": 35, "dur": 100,
         "args": {"External id": 1, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
         "pid": 0, "tid": 20, "ts": 70, "dur": 150, "args": {"External id": 4, "stream": 20}},
    ]}


def test_an_nccl_step_reads_its_group_from_record_param_comms_and_its_time_from_the_kernel() -> None:
    records = comm_trace.collectives(NCCL_TRACE, None, ["n1", "n1", "n2", "n2"], 1)
    (r,) = records
    assert (r["kind"], r["elements"], r["dtype"], r["bytes"]) == ("all_gather", 16, "bfloat16", 32)
    assert r["group"] == [0, 1, 2, 3] and r["group_desc"] == "mesh_dp_shard" and r["spans_nodes"]
    assert r["sent_bytes"] == 24 and r["network_bytes"] == 24  # rank 1 passes to rank 2, on the other node
    assert (r["time_source"], r["time_ms"]) == ("nccl kernel", 0.15)
    assert r["context"] == "FSDP::all_gather (transformer.h.0)"
    events = comm_trace.cut(NCCL_TRACE, records, 1, "n1")
    lanes = {e["name"]: e["args"].get("lane") for e in events if e["ph"] == "X"}
    assert lanes["ampere_bf16_gemm"] == "compute" and lanes["aten::mm"] == "host"
    assert lanes["all_gather 16 bfloat16"] == "collective"


# A GPU step's copies beside its compute and an all-gather, hand-written (no GPU here) with the names
# PyTorch emits: FSDP2's operators `fsdp::all_gather_copy_in` and `fsdp::chunk_cat` (defined with
# torch.library.Library("fsdp", "FRAGMENT") in torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py;
# the profiler names a dispatcher op `<namespace>::<name>`), FSDP2's range `FSDP::all_gather_copy_out`
# (_fsdp_param_group.py's record_function) around `fsdp::split_with_sizes_copy`, and Kineto's memcpy
# activities ("Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)", category gpu_memcpy:
# libkineto's CUPTI memcpy names, what CPU offload's transfers are). The kernels' names are the
# launching operator's CUDA kernels in ATen/native/cuda (MultiTensorApply.cuh's multi_tensor_apply_kernel
# for the copy-in's _foreach_copy_, TensorShape.cu's fast paths for _chunk_cat and split_with_sizes_copy):
# the classification reads which operator launched a kernel ("External id"), not the kernel's name.
COPY_TRACE = {
    "baseTimeNanoseconds": 1_000_000_000, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "fsdp::all_gather_copy_in", "pid": 9, "tid": 9, "ts": 0, "dur": 8,
         "args": {"External id": 11}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 9, "tid": 9, "ts": 10, "dur": 5, "args": {"External id": 12}},
        {"ph": "X", "cat": "user_annotation", "name": "FSDP::all_gather_copy_out (transformer.h.0)", "pid": 9, "tid": 9,
         "ts": 20, "dur": 10, "args": {"External id": 13}},
        {"ph": "X", "cat": "cpu_op", "name": "fsdp::split_with_sizes_copy", "pid": 9, "tid": 9, "ts": 21, "dur": 8,
         "args": {"External id": 14}},
        {"ph": "X", "cat": "cpu_op", "name": "fsdp::chunk_cat", "pid": 9, "tid": 9, "ts": 32, "dur": 6,
         "args": {"External id": 15}},
        {"ph": "X", "cat": "kernel", "name": "void at::native::multi_tensor_apply_kernel<...>", "pid": 0, "tid": 7,
         "ts": 100, "dur": 50, "args": {"External id": 11, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "ampere_bf16_gemm", "pid": 0, "tid": 7, "ts": 150, "dur": 100,
         "args": {"External id": 12, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "void at::native::split_with_sizes_copy_out_contiguous_no_cast_kernel<...>",
         "pid": 0, "tid": 7, "ts": 250, "dur": 40, "args": {"External id": 14, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "void at::native::chunk_cat_cuda_kernel<...>", "pid": 0, "tid": 7,
         "ts": 290, "dur": 30, "args": {"External id": 15, "stream": 7}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 8, "ts": 320,
         "dur": 40, "args": {"External id": 16, "stream": 8}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0, "tid": 8, "ts": 360,
         "dur": 40, "args": {"External id": 17, "stream": 8}},
    ]}


def test_copies_are_neither_compute_nor_communication_and_hide_no_collective(tmp_path: Path) -> None:
    """Issue #35: FSDP2's copy-in/copy-out kernels and offload's host<->device copies are a lane of their
    own, and a collective beside them only is exposed, not overlapped."""
    from workshop.comm.timeline import read_timeline

    events = comm_trace.cut(COPY_TRACE, [], 0, "n1")
    lanes = {e["name"]: e["args"].get("lane") for e in events if e["ph"] == "X"}
    assert lanes == {
        "fsdp::all_gather_copy_in": "host", "aten::mm": "host", "fsdp::chunk_cat": "host",   # (the copy-out's
        # operator lies inside its range, which stands for it)
        "FSDP::all_gather_copy_out (transformer.h.0)": "annotation",
        "void at::native::multi_tensor_apply_kernel<...>": "copy", "ampere_bf16_gemm": "compute",
        "void at::native::split_with_sizes_copy_out_contiguous_no_cast_kernel<...>": "copy",
        "void at::native::chunk_cat_cuda_kernel<...>": "copy",
        "Memcpy HtoD (Pageable -> Device)": "copy", "Memcpy DtoH (Device -> Pinned)": "copy"}
    # an all-gather on NCCL's stream from 120 to 420 us: beside the gemm (150-250) it is overlapped,
    # beside the copies (120-150, 250-420) exposed: by hand 0.1 ms overlapped, 0.2 ms exposed
    collective = {"ph": "X", "name": "all_gather", "cat": "collective", "pid": 0, "tid": 20, "ts_ns": 1_000_120_000,
                  "dur": 300, "args": {"lane": "collective", "kind": "all_gather"}}
    merged, _ = comm_trace.merge([[*events, collective]])
    path = tmp_path / "comm_trace.json"
    path.write_text(json.dumps({"traceEvents": merged, "workshop": {"step": 3, "hosts": ["n1"], "device": "cuda"}}))
    (lane,) = read_timeline(path).lanes
    assert lane.compute_ms == pytest.approx(0.1) and lane.copy_ms == pytest.approx(0.05 + 0.04 + 0.03 + 0.08)
    assert lane.overlapped_ms == pytest.approx(0.1) and lane.exposed_ms == pytest.approx(0.2)


@probe_test
def test_fsdp2_copies_recorded_on_cpu_are_copies(probe: Path) -> None:
    """The probe's recorded FSDP2 step on CPU/gloo: FSDP2's copy operators are recorded under the names
    COPY_OPS gives, and their time goes to the copy lane, none of it to compute."""
    trace, flight = raw(probe)
    names = {e["name"] for e in comm_trace.spans(trace)}
    assert {"fsdp::all_gather_copy_in", "fsdp::split_with_sizes_copy", "fsdp::chunk_cat"} <= names, sorted(
        n for n in names if "fsdp" in n.lower())
    step = comm_trace.Step(trace)
    records = comm_trace.collectives(step, flight, ["probe-node"] * 2, 0)
    events = [e for e in comm_trace.cut(step, records, 0, "probe-node") if e["ph"] == "X"]
    copies = [e for e in events if e["args"].get("lane") == "copy"]
    assert {e["name"] for e in copies} >= {"fsdp::all_gather_copy_in", "fsdp::chunk_cat"}
    assert not [e for e in events if e["args"].get("lane") == "compute" and comm_trace.is_copy(e["name"])]


def test_the_recorded_step_is_neither_the_warm_up_nor_the_memory_trackers() -> None:
    assert choose_step(0, 12, avoid=2) == 3
    assert choose_step(0, 3, avoid=2) == 3
    assert choose_step(0, 2, avoid=2) == 1
    assert choose_step(0, 1, avoid=1) is None
    assert choose_step(6, 12, avoid=2) == 9  # after a resume from step 6


# ---------------------------------------------------------------------------------------- the model


def test_model_counts_what_notebook_03_quotes_for_bloom_560m() -> None:
    """03's communication cell: full_shard sends (N-1)/N x (2 x 302,309,376 + 256,905,216 + 559,214,592)
    elements per rank and step, shard_grad_op and DDP 2(N-1)/N x P (plus the norms: one per tensor)."""
    p = 559_214_592
    full = comm.predict("bloom-560m", "full_shard", 4, 1, "bf16").by_kind(0)
    assert full["all_gather"]["sent_elements"] + full["reduce_scatter"]["sent_elements"] == \
        3 * (2 * 302_309_376 + 256_905_216 + p) // 4
    assert full["all_gather"]["bytes"] == 2 * full["all_gather"]["elements"]  # bf16 all-gathers
    assert full["all_reduce"] == {"calls": 1, "elements": 5 + 12 * 24, "bytes": 4 * 293,
                                  "sent_elements": round(1.5 * 293), "sent_bytes": round(1.5 * 4 * 293)}
    grad_op = comm.predict("bloom-560m", "shard_grad_op", 4, 1, "bf16").by_kind(0)
    assert grad_op["all_gather"]["sent_elements"] == grad_op["reduce_scatter"]["sent_elements"] == 3 * p // 4
    ddp = comm.predict("bloom-560m", "ddp", 4, 1, "bf16").by_kind(0)
    assert ddp == {"all_reduce": {"calls": 1, "elements": p, "bytes": 4 * p, "sent_elements": 3 * p // 2,
                                  "sent_bytes": 6 * p}}


def test_model_pads_each_shard_as_fsdp2_does() -> None:
    """At 3 ranks the tiny model's 96-row LayerNorms split evenly, its 1,024-row embedding does not: FSDP2
    pads every first dimension to a multiple of 3, and the all-gather moves the padding too."""
    unit = comm.units("tiny")[1]
    assert unit.elements == 1024 * 96 + 2 * 96
    assert unit.padded(3) == 3 * 342 * 96 + 2 * 96 and unit.padded(2) == unit.elements


def test_model_sends_hybrid_shards_all_reduce_alone_across_nodes() -> None:
    """05's layouts, 2 nodes x 2: full_shard's group spans both nodes; hybrid_shard [2, 2] keeps the
    all-gathers and reduce-scatters in the node and all-reduces each rank's 1/2 shard across it."""
    full = comm.predict("bloom-560m", "full_shard", 4, 2, "fp32")
    hsdp = comm.predict("bloom-560m", "hybrid_shard", 4, 2, "fp32", replicas=2)
    for r in range(4):
        assert set(full.split(r)["inter_node_bytes"]) == {"all_gather", "reduce_scatter", "all_reduce"}
        assert set(hsdp.split(r)["inter_node_bytes"]) == {"all_reduce"}
        assert hsdp.split(r)["intra_node_bytes"].keys() == {"all_gather", "reduce_scatter", "all_reduce"}
    # every rank of hybrid's replica group talks across; in full_shard's ring of 4 only ranks 1 and 3 do
    assert [bool(full.split(r)["network_bytes"]) for r in range(4)] == [False, True, False, True]
    assert all(hsdp.split(r)["network_bytes"] for r in range(4))
    leaving = {n: sum(v["network_bytes"].values()) for n, v in full.per_node().items()}
    per_rank = sum(full.by_kind(1)[k]["sent_bytes"] for k in ("all_gather", "reduce_scatter", "all_reduce"))
    assert leaving == {0: per_rank, 1: per_rank}  # one ring link leaves each node
    shard_bytes = 4 * 559_214_592 // 2
    across = hsdp.split(0)["network_bytes"]["all_reduce"]
    assert across == pytest.approx(shard_bytes, rel=1e-3)  # 2 (R-1)/R x Psi / S with R = S = 2


def test_model_refuses_what_cannot_run() -> None:
    with pytest.raises(ValueError, match="sharding"):
        comm.predict("tiny", "zero3", 2)
    with pytest.raises(ValueError, match="multiple of nodes"):
        comm.predict("tiny", "full_shard", 3, 2)
    with pytest.raises(ValueError, match="replicas"):
        comm.predict("tiny", "hybrid_shard", 4, 1, replicas=3)


# ---------------------------------------------------------------------------------------- tables


def fake_run(label: str, summary: dict[str, Any], config: dict[str, Any]) -> ParsedLog:
    return ParsedLog(source=label, summary=summary, run_args={"config": {**config, "output_dir": f"/x/{label}"}})


@probe_test
def test_tables_show_not_measured_never_zeros(probe: Path) -> None:
    from workshop.comm.compare import comm_table, network_table

    config = {"model": "tiny", "sharding": "full_shard", "nodes": 1, "procs_per_node": 2, "batch_size": 2}
    base = {"world_size": 2, "nodes": 1, "sharding_applied": "full_shard", "model": "tiny", "precision": "fp32",
            "hosts": ["h", "h"]}
    missing = fake_run("blocked", {**base, "comm": done(probe)["blocked"]}, config)
    old = fake_run("old", base, config)
    table = comm_table([missing, old], predicted={"blocked": {"all_gather": 1.0}})
    assert table["measured"].isna().all() and not (table["measured"] == 0).any()
    assert table.loc[("blocked", "total"), "status"].startswith("not measured: the step's trace could not be read")
    assert table.loc[("old", "all_gather"), "status"].startswith("not measured: the run recorded no collectives")
    assert table.loc[("blocked", "all_gather"), "model"] > 0  # the model still predicts it
    assert table.loc[("blocked", "total"), "predicted"] == 1.0  # a prediction by kind sums to its total
    assert any("blocked: not measured" in n for n in table.attrs["notes"])
    net = network_table([missing])
    assert net["network_bytes"].isna().all() and (net["kinds_across"] == "not measured").all()
    kinds = network_table([missing], by="node", split_kinds=True)
    split = [c for c in kinds.columns if c.startswith("network_bytes[")]
    assert split and kinds[split].isna().all().all() and kinds["status"].str.startswith("not measured").all()


@probe_test
def test_lab_comm_table_and_plots(probe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workshop.student.lab import Lab

    monkeypatch.chdir(tmp_path)
    lab = Lab("local", quiet=True)
    config = {"model": "tiny", "sharding": "full_shard", "nodes": 1, "procs_per_node": 2, "batch_size": 2}
    run = fake_run("probe", {"world_size": 2, "nodes": 1, "model": "tiny", "precision": "fp32",
                             "sharding_applied": "full_shard", "comm": done(probe)["ok"]}, config)
    table = lab.comm([run], measure="elements")
    assert table.loc[("probe", "all_gather"), "measured"] == 4 * 4160
    fig = lab.plot("comm", table, save="comm")
    assert (tmp_path / "plots" / "comm.png").stat().st_size > 0 and fig.axes[0].patches
    fig = lab.plot("timeline", [probe / "ok"], save="timeline")
    assert len(fig.axes[0].get_yticks()) == 2 and (tmp_path / "plots" / "timeline.png").stat().st_size > 0


@probe_test
def test_timeline_reads_compute_and_each_collective_per_rank(probe: Path) -> None:
    from workshop.comm.timeline import _merge, read_timeline, trace_path

    t = read_timeline(probe / "ok")
    assert t.step == 3 and t.device == "cpu" and [lane.rank for lane in t.lanes] == [0, 1]
    for lane in t.lanes:
        assert [c["kind"] for c in lane.collectives].count("all_gather") == 4
        assert lane.compute and lane.compute_ms > 0
        assert 0 <= lane.overlapped_ms <= lane.collective_ms
        assert lane.exposed_ms == pytest.approx(
            sum(e - s for s, e in _merge([(c["start_ms"], c["end_ms"]) for c in lane.collectives])) - lane.overlapped_ms)
    assert trace_path(probe / "ok" / "comm_trace.json") == probe / "ok" / "comm_trace.json"
    with pytest.raises(FileNotFoundError, match="recorded no step trace"):
        trace_path(probe / "blocked")


@probe_test
def test_summary_splits_bytes_by_where_each_group_lives(probe: Path) -> None:
    """Records of a 2-node run (ranks 0, 1 on n1; 2, 3 on n2): intra-node, inter-node and network bytes."""
    def rec(kind: str, group: list[int], sent: int, spans: bool, network: int) -> dict[str, Any]:
        return {"kind": kind, "elements": sent, "bytes": sent, "sent_elements": sent, "sent_bytes": sent,
                "time_ms": 1.0, "group": group, "spans_nodes": spans, "nodes": 2 if spans else 1,
                "network_bytes": network, "group_desc": None}

    per_rank = [{"rank": r, "host": "n1" if r < 2 else "n2", "records": [
        rec("all_gather", [0, 1] if r < 2 else [2, 3], 10, False, 0),
        rec("all_reduce", [r % 2, r % 2 + 2], 4, True, 4)]} for r in range(4)]
    s = summarize(per_rank, ["n1", "n1", "n2", "n2"], 3, "gloo")
    assert s["per_rank"][0]["intra_node_bytes"] == {"all_gather": 10}
    assert s["per_rank"][0]["inter_node_bytes"] == {"all_reduce": 4} == s["per_rank"][3]["network_bytes"]
    assert s["per_node"] == {"n1": {"ranks": [0, 1], "network_bytes": {"all_reduce": 8}},
                             "n2": {"ranks": [2, 3], "network_bytes": {"all_reduce": 8}}}
    assert [g["ranks"] for g in s["groups"]] == [[0, 1], [0, 2], [1, 3], [2, 3]]


# ---------------------------------------------------------------------------------------- real runs

BF16_SHORT = ("--precision", "bf16", "--train-size", "12", "--epochs", "1")
# (flags, procs per node, nodes): one configuration per distinct path of the model (workshop.comm.model) and of
# the recorder: DDP's all-reduce and FSDP2's full shard at 2 ranks and at 4 (where a ring's (n-1)/n is no longer
# 1/n), SHARD_GRAD_OP (no re-gather in backward), CPU offload and activation checkpointing (the model says they
# change nothing: a run shows it), DDP with activation checkpointing, HSDP's 2x2 mesh and FSDP1's
# _hybrid_shard_zero2 on it, two "nodes" (full_shard 2 x 1, and 05's hybrid_shard 2 x 2 that
# test_two_nodes_count_what_crosses_per_node_and_per_rank reads), one process (nothing sent), bf16 (the compute
# dtype on the wire, DDP's fp32 reduce) and gradient accumulation (FSDP reduces each micro-batch, DDP once).
# Each of these runs is shared with another test (tests/runs.py runs it once a session), so here only the
# comparison costs. The 4-rank repeats of paths held at 2 ranks (SHARD_GRAD_OP, offload and FULL_SHARD with
# activation checkpointing at 4) and the rest of the sweep are benchmarks/comm_model.py's (issue 51).
MEASURED = [
    (("--sharding", "ddp"), 2, 1), (("--sharding", "full_shard"), 2, 1), (("--sharding", "shard_grad_op"), 2, 1),
    (("--sharding", "full_shard", "--offload"), 2, 1), (("--sharding", "full_shard", "--activation-checkpointing"), 2, 1),
    (("--sharding", "ddp", "--activation-checkpointing"), 2, 1),
    (("--sharding", "ddp"), 4, 1), (("--sharding", "full_shard"), 4, 1),
    (("--sharding", "hybrid_shard", "--hybrid-replicas", "2"), 4, 1),
    (("--sharding", "_hybrid_shard_zero2", "--hybrid-replicas", "2"), 4, 1),
    (("--sharding", "full_shard"), 1, 2), (("--sharding", "hybrid_shard"), 2, 2), (("--sharding", "full_shard"), 1, 1),
    (("--sharding", "ddp", *BF16_SHORT), 2, 1), (("--sharding", "full_shard", *BF16_SHORT), 2, 1),
    (("--sharding", "full_shard", "--grad-acc", "2"), 2, 1), (("--sharding", "ddp", "--grad-acc", "2"), 2, 1),
]


def _id(flags: tuple[str, ...], nproc: int, nnodes: int) -> str:
    words = "_".join(f.lstrip("-") for f in flags if f not in BF16_SHORT[2:] and f not in ("--sharding",))
    return f"{words}-{nnodes}x{nproc}"


@pytest.mark.slow
@pytest.mark.parametrize("flags,nproc,nnodes", MEASURED, ids=[_id(*m) for m in MEASURED])
def test_model_matches_the_measured_collectives(runs: RunCache, flags: tuple[str, ...], nproc: int, nnodes: int) -> None:
    """The communication model against every rank's recorded step, every kind and measure, within 1 %:
    MEASURED, one configuration per distinct path, each a run other tests share. The whole sweep, this list
    and the configurations no other test runs, is benchmarks/comm_model.py's."""
    run = runs.get(*flags, nproc=nproc, nnodes=nnodes)
    s = run.summary
    assert s["comm"]["status"] == "measured", s["comm"]
    if nproc * nnodes == 1:  # one-process FSDP: nothing to gather, nothing to reduce
        assert all(not r["by_kind"] for r in s["comm"]["per_rank"]) and not comm.predict_config({}, s).by_kind(0)
        return
    config = json.loads((run.out_dir / "run_args.json").read_text())["config"]
    rows = comm.compare(s, config)
    assert {r["rank"] for r in rows} == set(range(nproc * nnodes))
    assert {r["measure"] for r in rows} >= {"elements", "bytes", "sent_elements", "sent_bytes"}
    for r in rows:
        if r["predicted"] is not None:
            assert r["predicted"] == pytest.approx(r["measured"], rel=0.01, abs=0), r


@pytest.mark.parametrize("flags,nproc,nnodes", MEASURED, ids=[_id(*m) for m in MEASURED])
def test_commdebugmode_counts_the_same_collectives(runs: RunCache, flags: tuple[str, ...], nproc: int, nnodes: int) -> None:
    """A second, independent count (issue #35): PyTorch's public CommDebugMode, entered around the same
    recorded step, counts each rank's collectives at the dispatcher; the recorder reads them from the
    profiler's in-memory results and the flight recorder (private surfaces, torch_private.py). The two
    agree call for call, per rank and kind, on the runs the model test shares: a torch upgrade that
    breaks the recorder fails here."""
    s = runs.get(*flags, nproc=nproc, nnodes=nnodes).summary
    assert s["comm"]["status"] == "measured", s["comm"]
    for rank in s["comm"]["per_rank"]:
        recorded = {kind: v["calls"] for kind, v in rank["by_kind"].items()}
        assert rank["debug_mode_calls"] == recorded, (rank["rank"], rank["debug_mode_calls"], recorded)


@pytest.mark.slow
def test_two_nodes_count_what_crosses_per_node_and_per_rank(runs: RunCache) -> None:
    """05's hybrid_shard on 2 "nodes" x 2: only the all-reduce of the gradient shards leaves a node;
    every rank sends it to its replica on the other node, so each node sends two ranks' worth."""
    from workshop.comm.compare import network_table

    run = runs.get("--sharding", "hybrid_shard", nproc=2, nnodes=2)
    s = run.summary
    assert s["mesh"] == [2, 2] and len(set(s["hosts"])) == 2
    for rank in s["comm"]["per_rank"]:
        assert set(rank["inter_node_bytes"]) == {"all_reduce"} == set(rank["network_bytes"])
        assert set(rank["intra_node_bytes"]) >= {"all_gather", "reduce_scatter"}
    groups = {tuple(g["ranks"]): g["spans_nodes"] for g in s["comm"]["groups"]}
    assert groups[(0, 2)] and groups[(1, 3)] and not groups[(0, 1)] and not groups[(2, 3)]
    per_node = network_table([run.out_dir], by="node")
    assert (per_node["network_bytes"] == per_node["model_network_bytes"]).all()
    kinds = network_table([run.out_dir], by="node", split_kinds=True)   # notebook 05's feedback, by kind
    assert (kinds["network_bytes[all_reduce]"] == kinds["network_bytes"]).all() and (kinds["network_bytes"] > 0).all()
    assert (kinds["network_bytes[all_gather]"] == 0).all() and (kinds["network_bytes[reduce_scatter]"] == 0).all()
    per_rank = network_table([run.out_dir])
    assert (per_rank["inter_node_bytes"] == per_rank["model_inter_node_bytes"]).all()
    assert per_node["network_bytes"].sum() == per_rank["network_bytes"].sum()


@pytest.mark.slow
def test_the_recorded_step_leaves_the_throughput_window_and_costs_little(runs: RunCache) -> None:
    """A course run (12 steps, 2 ranks): step 3 was recorded, the window leaves it out, the trace is
    small, and the recorded step's extra time is a small share of the run (a bound that catches a
    recorder grown several times dearer: it was 4-6 % of these runs on 2 loaded cores;
    benchmarks/comm_overhead.py measures it on a quiet machine)."""
    run = runs.get("--sharding", "full_shard", nproc=2)
    s = run.summary
    assert s["comm"]["step"] == 3 and s["throughput_window"]["excluded_steps"]["comm"] == [3]
    assert not any(first <= 3 <= last for first, last in s["throughput_window"]["counted_steps"])
    assert s["tensor_mem_mb_per_rank"][0]["micro_batches"] == 1  # the tracker kept its own step (2)
    trace = run.out_dir / "comm_trace.json"
    assert s["comm"]["trace"] == "comm_trace.json" and trace.stat().st_size < 2 * 2**20
    check_trace_format(json.loads(trace.read_text()))
    assert 0 <= s["comm"]["overhead_pct"] <= 25
    # the throughput arithmetic without the left-out step: tests/test_training.py's window test


@probe_test
def test_recording_can_be_switched_off(probe: Path) -> None:
    d = done(probe)
    assert d["off"] == {"status": "not measured", "reason": "recording is off (comm_record=false)", "step": None}
    assert d["ok_left_out"] == {"comm": [d["ok"]["step"]]}     # a recorded step leaves the throughput at train start
    assert d["off_left_out"] == {} and not (probe / "off" / "comm_trace.json").exists()


def test_comm_record_is_a_config_field_on_by_default() -> None:
    from workshop.training.config import config_from_args
    from workshop.training.train import build_parser

    assert config_from_args(build_parser().parse_args([]), {}).comm_record is True
    assert config_from_args(build_parser().parse_args(["--no-comm-record"]), {}).comm_record is False


def test_a_step_without_trace_shows_not_measured_in_the_timeline_never_zeros(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Notebook 04's timeline of a run whose step could not be recorded: every figure NaN with the summary's
    reason, and the plot draws that reason instead of empty rows (a step with no communication)."""
    from workshop.student.lab import Lab

    run = tmp_path / "run"
    run.mkdir()
    reason = "the step's trace could not be read: profiler error (test)"
    (run / "summary.json").write_text(json.dumps({"world_size": 2, "hosts": ["n1", "n1"],
                                                  "comm": {"status": "not measured", "reason": reason, "step": 3}}))
    monkeypatch.chdir(tmp_path)
    lab = Lab("local", quiet=True)
    table = lab.timeline(run)
    figures = ["compute_ms", "copy_ms", "collective_ms", "overlapped_ms", "exposed_ms"]
    assert list(table.index) == [0, 1] and table[figures].isna().all().all() and not (table[figures] == 0).any().any()
    assert (table["status"] == f"not measured: {reason}").all()
    fig = lab.plot("timeline", run, save="missing")
    shown = [t.get_text() for t in fig.axes[0].texts]
    assert shown == [f"not measured: {reason}"] and not fig.axes[0].patches
    assert (tmp_path / "plots" / "missing.png").stat().st_size > 0
    (run / "summary.json").write_text(json.dumps({"world_size": 1, "comm": {"status": "measured", "per_rank": []}}))
    assert lab.timeline(run)["status"].iloc[0].startswith("not measured: the run counted its collectives but kept no")
