"""Predicted vs measured tensor memory per category for finished runs: the table behind the notebooks'
"memory model vs measurement" plot.

A run's summary.json carries what PyTorch's tracker measured on each rank (workshop.training.tensor_memory)
and its config (run_args.json, or the WORKSHOP_RUN_ARGS line of its log) what the memory model needs;
each run is shown on its busiest rank (the largest measured peak), predicted at the batch shape that
rank's measured step trained on.
"""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from workshop.results.logs import load_named
from workshop.results.memory import compare
from workshop.training.categories import CATEGORIES, HOST

SHOWN = (*CATEGORIES, "peak", *HOST)


def memory_table(runs: Sequence[Any], names: Sequence[str] | None = None) -> pd.DataFrame:
    """Rows (run, category); columns predicted_mb, measured_mb, rel_error. A run that measured nothing
    (no tensor_mem_mb_per_rank) is refused with what to do, rather than shown as zeros."""
    frames = []
    for label, log in load_named(runs, names):
        summary, config = log.summary or {}, log.config or {}
        measured = [r for r in summary.get("tensor_mem_mb_per_rank") or [] if r]
        if not measured or not config:
            raise ValueError(f"{label}: the run recorded no tensor memory or no config (summary.json's "
                             "tensor_mem_mb_per_rank, run_args.json): run it again with this version of workshop")
        busiest = max(range(len(measured)), key=lambda r: measured[r].get("peak") or 0)
        rows = [r for r in compare(summary, config) if r["rank"] == busiest and r["category"] in SHOWN]
        frames.append(pd.DataFrame([{"run": label, **r} for r in rows]))
    return pd.concat(frames).set_index(["run", "category"])
