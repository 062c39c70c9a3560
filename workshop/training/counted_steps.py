"""Which optimizer steps the summary's throughput counts (workshop.training.throughput times them).

Step arithmetic only, no torch import: the class budget (workshop.site.budget) counts a site's steps
with the very rules a run applies. At run time every left-out step goes through the one place,
`workshop.training.metrics.StepCounter.leave_out_of_throughput` (the window's warm-up, the tracker's step,
the recorded communication step); these functions predict what a fresh run of at least 3 steps leaves
out, and a test checks a real run's summary against them. `expected_steps` is the Trainer's own count of
optimizer steps (notebook 04's hidden test grades the student's recipe against it): it lives here, not with the
grader's rules (`workshop.grading.fsdp_rules`), because the budget needs it in the student's install too.
"""

from __future__ import annotations

import math

# The steps a callback instruments, by name: never counted. One entry per instrumented callback; the
# callback reads its step from here (a run shorter than the step instruments its last one).
INSTRUMENTED_STEPS: dict[str, int] = {
    "tensor_memory": 2,     # workshop.training.tensor_memory: PyTorch's memory tracker over the whole step
    "comm": 3,              # workshop.training.comm_recorder: the profiler that records the step's collectives
}


def warmup_steps(max_steps: int) -> int:
    """Steps left out at the start: 10 % of the run, at least 1 and at most 10."""
    return max(1, min(10, max_steps // 10))


def instrumented_step(name: str, max_steps: int) -> int:
    """The optimizer step (1-based) the callback `name` instruments in a run of `max_steps` steps."""
    return min(INSTRUMENTED_STEPS[name], max(1, max_steps))


def excluded_steps(max_steps: int, first_step: int = 0) -> dict[str, list[int]]:
    """The steps the throughput leaves out, by reason, in a run that trains steps first_step+1..max_steps."""
    last_warm = min(max_steps, first_step + warmup_steps(max_steps))
    out = {"warmup": list(range(first_step + 1, last_warm + 1))}
    for name in INSTRUMENTED_STEPS:
        step = instrumented_step(name, max_steps)
        if step > first_step:
            out[name] = [step]
    return out


def counted_steps(max_steps: int, first_step: int = 0) -> list[int]:
    """The optimizer steps the summary's throughput counts."""
    left_out = {s for steps in excluded_steps(max_steps, first_step).values() for s in steps}
    return [s for s in range(first_step + 1, max_steps + 1) if s not in left_out]


def as_ranges(steps: list[int]) -> list[list[int]]:
    """[3, 4, 5, 9] -> [[3, 5], [9, 9]]: inclusive ranges, as summary.json names the steps."""
    out: list[list[int]] = []
    for s in sorted(steps):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out


def global_batch(batch_size: int, grad_acc: int, world_size: int) -> int:
    """Samples per optimizer step: micro-batch x accumulation steps x processes."""
    return batch_size * grad_acc * world_size


def expected_steps(train_size: int, epochs: float, batch_size: int, grad_acc: int, world_size: int) -> int:
    """Optimizer steps the Trainer takes (transformers' own arithmetic): each rank gets
    ceil(train_size / (batch_size x world_size)) micro-batches an epoch, every grad_acc of them (and
    a last, partial group) make a step, and a fractional epoch count is rounded up in steps."""
    per_epoch = math.ceil(math.ceil(train_size / (batch_size * world_size)) / grad_acc)
    return math.ceil(epochs * per_epoch)
