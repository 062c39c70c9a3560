"""Every speed shown twice agrees or says why (issue 54, point 5): the table's samples/s and a log's step line
count different steps, and two runs whose figures each lie within the other's step-to-step spread are said to
be within the machine's noise. The figures are notebook 02's and 03's as a student met them on 2 cores."""

from __future__ import annotations

from workshop.results import speed_notes as sn
from workshop.results.logs import MetricRecord, ParsedLog

WINDOW = {"counted_steps": [[4, 8]], "excluded_steps": {"warmup": [1, 2], "tensor_memory": [3]}}


def run(rates: list[float], table: float) -> ParsedLog:
    """A run whose steps 1-8 logged `rates` (the first three outside the window) and whose summary says `table`."""
    metrics = [MetricRecord("train", {"kind": "train", "step": i + 1, "samples_per_s": r}, i) for i, r in enumerate(rates)]
    return ParsedLog(metrics=metrics, summary={"train_samples_per_s": table, "throughput_window": WINDOW})


def test_the_table_says_which_steps_its_samples_per_s_counts() -> None:
    logs = [run([9.0, 5.8, 3.4, 28.0, 30.0, 27.5, 31.0, 35.9], 29.7)]       # the log's last line: 35.9, the table 29.7
    assert sn.step_rates(logs[0]) == [28.0, 30.0, 27.5, 31.0, 35.9]
    notes = sn.speed_notes(["baseline"], logs, [29.7], None)
    assert notes == ["samples/s counts steps 4-8 (left out: warmup 1-2; tensor_memory 3) of each run; a log's "
                     "'[workshop] step' line counts only the steps since the line before it, so its figure differs"]


def test_a_difference_within_the_runs_own_spread_is_called_noise_and_a_real_one_is_not() -> None:
    full_shard = run([1, 1, 1, 18.0, 26.0, 21.0, 30.5, 24.0], 22.7)
    offload = run([1, 1, 1, 25.0, 34.0, 22.0, 31.0, 36.0], 29.8)
    labels = ["full_shard", "full_shard+offload"]
    notes = sn.speed_notes(labels, [full_shard, offload], [22.7, 29.8], 0)
    assert len(notes) == 2 and notes[1].startswith("full_shard+offload vs full_shard: 29.8 vs 22.7 samples/s, each "
                                                   "within the other run's own step-to-step spread (22.0-36.0 and "
                                                   "18.0-30.5): within this machine's noise")
    fast = run([1, 1, 1, 40.0, 44.0, 41.0, 45.0, 43.0], 42.6)          # every step faster than any of full_shard's
    assert len(sn.speed_notes(labels, [full_shard, fast], [22.7, 42.6], 0)) == 1
    few = run([1, 1, 1, 25.0], 25.0)                                    # one interval: no spread to judge by
    assert sn.noise_note("x", 25.0, sn.step_rates(few), "full_shard", 22.7, sn.step_rates(full_shard)) is None
