"""The explorer's "fits" labels do not overlap (issue 40, item 6): the A100-80GB and the H100-80GB have the same
usable memory, so their two labels were drawn at one height, over each other (seen in the rendered PNG).
GPUs of one size now share a line and a label; every label has a height of its own."""

from __future__ import annotations

from workshop.student import explorer


def test_each_fits_label_has_its_own_height_and_names_every_gpu() -> None:
    fig = explorer.explore("bloom-560m", 8, 512, "bf16", "full_shard", gpus=4).figure
    labels = [t for t in fig.axes[0].texts if "fit" in t.get_text()]
    heights = [t.xy[1] for t in labels]
    assert len(set(heights)) == len(heights) == len(set(explorer.GPUS.values()))
    named = " ".join(t.get_text() for t in labels)
    assert all(name in named for name in explorer.GPUS)
    assert "A100-80GB, H100-80GB fit" in named and "V100-32GB fits" in named


def test_the_verdict_matches_the_bars_and_every_label_stays_inside() -> None:
    """Issue 54, point 5: under "V100-32GB fits" the stacked bar rose above the V100 line (each category's own
    peak, summed, is more than the peak alive at once); the legend covered the 80 GB line. Now the solid bar ends
    at the peak the verdict compares, the rest is faded, and the legend and labels sit inside the figure, off
    the GPU lines."""
    from workshop.results.memory import GiB

    # bloom-1b1, full_shard on 4, 10 x 512 bf16: its peak (~30.1 GiB) fits a V100, its categories' sum does not
    r = explorer.explore("bloom-1b1", 10, 512, "bf16", "full_shard", gpus=4)
    assert r.fits["V100-32GB"] and sum(getattr(r.breakdown, c) for c in explorer.CATEGORIES) > explorer.GPUS["V100-32GB"]
    fig = r.figure
    ax = fig.axes[0]
    solid = [p for p in ax.patches if p.get_alpha() in (None, 1.0) and abs(p.get_x() + p.get_width() / 2) < 1e-9]
    top = max(p.get_y() + p.get_height() for p in solid)
    assert abs(top - r.breakdown.peak / GiB) < 1e-6 and top <= explorer.GPUS["V100-32GB"] / GiB
    faded = [p for p in ax.patches if p.get_alpha() == 0.25 and p.get_height() > 0]
    assert faded and min(p.get_y() for p in faded) >= top - 1e-6
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    legend = ax.get_legend().get_window_extent(renderer)
    inside = lambda box: box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1 and box.y0 >= page.y0 - 1 and box.y1 <= page.y1 + 1
    assert inside(legend), (legend, page)
    for text in ax.texts:
        assert inside(text.get_window_extent(renderer)), text.get_text()
        assert text.get_window_extent(renderer).x1 <= ax.get_window_extent(renderer).x1 + 1, text.get_text()
    # the legend is beside the axes: no GPU line runs under it
    assert legend.x0 >= ax.get_window_extent(renderer).x1


def test_the_explorer_speaks_one_unit_and_shows_whole_labels() -> None:
    """The figure is in GiB, and so are the lines printed under it (they were in MB); no control's label is cut."""
    import inspect

    source = inspect.getsource(explorer.memory_explorer)
    assert " MB" not in source and "GiB" in source
    widget = explorer.memory_explorer()
    for control in widget.kwargs_widgets:
        assert control.style.description_width == "initial", control.description
