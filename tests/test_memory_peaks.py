"""The CUDA peak since train start survives the tracked step's counter reset (issue #35, item 1).

The CUDA caching allocator cannot run here, so `Allocator` below plays its two counters the way
PyTorch documents them: `max_memory_allocated` is the largest `memory_allocated` since the last
`reset_peak_memory_stats`, which sets the peak to what is allocated now (likewise reserved, which the
caching allocator keeps until emptied). tests/gpu/test_memory_gpu.py proves the same on a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from workshop.training import metrics
from workshop.training.tensor_memory import AllocatorPeaks, TensorMemoryCallback

MB = 2**20


class Allocator:
    def __init__(self) -> None:
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0

    def alloc(self, nbytes: int) -> None:
        self.allocated += nbytes
        self.reserved = max(self.reserved, self.allocated)   # the cache keeps what it reserved
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def free(self, nbytes: int) -> None:
        self.allocated -= nbytes

    def read(self) -> tuple[int, int]:
        return self.peak_allocated, self.peak_reserved

    def reset(self) -> None:
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved


def test_a_peak_before_the_reset_is_kept_and_the_steps_own_is_apart():
    a = Allocator()
    peaks = AllocatorPeaks(a.read, a.reset)
    a.alloc(50 * MB)                 # the untrained model's generation run: before train start
    a.alloc(500 * MB)
    a.free(500 * MB)
    peaks.start()                    # train start: 50 MB allocated, the cache still holds 550 MB
    assert peaks.since_start() == (50 * MB, 550 * MB)
    a.alloc(900 * MB)                # step 1: a large temporary
    a.free(900 * MB)
    peaks.reset_keeping_peaks()      # the tracked step (2) begins
    a.alloc(300 * MB)
    a.free(300 * MB)
    # by hand: allocated peak since start 50 + 900 = 950 MB; reserved 950 MB (the cache grew to it);
    # the tracked step alone: 50 + 300 = 350 MB allocated, 950 reserved (nothing was emptied)
    assert peaks.since_start() == (950 * MB, 950 * MB)
    assert peaks.since_reset() == (350 * MB, 950 * MB)
    a.alloc(1200 * MB)               # a later step beats the earlier peak
    assert peaks.since_start() == (1250 * MB, 1250 * MB)


def test_the_logged_peak_on_cuda_is_the_peak_since_train_start():
    """The training callbacks in order: metrics.peak_memory_mb (each log record, so summary.json's
    peak_mem_mb and peak_reserved_mb) reads the combined peaks, not the counters after the reset."""
    a = Allocator()
    callback = TensorMemoryCallback(torch.device("cuda"), offload=False)
    callback.peaks = AllocatorPeaks(a.read, a.reset)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = SimpleNamespace(global_step=0, max_steps=4)
    callback.on_train_begin(None, state, None)
    a.alloc(900 * MB)
    a.free(900 * MB)                 # step 1's large allocation
    assert callback.measure_step == 2
    state.global_step = 1
    callback.on_step_begin(None, state, None, optimizer=optimizer, model=model)
    a.alloc(300 * MB)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    callback.on_step_end(None, state, None)
    a.free(300 * MB)
    assert callback.measured["allocator_step_peak"] == 300.0
    assert callback.measured["allocator_peak"] == 900.0
    used, reserved, kind = metrics.peak_memory_mb(torch.device("cuda"), callback)
    assert (used, reserved, kind) == (900.0, 900.0, "cuda_allocated")
    assert callback.peak_so_far_mb() == 900.0
