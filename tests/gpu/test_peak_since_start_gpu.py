"""On CUDA, the run's peak since train start keeps a large allocation made before the tracked step,
whose start resets the allocator's peak counters (issue #35, item 1). The callbacks run in training's
order on a real model and a real allocator; metrics.peak_memory_mb is what every log record, and so
summary.json's peak_mem_mb and peak_reserved_mb, reads."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

MB = 2**20


def test_a_large_allocation_before_the_tracked_step_shows_in_the_peak(figures) -> None:
    from workshop.training import metrics
    from workshop.training.tensor_memory import TensorMemoryCallback

    device = torch.device("cuda")
    model = torch.nn.Linear(256, 256, device=device)
    optimizer = torch.optim.AdamW(model.parameters())
    callback = TensorMemoryCallback(device, offload=False)
    state = SimpleNamespace(global_step=0, max_steps=4)
    callback.on_train_begin(None, state, None)
    big = torch.empty(1024 * MB, dtype=torch.uint8, device=device)   # 1 GiB during step 1
    del big
    torch.cuda.empty_cache()   # so that the reserved peak, too, must come from before the reset
    for step in range(4):
        state.global_step = step
        callback.on_step_begin(None, state, None, optimizer=optimizer, model=model)
        model(torch.randn(8, 256, device=device)).sum().backward()
        optimizer.step()
        callback.on_step_end(None, state, None)
    used, reserved, kind = metrics.peak_memory_mb(device, callback)
    raw = torch.cuda.max_memory_allocated(device) / MB
    figures.put("peak_since_train_start", used_mb=round(used, 1), reserved_mb=round(reserved, 1),
                counters_after_reset_mb=round(raw, 1), step=callback.measured)
    assert callback.measured is not None and kind == "cuda_allocated"
    assert used >= 1024 and reserved >= 1024, (used, reserved)
    assert raw < 1024, f"the tracked step's reset did not happen (raw counter {raw:.1f} MB)"
    assert callback.measured["allocator_peak"] >= 1024 > callback.measured["allocator_step_peak"]


@pytest.mark.parametrize("name", ["full_shard-bf16"])
def test_the_tracked_steps_memory_snapshot_is_written_beside_the_run(gpu_runs, figures, name) -> None:
    """The CUDA memory snapshot of the tracked step (issue #35, item 4): written into the run folder,
    under the size cap, and a pickle PyTorch's memory viewer reads (segments and the device's trace)."""
    import pickle

    from workshop.training.tensor_memory import SNAPSHOT_CAP_BYTES

    run = gpu_runs[name]
    info = run.summary["memory_snapshot"]
    figures.put("memory_snapshot", run=run.name, **info)
    assert info["file"], info
    path = run.out_dir / info["file"]
    assert 0 < path.stat().st_size <= SNAPSHOT_CAP_BYTES
    snapshot = pickle.loads(path.read_bytes())
    assert snapshot["segments"] and any(snapshot["device_traces"]), list(snapshot)


@pytest.mark.parametrize("name", ["full_shard-fp16"])
def test_fp16_fsdp_reduces_in_fp32_on_the_wire(gpu_runs, figures, name) -> None:
    """Issue #35, item 2 on NCCL: the fp16 FSDP run's units reduce in fp32 (read back), and the recorded
    reduce-scatters move 4 bytes per element while the all-gathers move 2."""
    s = gpu_runs[name].summary
    figures.put("fp16_reduce_dtype", run=name, mp_param_dtype=s.get("mp_param_dtype"),
                mp_reduce_dtype=s.get("mp_reduce_dtype"), comm_status=(s.get("comm") or {}).get("status"))
    assert (s["mp_param_dtype"], s["mp_reduce_dtype"]) == ("float16", "float32")
    if s["comm"]["status"] == "measured" and s["comm"]["per_rank"][0]["by_kind"]:
        by_kind = s["comm"]["per_rank"][0]["by_kind"]
        assert by_kind["reduce_scatter"]["bytes"] == 4 * by_kind["reduce_scatter"]["elements"]
