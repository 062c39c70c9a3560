"""On CUDA, the run's peak since train start keeps a large allocation made before the tracked step,
whose start resets the allocator's peak counters (issue #35, item 1). The callbacks run in training's
order on a real model and a real allocator; metrics.peak_memory_mb is what every log record, and so
summary.json's peak_mem_mb and peak_reserved_mb, reads."""

from __future__ import annotations

from types import SimpleNamespace

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
