"""Throughput that measures training: the summary counts steady optimizer steps only (never the warm-up,
never an instrumented step), times them with the device synchronised at the window's edges only, and
no training step waits for the device to count tokens or to agree on a stop.

The callbacks are driven here with the Trainer's own state and control objects, step by step, as the
Trainer's loop calls them (transformers 5.23: on_step_begin, on_step_end, then log/evaluate/save, and
on_epoch_end after an epoch's last step); the training runs that exercise them end to end are in
tests/test_training.py."""

from __future__ import annotations

import torch
from transformers import TrainerControl, TrainerState

from workshop.training import counted_steps as steps, throughput
from workshop.training.counted_steps import counted_steps, excluded_steps
from workshop.training.data import HOST_TOKENS, DynamicPaddingCollator
from workshop.training.metrics import StepCounter
from workshop.training.throughput import ThroughputWindow
from workshop.training.trainer import STOP_CHECK_EVERY_GPU, CheckpointOnSignal, stop_check_every


def drive(window: ThroughputWindow, counter: StepCounter, max_steps: int, steps_per_epoch: int,
          save_at: tuple[int, ...] = (), left_out: dict[int, str] | None = None) -> None:
    """The Trainer's loop, as far as the window sees it: two samples of 10 tokens per step. `left_out`:
    the steps the instrumented callbacks leave out at train start (registered after the window's own
    on_train_begin, as the callbacks' order may have it); by default the tracker's and the recorder's."""
    state, control = TrainerState(max_steps=max_steps), TrainerControl()
    window.on_train_begin(None, state, control)
    for step, reason in (left_out if left_out is not None else {2: "tensor_memory", 3: "comm"}).items():
        counter.leave_out_of_throughput(step, reason)
    for step in range(1, max_steps + 1):
        window.on_step_begin(None, state, control)
        counter.add({"input_ids": torch.zeros(2, 5, dtype=torch.long), HOST_TOKENS: 10})
        state.global_step = step
        control.should_save = step in save_at
        control.should_training_stop = step == max_steps
        window.on_step_end(None, state, control)
        if step % steps_per_epoch == 0:
            window.on_epoch_end(None, state, control)
    window.on_train_end(None, state, control)


def test_the_counted_steps_leave_out_the_warm_up_and_every_instrumented_step() -> None:
    assert steps.INSTRUMENTED_STEPS == {"tensor_memory": 2, "comm": 3}
    assert excluded_steps(63) == {"warmup": [1, 2, 3, 4, 5, 6], "tensor_memory": [2], "comm": [3]}
    assert counted_steps(63) == list(range(7, 64))                       # inside the warm-up of a long run
    assert counted_steps(12) == list(range(4, 13))                       # the course's CPU runs: 1 warm-up step, 2 tracked, 3 recorded
    assert counted_steps(2) == []                                        # too short: no throughput, said so
    assert counted_steps(30, first_step=20) == list(range(24, 31))       # a resumed run warms up again


