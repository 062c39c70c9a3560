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
from workshop.results.memory import MB, compare
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


def device_notes(runs: Sequence[Any], names: Sequence[str] | None = None) -> list[str]:
    """Where a run was predicted for the site's GPUs but ran on CPU ranks (a course site whose GPUs this machine
    lacks): its measured params sit below the prediction for the site, and nothing said why. FSDP2 holds one
    block gathered at a time on a CPU rank, two on a GPU (the next block's all-gather overlaps this one's
    compute): the difference is one block in the compute dtype. The table beside is at the device it ran on."""
    from workshop.results.memory import estimate_config

    notes = []
    for label, log in load_named(runs, names):
        config, ran_on = log.config or {}, (log.summary or {}).get("device")
        if not config or ran_on != "cpu" or config.get("device", "auto") == "cpu":
            continue
        params_only = {**config, "loss": "full"}      # what is gathered does not depend on the loss
        site, here = estimate_config(params_only), estimate_config({**params_only, "device": "cpu"})
        if abs(site.params - here.params) < 1:
            continue
        notes.append(f"{label}: ran on CPU ranks, while the site's predictions (yours, the model's) are for its GPUs: "
                     f"params {here.params / MB:.2f} MB on a CPU rank (what it measured), {site.params / MB:.2f} MB on "
                     "a GPU, which holds one block more, gathered ahead while the block before computes (FSDP2's "
                     "prefetch; a CPU rank gathers one block at a time)")
    return notes
