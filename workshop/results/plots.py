"""The course's four figures, drawn from parsed runs: loss curves, predicted vs measured memory,
scaling against the ideal line, and bus bandwidth against message size.

Each function returns the Figure (a notebook displays it) and saves a PNG when given `path`.
The Agg backend is chosen when there is no display, so batch jobs and CI can draw too.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import matplotlib

if not os.environ.get("DISPLAY") and "inline" not in os.environ.get("MPLBACKEND", ""):
    matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from workshop.results.logs import ParsedLog, load  # noqa: E402
from workshop.results.tables import RunLike, scaling_table  # noqa: E402
from workshop.training.categories import CATEGORIES  # noqa: E402

if TYPE_CHECKING:
    import pandas as pd


def save(fig: Figure, path: str | Path | None) -> Figure:
    """Write the figure when a path is given and return it: the last step of every plot, here and in
    workshop.comm.plots, so figures are saved alike."""
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


def _train_points(log: ParsedLog) -> tuple[list[float], list[float]]:
    if log.train_metrics:
        pts = [(m.data.get("step"), m.data.get("loss")) for m in log.train_metrics]
    elif log.steps:
        pts = [(s.step, s.values.get("loss")) for s in log.steps]
    else:  # Trainer dicts carry no step: number them
        pts = [(i, r.values.get("loss")) for i, r in enumerate(log.train_records, start=1)]
    pts = [(float(x), float(y)) for x, y in pts if x is not None and y is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def _eval_points(log: ParsedLog) -> tuple[list[float], list[float]]:
    pts = [(m.data.get("step"), m.data.get("eval_loss")) for m in log.eval_metrics]
    if not pts and not log.train_metrics and not log.steps:  # Trainer dicts: the train dicts logged before it
        pts = [(sum(t.lineno < r.lineno for t in log.train_records), r.values.get("eval_loss"))
               for r in log.eval_records]
    pts = [(float(x), float(y)) for x, y in pts if x is not None and y is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def loss_curves(runs: Iterable[RunLike], path: str | Path | None = None) -> Figure:
    """Train loss (line) and eval loss (markers) per optimizer step, one colour per run."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, run in enumerate(runs):
        log = load(run)
        colour = f"C{i % 10}"
        x, y = _train_points(log)
        if x:
            ax.plot(x, y, color=colour, label=f"{log.label} train")
        ex, ey = _eval_points(log)
        if ex:
            ax.plot(ex, ey, "o--", color=colour, label=f"{log.label} eval")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title("Loss per step")
    ax.grid(alpha=0.3)
    if ax.has_data():
        ax.legend(fontsize=8)
    return save(fig, path)


def memory_bars(labels: Sequence[str], predicted_mb: Sequence[float], measured_mb: Sequence[float],
                path: str | Path | None = None) -> Figure:
    """Predicted (memory model) and measured peak memory per GPU, side by side per config."""
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(labels) + 2), 4))
    xs = range(len(labels))
    w = 0.38
    ax.bar([x - w / 2 for x in xs], predicted_mb, w, label="predicted", color="C0", alpha=0.8)
    ax.bar([x + w / 2 for x in xs], [0 if math.isnan(m) else m for m in measured_mb], w, label="measured",
           color="C1", alpha=0.8)
    for x, m in zip(xs, measured_mb):
        if math.isnan(m):
            ax.annotate("not measured", (x + w / 2, 0), ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_xticks(list(xs), labels, rotation=20, ha="right")
    ax.set_ylabel("peak memory per GPU (MB)")
    ax.set_title("Memory model vs measurement")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)


STACK = CATEGORIES


def memory_category_bars(table: "pd.DataFrame", path: str | Path | None = None) -> Figure:
    """Predicted (hatched) and measured tensor memory per GPU, stacked by category, one pair per run;
    a black tick marks each bar's peak (the most alive at once: less than the stack, since categories
    peak at different moments of a step)."""
    runs = list(dict.fromkeys(table.index.get_level_values("run")))
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(runs) + 2), 4.5))
    w = 0.38
    for i, run in enumerate(runs):
        rows = table.loc[run]
        for offset, column, hatch in ((-w / 2, "predicted_mb", "//"), (w / 2, "measured_mb", None)):
            bottom = 0.0
            for j, category in enumerate(STACK):
                value = float(rows.loc[category, column]) if category in rows.index else 0.0
                ax.bar(i + offset, value, w, bottom=bottom, color=f"C{j}", hatch=hatch, edgecolor="white",
                       label=category if i == 0 and hatch is None else None)
                bottom += value
            if "peak" in rows.index:
                ax.plot([i + offset - w / 2, i + offset + w / 2], [rows.loc["peak", column]] * 2, color="black")
    ax.set_xticks(range(len(runs)), [f"{r}\npredicted | measured" for r in runs], fontsize=8)
    ax.set_ylabel("tensor memory per GPU / rank (MB)")
    ax.set_title("Memory model (hatched) vs measurement, by category; black: peak")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)


def scaling_plot(runs: Iterable[RunLike], path: str | Path | None = None, efficiency_labels: bool = True) -> Figure:
    """Throughput against world size, with the ideal (linear from the smallest run) line; each point labelled
    with its efficiency unless `efficiency_labels` is False (notebook 04 asks the student for them)."""
    table = scaling_table(runs, predicted_mem_mb=False)
    df = table.dropna(subset=["world_size", "samples_per_s"])
    fig, ax = plt.subplots(figsize=(6, 4))
    if len(df):
        w0, s0 = df["world_size"].iloc[0], df["samples_per_s"].iloc[0]
        ws = list(df["world_size"])
        ax.plot(ws, [s0 * w / w0 for w in ws], "k--", label="ideal (linear)")
        ax.plot(ws, list(df["samples_per_s"]), "o-", color="C0", label="measured")
        for w, s, e in zip(ws, df["samples_per_s"], df["efficiency"]) if efficiency_labels else ():
            ax.annotate(f"{e:.0%}", (w, s), textcoords="offset points", xytext=(4, -12), fontsize=8)
        ax.set_xticks(ws)
        ax.legend()
    for note in table.attrs["notes"]:
        if "above perfect scaling" in note:
            print(f"note: {note if efficiency_labels else re.sub(r'efficiency [0-9]+% is ', '', note)}")
    ax.set_xlabel("GPUs (world size)")
    ax.set_ylabel("train samples/s")
    ax.set_title("Scaling at constant global batch" + (" (labels: efficiency)" if efficiency_labels else ""))
    ax.grid(alpha=0.3)
    return save(fig, path)


def bandwidth_plot(logs: Iterable[RunLike], path: str | Path | None = None) -> Figure:
    """Bus bandwidth against message size (log x), one line per bandwidth log."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, src in enumerate(logs):
        log = load(src)
        if log.bandwidth is None or not log.bandwidth.rows:
            continue
        rows = sorted(log.bandwidth.rows, key=lambda r: r.size_bytes)
        n = f" ({log.bandwidth.n_ranks} ranks)" if log.bandwidth.n_ranks else ""
        ax.plot([r.size_bytes for r in rows], [r.busbw_GBps for r in rows], "o-", color=f"C{i % 10}",
                label=f"{log.label}{n}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("all_reduce bus bandwidth")
    ax.grid(alpha=0.3, which="both")
    if ax.has_data():
        ax.legend(fontsize=8)
    return save(fig, path)