def test_a_new_instrumented_step_is_left_out_by_adding_it_in_one_place(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setitem(steps.INSTRUMENTED_STEPS, "communication", 8)
    assert excluded_steps(63)["communication"] == [8]
    assert 8 not in counted_steps(63) and 7 in counted_steps(63)


def test_the_window_times_each_segment_with_one_sync_at_each_edge() -> None:
    """24 steps, 6 per epoch: the counted steps 4..24 fall into five segments, cut by the epochs' ends
    (their evaluations are not training) and a checkpoint save after step 10. Two syncs per segment,
    none inside: a GPU's queue never drains between two steps of a segment."""
    syncs: list[int] = []
    counter = StepCounter()
    window = ThroughputWindow(counter, torch.device("cpu"), sync=lambda: syncs.append(counter.seen_samples))
    drive(window, counter, max_steps=24, steps_per_epoch=6, save_at=(10,))
    assert [seg[:2] for seg in window.segments] == [[4, 6], [7, 10], [11, 12], [13, 18], [19, 24]]
    assert len(syncs) == 2 * len(window.segments)
    assert window.samples == 2 * 21 and window.tokens == 10 * 21        # steps 4..24 only
    figures = window.figures(lambda value: [value, value], lambda seq: 1.0, None)   # two ranks, equal
    w = figures["throughput_window"]
    assert w["counted_steps"] == [[4, 24]] and w["steps_counted"] == 21
    assert w["excluded_steps"] == {"comm": [3], "tensor_memory": [2], "warmup": [1, 2]}
    assert w["samples"] == 2 * 42 and w["seconds"] == round(window.seconds, 6)
    assert abs(w["seconds"] - sum(seg[2] for seg in w["segments"])) < 1e-5   # the figure's time is its segments'
    assert figures["train_samples_per_s"] == round(2 * 42 / w["seconds"], 3)


def test_a_step_left_out_by_any_callback_leaves_the_window() -> None:
    """StepCounter.leave_out_of_throughput is the one way out of the window: a step registered there by
    any callback, whatever the callbacks' order at train start, is never timed nor counted; a run that
    records nothing (comm_record=false) counts its step 3."""
    counter = StepCounter()
    window = ThroughputWindow(counter, torch.device("cpu"))
    drive(window, counter, max_steps=20, steps_per_epoch=20, left_out={2: "tensor_memory", 9: "profiler"})
    assert [seg[:2] for seg in window.segments] == [[3, 8], [10, 20]]
    assert counter.left_out == {"warmup": [1, 2], "tensor_memory": [2], "profiler": [9]}
    assert window.samples == 2 * 17


def test_a_cuda_window_synchronizes_the_device() -> None:
    """What `device_sync` returns for a GPU calls torch.cuda.synchronize on it (here: a CPU-only torch says
    so), and a CPU needs none."""
    import pytest

    throughput.device_sync(torch.device("cpu"))()          # nothing to wait for
    sync = throughput.device_sync(torch.device("cuda", 0))
    if not torch.cuda.is_available():
        with pytest.raises((AssertionError, RuntimeError), match="CUDA|cuda|NVIDIA"):
            sync()


def test_tokens_are_counted_on_the_host_before_the_batch_moves() -> None:
    """The collator counts each batch's non-pad tokens; the counter takes that count and never sums the
    attention mask, which on a GPU is a device sync per micro-batch. A mask on the `meta` device (no data:
    reading it raises) stands for one whose value would have to come back from the GPU."""
    collate = DynamicPaddingCollator(pad_token_id=3)
    batch = collate([{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [5], "labels": [5]}])
    assert batch[HOST_TOKENS] == 4 == int(batch["attention_mask"].sum())
    batch["attention_mask"] = batch["attention_mask"].to("meta")
    counter = StepCounter()
    counter.add(batch)
    assert (counter.samples, counter.tokens, counter.seen_samples, counter.seen_tokens) == (2, 4, 2, 4)
    assert HOST_TOKENS not in batch                              # the model never sees it


def test_the_ranks_agree_on_a_stop_every_k_steps_on_a_gpu() -> None:
    """The agreement is a collective and an `.item()`: on a GPU every STOP_CHECK_EVERY_GPU steps, on a CPU
    (no device to wait for) every step. A request still stops the run at the next agreement."""
    assert stop_check_every(torch.device("cpu")) == 1 and stop_check_every(torch.device("cuda", 0)) == STOP_CHECK_EVERY_GPU
    asked: list[int] = []
    state, control = TrainerState(max_steps=40), TrainerControl()
    stopper = CheckpointOnSignal(is_main=False, requested=lambda: asked.append(state.global_step) or state.global_step > 23,
                                 every=STOP_CHECK_EVERY_GPU)
    for step in range(1, 41):
        state.global_step = step
        stopper.on_step_end(None, state, control)
        if control.should_training_stop:
            break
    assert asked == [10, 20, 30] and stopper.stopped_at == 30 and control.should_save
