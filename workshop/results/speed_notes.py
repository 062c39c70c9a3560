"""Why two samples/s figures of the same course differ, said beside the exercise table.

A student sees one run's speed twice: the last `[workshop] step` line of its log (the job table keeps it) and
the table's samples/s. They count different steps: a step line, only the steps since the line before it; the
table, the summary's throughput window (every counted step, after the warm-up and the instrumented steps). So
35.9 in the log and 29.7 in the table were both right, and nothing said so. And two runs' speeds on a shared
CPU machine differ by more between steps than between strategies: full_shard at 22.7 and offload at 29.8 read
as "offload is faster" when each run's own steps spread wider than that. Each note here gives the reason with
the figures, from the job's own log.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from workshop.results.logs import ParsedLog


def counted_steps(log: ParsedLog) -> set[int]:
    """The steps the summary's throughput counts (its `throughput_window`)."""
    window = (log.summary or {}).get("throughput_window") or {}
    return {s for pair in window.get("counted_steps", []) if len(pair) == 2 for s in range(pair[0], pair[1] + 1)}


def step_rates(log: ParsedLog) -> list[float]:
    """samples/s of each logged interval that ends on a counted step: the run's own step-to-step spread."""
    steps = counted_steps(log)
    return [float(m.data["samples_per_s"]) for m in log.train_metrics
            if m.step in steps and isinstance(m.data.get("samples_per_s"), (int, float))]


def _ranges(steps: set[int]) -> str:
    out, ordered = [], sorted(steps)
    for s in ordered:
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in out)


def window_words(log: ParsedLog) -> str | None:
    """Which steps the table's samples/s counts, and which it leaves out and why."""
    window = (log.summary or {}).get("throughput_window") or {}
    steps = counted_steps(log)
    if not steps:
        return None
    left_out = "; ".join(f"{why} {_ranges(set(s))}" for why, s in (window.get("excluded_steps") or {}).items() if s)
    return f"steps {_ranges(steps)}" + (f" (left out: {left_out})" if left_out else "")


def noise_note(label: str, sps: float, rates: Sequence[float], ref_label: str, ref_sps: float,
               ref_rates: Sequence[float]) -> str | None:
    """Two runs' samples/s, when each lies within the other run's own step-to-step spread: noise."""
    if math.isnan(sps) or math.isnan(ref_sps) or len(rates) < 2 or len(ref_rates) < 2:
        return None
    # each run's figure lies among the other run's own steps: the steps of one run vary as much as the two differ
    if not (min(ref_rates) <= sps <= max(ref_rates) and min(rates) <= ref_sps <= max(rates)):
        return None
    return (f"{label} vs {ref_label}: {sps:.1f} vs {ref_sps:.1f} samples/s, each within the other run's own "
            f"step-to-step spread ({min(rates):.1f}-{max(rates):.1f} and {min(ref_rates):.1f}-{max(ref_rates):.1f}): "
            "within this machine's noise, not a difference between them (run both again to see it move)")


def speed_notes(labels: Sequence[str], logs: Sequence[ParsedLog], sps: Sequence[float],
                reference: int | None) -> list[str]:
    """Which steps the samples/s count (once for runs alike), and each run's noise note against run number
    `reference`, where one applies."""
    windows: dict[str, list[str]] = {}
    for label, log in zip(labels, logs):
        if words := window_words(log):
            windows.setdefault(words, []).append(label)
    notes = [f"samples/s counts {words} of {'each run' if len(runs) == len(labels) else ', '.join(runs)}; a log's "
             "'[workshop] step' line counts only the steps since the line before it, so its figure differs"
             for words, runs in windows.items()]
    if reference is not None:
        ref_rates = step_rates(logs[reference])
        for i, (label, log) in enumerate(zip(labels, logs)):
            if i != reference and (n := noise_note(label, sps[i], step_rates(log), labels[reference], sps[reference],
                                                   ref_rates)):
                notes.append(n)
    return notes
