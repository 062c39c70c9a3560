"""The explorer's "fits" labels do not overlap (issue 40, item 6): the A100-80GB and the H100-80GB have the same
usable memory, so their two labels were drawn at one height, over each other (seen in the rendered PNG).
GPUs of one size now share a line and a label; every label has a height of its own."""

from __future__ import annotations

from workshop.course import explorer


def test_each_fits_label_has_its_own_height_and_names_every_gpu() -> None:
    fig = explorer.explore("bloom-560m", 8, 512, "bf16", "full_shard", gpus=4).figure
    labels = [t for t in fig.axes[0].texts if "fit" in t.get_text()]
    heights = [t.xy[1] for t in labels]
    assert len(set(heights)) == len(heights) == len(set(explorer.GPUS.values()))
    named = " ".join(t.get_text() for t in labels)
    assert all(name in named for name in explorer.GPUS)
    assert "A100-80GB, H100-80GB fit" in named and "V100-32GB fits" in named
