"""The summary's throughput: steady optimizer steps only, timed with the device synchronised at the edges.

What summary.json's `train_samples_per_s`, `train_tokens_per_s` and `mfu` count: every optimizer step
of the run except
- the warm-up: the first `warmup_steps(max_steps)` steps after train start (or resume), which pay for
  the CUDA context, NCCL's communicators, FSDP's lazy initialisation and the allocator's growth;
- every instrumented step: a step run under PyTorch's memory tracker (a dispatch mode: a Python call
  per operator, workshop.training.tensor_memory) or the profiler that records the step's collectives
  (workshop.training.comm_recorder) is several times slower than training.
Every one of them, the warm-up included, is left out through `StepCounter.leave_out_of_throughput`
(the one place), at train start; the window counts the steps nobody left out.
Their steps fall into segments of consecutive counted steps. A segment also ends before what is
not training: an evaluation (at each epoch's end) and a checkpoint save. Each segment is timed from
its first step's `on_step_begin` to its last step's `on_step_end`, with the device synchronised at
those two edges and nowhere else: a GPU runs ahead of the host, so without the synchronisation the
clock would stop when the last kernels were queued rather than when they ran, and with one at every
step the host would stall the GPU's queue each step. Logging, every `logging_steps`, stays inside the
segments: its cost (a loss `.item()`, a few small collectives) is part of training at that interval.
The steps counted are named in summary.json (`throughput_window`).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
from transformers import TrainerCallback

from workshop.training.counted_steps import as_ranges, warmup_steps

def device_sync(device: torch.device) -> Callable[[], None]:
    """What waits for the device's queued work: torch.cuda.synchronize on a GPU; nothing on a CPU,
    whose operators return when they are done."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


class ThroughputWindow(TrainerCallback):
    """Times the counted steps (see the module docstring) and counts the samples and tokens they trained.

    Register it after every callback that may ask for a save or an evaluation at a step's end
    (CheckpointOnSignal): a segment ends before either. `counter` is the StepCounter the trainer fills
    (its `seen_samples` / `seen_tokens` only grow)."""

    def __init__(self, counter: Any, device: torch.device, sync: Callable[[], None] | None = None) -> None:
        self.counter = counter
        self.device = device
        self.sync = sync or device_sync(device)
        self.excluded: dict[str, list[int]] = {}
        self.counted: set[int] = set()
        self.segments: list[list[Any]] = []          # [first, last(, seconds once closed)] of each timed segment
        self.seconds = 0.0
        self.samples = 0
        self.tokens = 0
        self._open: tuple[float, int, int] | None = None
        self._steps: tuple[int, int] | None = None

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
        first = state.global_step   # > 0 after a resume: its first steps warm up again
        for step in range(first + 1, min(state.max_steps, first + warmup_steps(state.max_steps)) + 1):
            self.counter.leave_out_of_throughput(step, "warmup")
        self._steps = (first, state.max_steps)
        self.counted = set()

    def _settle(self) -> None:
        """The counted steps, once every callback's on_train_begin has left its steps out."""
        if self._steps is not None:
            first, last = self._steps
            left_out = self.counter.left_out_steps()
            self.counted = {s for s in range(first + 1, last + 1) if s not in left_out}
            self.excluded = {reason: sorted(steps) for reason, steps in sorted(self.counter.left_out.items())}
            self._steps = None

    def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001
        self._settle()
        step = state.global_step + 1
        if self._open is None and step in self.counted:
            self._open = self._mark()
            self.segments.append([step, step])

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
        if self._open is None:
            return
        step = state.global_step
        self.segments[-1][1] = step
        if (step + 1 not in self.counted or step >= state.max_steps or control.should_save
                or control.should_evaluate or control.should_training_stop):
            self._close()

    def on_epoch_end(self, args, state, control, **kwargs):  # noqa: ANN001
        if self._open is not None:       # the epoch's evaluation (and the next epoch's data loader) follow
            self._close()

    def on_train_end(self, args, state, control, **kwargs):  # noqa: ANN001
        if self._open is not None:
            self._close()

    def _mark(self) -> tuple[float, int, int]:
        self.sync()
        return time.perf_counter(), self.counter.seen_samples, self.counter.seen_tokens

    def _close(self) -> None:
        assert self._open is not None
        t1, samples1, tokens1 = self._mark()
        t0, samples0, tokens0 = self._open
        self.seconds += t1 - t0
        self.segments[-1].append(round(t1 - t0, 6))    # [first, last, seconds]: the record of what was timed
        self.samples += samples1 - samples0
        self.tokens += tokens1 - tokens0
        self._open = None

    def counted_in(self, first: int, last: int) -> bool:
        """Are all of the steps first..last counted? (a metrics.jsonl record covers such a span)"""
        return all(s in self.counted for s in range(first, last + 1))

    def figures(self, gather: Callable[[Any], list[Any]], flops_per_token: Callable[[float], float],
                peak_tflops: float | None) -> dict[str, Any]:
        """The summary's throughput fields. Every rank must call it (`gather` is a collective): samples
        and tokens are summed over the ranks, the time is the slowest rank's."""
        per_rank = gather((self.samples, self.tokens, round(self.seconds, 6), self.segments))
        samples = sum(r[0] for r in per_rank)
        tokens = sum(r[1] for r in per_rank)
        slowest = max(per_rank, key=lambda r: r[2])
        seconds = slowest[2]
        steps = [s for first, last, *_ in self.segments for s in range(first, last + 1)]
        window = {"counted_steps": as_ranges(steps), "steps_counted": len(steps), "excluded_steps": self.excluded,
                  "samples": samples, "tokens": tokens, "seconds": seconds,
                  "segments": slowest[3],   # the slowest rank's [first step, last step, seconds]: `seconds` sums them
                  "clock": "torch.cuda.synchronize at each segment's edges" if self.device.type == "cuda"
                  else "host clock (CPU operators are synchronous)"}
        if not steps or seconds <= 0:
            window["note"] = "no step left after the warm-up and the instrumented steps: no throughput"
            return {"train_samples_per_s": None, "train_tokens_per_s": None, "mfu": None, "throughput_window": window}
        tok_s = tokens / seconds
        tflops = tok_s * flops_per_token(tokens / samples if samples else 0.0) / 1e12
        return {"train_samples_per_s": round(samples / seconds, 3), "train_tokens_per_s": round(tok_s, 1),
                "mfu": round(tflops / (peak_tflops * len(per_rank)), 4) if peak_tflops else None,
                "throughput_window": window}
