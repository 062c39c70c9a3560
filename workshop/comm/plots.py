"""The communication figures: a prediction beside the measured collectives (bars, by kind), and one
recorded step as a timeline, one row per rank.

Each function returns the Figure and saves a PNG when given `path` (workshop.results.plots' habit).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.patches import Patch

from workshop.comm.model import KINDS
from workshop.comm.compare import NOT_MEASURED
from workshop.comm.timeline import read_timeline
from workshop.results.plots import save, plt

KIND_COLOURS = {"all_gather": "C0", "reduce_scatter": "C1", "all_reduce": "C2", "broadcast": "C4"}
COMPUTE_COLOUR = "0.75"
COPY_COLOUR = "tan"   # copies: apart from compute (workshop.comm.timeline)


def comm_bars(table: pd.DataFrame, path: str | Path | None = None) -> Any:
    """Per run, stacked by kind: the model's prediction (hatched), yours (dotted, when the table has
    one) and the measurement; a run that measured nothing says "not measured" where its bar would be."""
    runs = list(dict.fromkeys(table.index.get_level_values("run")))
    columns = [c for c in ("model", "predicted", "measured") if c in table.columns]
    hatches = {"model": "//", "predicted": "..", "measured": None}
    fig, ax = plt.subplots(figsize=(max(5, 1.8 * len(runs) + 2), 4.5))
    width = 0.8 / len(columns)
    labelled: set[str] = set()
    for i, run in enumerate(runs):
        rows = table.loc[run]
        kinds = [k for k in rows.index if k != "total"]
        for j, column in enumerate(columns):
            x = i - 0.4 + width * (j + 0.5)
            if rows[column].isna().all():
                ax.annotate(NOT_MEASURED if column == "measured" else "no prediction", (x, 0), ha="center",
                            va="bottom", fontsize=7, rotation=90)
                continue
            bottom = 0.0
            for kind in kinds:
                value = float(rows.loc[kind, column])
                if math.isnan(value):
                    continue
                ax.bar(x, value, width, bottom=bottom, color=KIND_COLOURS.get(kind, "C5"), hatch=hatches[column],
                       edgecolor="white")
                labelled.add(kind)
                bottom += value
    names = " | ".join(columns)
    ax.set_xticks(range(len(runs)), [f"{r}\n{names}" for r in runs], fontsize=8)
    ax.set_xlim(-0.6, len(runs) - 0.4)
    ax.set_ylabel(f"{table.attrs.get('measure', 'sent_elements').replace('_', ' ')} per rank and step")
    ax.set_title("Collectives per optimizer step: prediction vs measurement")
    handles = [Patch(color=KIND_COLOURS.get(k, "C5"), label=k) for k in sorted(labelled, key=_order)]
    handles += [Patch(facecolor="white", edgecolor="0.3", hatch=hatches[c], label=c) for c in columns]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))   # beside, not on, the bars
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)


def step_timeline(source: Any, path: str | Path | None = None, max_ranks: int = 16, why_missing: str | None = None) -> Any:
    """One recorded optimizer step: a row per rank, compute in grey, copies (FSDP2's buffer copies,
    host<->device transfers) in tan on the same row, each collective coloured by kind
    (its span on the backend: gloo's worker, NCCL's kernel). `source`: a job, a run or job folder, or
    the run's comm_trace.json. A run with no trace draws "not measured" and why (`why_missing`, its
    summary's reason) where the rows would be: an empty step is not a step with no communication."""
    try:
        timeline = read_timeline(source)
    except FileNotFoundError:
        fig, ax = plt.subplots(figsize=(10, 2))
        ax.text(0.5, 0.5, why_missing or f"{NOT_MEASURED}: the run kept no trace of its step", ha="center", va="center",
                wrap=True, fontsize=10)
        ax.set_axis_off()
        ax.set_title("Optimizer step, rank by rank", fontsize=9)
        return save(fig, path)
    lanes = timeline.lanes[:max_ranks]
    fig, ax = plt.subplots(figsize=(10, 0.7 * len(lanes) + 1.8))
    labelled: set[str] = set()
    for row, lane in enumerate(lanes):
        y = len(lanes) - 1 - row
        if lane.compute:
            ax.broken_barh([(s, e - s) for s, e in lane.compute], (y - 0.35, 0.3), color=COMPUTE_COLOUR,
                           label="compute" if "compute" not in labelled else None)
            labelled.add("compute")
        if lane.copies:
            ax.broken_barh([(s, e - s) for s, e in lane.copies], (y - 0.35, 0.3), color=COPY_COLOUR,
                           label="copy" if "copy" not in labelled else None)
            labelled.add("copy")
        for c in lane.collectives:
            kind = c.get("kind", "other")
            ax.broken_barh([(c["start_ms"], c["end_ms"] - c["start_ms"])], (y + 0.02, 0.33),
                           color=KIND_COLOURS.get(kind, "C5"), label=kind if kind not in labelled else None)
            labelled.add(kind)
    ax.set_yticks(range(len(lanes)), [f"rank {lane.rank}\n{lane.host}" for lane in reversed(lanes)], fontsize=8)
    ax.set_xlabel("ms from the step's start")
    how = ("CPU: each rank waits for its collectives, so they run in sequence with compute"
           if timeline.device == "cpu" else "GPU: collectives on their own stream, beside the compute kernels")
    ax.set_title(f"Optimizer step {timeline.step}, rank by rank ({how})", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    if labelled:
        ax.legend(fontsize=8, loc="upper right", ncol=4)
    return save(fig, path)


def _order(kind: str) -> int:
    return KINDS.index(kind) if kind in KINDS else len(KINDS)
