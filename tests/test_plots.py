"""Each figure draws from parsed runs, returns a Figure and saves a PNG."""

from __future__ import annotations

import json
from pathlib import Path

from matplotlib.figure import Figure

from tests.logs_fixtures import LOGS, REAL_RUN
from workshop.results import plots
from workshop.results.logs import parse_text


def _png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_loss_curves(tmp_path: Path) -> None:
    fig = plots.loss_curves([REAL_RUN, LOGS / "hf4_trainer_srun_label.log"], tmp_path / "loss.png")
    assert isinstance(fig, Figure) and _png(tmp_path / "loss.png")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["fs2 train", "fs2 eval", "hf4_trainer_srun_label train", "hf4_trainer_srun_label eval"]


def test_memory_bars_show_unmeasured_as_such(tmp_path: Path) -> None:
    fig = plots.memory_bars(["none x1", "full_shard x4"], [24544.0, 18105.0], [23000.0, float("nan")],
                            tmp_path / "mem.png")
    assert _png(tmp_path / "mem.png")
    assert any(t.get_text() == "not measured" for t in fig.axes[0].texts)


def test_scaling_plot_has_the_ideal_line(tmp_path: Path) -> None:
    runs = [parse_text("WORKSHOP_SUMMARY " + json.dumps({"world_size": w, "nodes": 1, "global_batch": 8,
                                                           "train_samples_per_s": s}), f"w{w}")
            for w, s in ((1, 10.0), (2, 18.0), (4, 30.0))]
    fig = plots.scaling_plot(runs, tmp_path / "scaling.png")
    ideal = fig.axes[0].get_lines()[0]
    assert list(ideal.get_ydata()) == [10.0, 20.0, 40.0] and _png(tmp_path / "scaling.png")
    assert [t.get_text() for t in fig.axes[0].texts] == ["100%", "90%", "75%"]
    # notebook 04 asks the student for the efficiencies: its plot leaves them out (the feedback shows them)
    assert len(plots.scaling_plot(runs, efficiency_labels=False).axes[0].texts) == 0


def test_bandwidth_plot_is_log_x(tmp_path: Path) -> None:
    fig = plots.bandwidth_plot([LOGS / "nccl_tests_all_reduce_perf.log"], tmp_path / "bw.png")
    assert fig.axes[0].get_xscale() == "log" and len(fig.axes[0].get_lines()[0].get_xdata()) == 6
    assert _png(tmp_path / "bw.png")
