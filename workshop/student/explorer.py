"""The memory explorer: move a control, see the memory model's bytes per GPU by category and which GPUs it fits.

`explore(...)` is the plain function (papermill, tests and a notebook without widgets call it);
`memory_explorer()` wraps the same function in ipywidgets controls for JupyterLab. The figures
all come from workshop.results.memory.estimate; this module only chooses the inputs and draws them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workshop.results.memory import (CATEGORIES, CUDA_CONTEXT, MAX_MICRO_BATCH, GiB, MB, Breakdown,  # noqa: F401
                                     bloom_family_arch, estimate, get_arch, largest_micro_batch)

# GPUs a course site may have: usable bytes per GPU. The "32GB"/"80GB" in the names are GiB (nvidia-smi
# shows 32,768 MiB for a V100-32GB and 81,920 MiB for an A100-80GB; an H100-80GB shows a little less,
# ~79.6 GiB, as its driver reserves more). Usable here = the card's GiB less the CUDA context's ~0.5
# GiB, which the memory model leaves out; the allocator's slack (reserved - allocated, a few %) is not
# taken off, so "fits" means the predicted tensors fit, not that a run has nothing to spare.
GPUS: dict[str, float] = {"V100-32GB": 32 * GiB - CUDA_CONTEXT, "A100-80GB": 80 * GiB - CUDA_CONTEXT,
                          "H100-80GB": 80 * GiB - CUDA_CONTEXT}
MODELS: dict[str, Any] = {
    "tiny": "tiny", "bloom-560m": "bloom-560m", "bloom-1b1": "bloom-1b1", "bloom-1b7": "bloom-1b7",
    "bloom-3b": "bloom-3b", "bloom-7b1": "bloom-7b1", "bloom-h5120-l40 (~13B)": bloom_family_arch(5120, 40)}
STRATEGIES = ("none", "ddp", "full_shard", "shard_grad_op")
PRECISIONS = ("bf16", "fp32", "fp16")
LOSSES = ("full", "answer_only", "chunked")
ANSWER_LENGTH = 8   # answer tokens per example (EOS included) the explorer assumes for answer_only


@dataclass
class Exploration:
    """One setting of the controls: the breakdown (bytes), whether it fits each GPU, and the figure."""

    breakdown: Breakdown
    fits: dict[str, bool]
    figure: Any
    notes: list[str] = field(default_factory=list)  # controls the setting ignores, and why
    # GPU -> the largest micro-batch that fits, with this loss setting and with the full loss (0: not even 1)
    largest_batch: dict[str, int] = field(default_factory=dict)
    largest_batch_full: dict[str, int] = field(default_factory=dict)

    @property
    def mb(self) -> dict[str, float]:
        return self.breakdown.as_mb()


def explore(model: str = "bloom-560m", batch_size: int = 8, max_length: int = 512, precision: str = "bf16",
            sharding: str = "full_shard", offload: bool = False, activation_checkpointing: bool = False,
            gpus: int = 4, draw: bool = True, loss: str = "full", answer_length: int = ANSWER_LENGTH) -> Exploration:
    """The memory model for one setting; `draw=False` skips the figure (fast, for sweeps). `loss` is the
    training loss (workshop.training.loss); answer_only projects `answer_length` positions per example."""
    arch = get_arch(MODELS.get(model, model))
    notes = []
    if sharding == "none" and gpus != 1:
        sharding = "ddp"  # several GPUs without sharding is data parallel
        notes.append(f"sharding none on {gpus} GPUs is DDP: shown as ddp")
    if offload and sharding in ("none", "ddp"):
        offload = False
        notes.append(f"offload ignored: CPU offload moves FSDP's shards to the host, and {sharding} has none "
                     "(choose full_shard or shard_grad_op to offload)")
    answers = min(answer_length, max_length)

    def predict(batch: int, which: str = loss) -> Breakdown:
        return estimate(arch, sharding, gpus, precision, batch, max_length, offload, activation_checkpointing,
                        loss=which, answer_tokens=batch * answers)

    bd = predict(batch_size)
    # a GPU holds what the allocator holds: the tracker's peak plus DDP's gradient buckets (gpu_peak)
    fits = {name: bd.gpu_peak <= usable for name, usable in GPUS.items()}
    largest = {name: largest_micro_batch(predict, usable) for name, usable in GPUS.items()}
    largest_full = largest if loss == "full" else \
        {name: largest_micro_batch(lambda b: predict(b, "full"), usable) for name, usable in GPUS.items()}
    loss_label = "" if loss == "full" else f", {loss} loss" + (f" ({answers} answer tokens)" if loss == "answer_only" else "")
    figure = draw_breakdown(bd, f"{model}, {sharding} on {gpus} GPU(s), b={batch_size}, s={max_length}, "
                                f"{precision}{', offload' if offload else ''}{', AC' if activation_checkpointing else ''}"
                                f"{loss_label}", fits) if draw else None
    return Exploration(bd, fits, figure, notes, largest, largest_full)


def draw_breakdown(bd: Breakdown, title: str, fits: dict[str, bool]) -> Any:
    """One stacked bar (categories) up to the peak, host memory beside it, and each GPU's usable memory.

    Each category's figure is its own peak, and they are not alive at once (activations go before the
    optimizer's state is written): their sum stands above the peak. That part is drawn faded, so the
    solid bar ends at what the verdict compares with a GPU's line; the legend and the GPUs' labels stay
    inside the figure, off the lines."""
    import matplotlib.pyplot as plt

    from workshop.results import plots  # noqa: F401  (chooses a headless backend when there is no display)

    gib = {k: v / 1024 for k, v in bd.as_mb().items()}
    fig, ax = plt.subplots(figsize=(8, 4))
    bottom, peak = 0.0, gib["peak"]
    for j, category in enumerate(CATEGORIES):
        top = bottom + gib[category]
        if bottom < peak:
            ax.bar(0, min(top, peak) - bottom, 0.5, bottom=bottom, color=f"C{j}", label=category)
        if top > peak:
            low = max(bottom, peak)
            ax.bar(0, top - low, 0.5, bottom=low, color=f"C{j}", alpha=0.25,
                   label=None if bottom < peak else category)
        bottom = top
    if bottom > peak:
        ax.bar(0, 0, 0.5, color="grey", alpha=0.25, label="faded: each category's own peak, not at once")
    ax.plot([-0.25, 0.25], [peak] * 2, color="black", label="peak (alive at once)")
    if gib["ddp_buckets"]:  # outside the tracker's view, inside the GPU's
        ax.bar(0, gib["ddp_buckets"], 0.5, bottom=peak, color="C5", hatch="//", label="DDP gradient buckets")
        ax.plot([-0.25, 0.25], [gib["gpu_peak"]] * 2, color="black", ls=":", label="GPU peak (+ buckets)")
    if gib["host"]:
        ax.bar(1, gib["host"], 0.5, color="grey", label="host memory (offload)")
    # one line and one label per memory size: GPUs of the same size (A100-80GB, H100-80GB) share them, as
    # their labels would be drawn over each other; right-aligned inside the axes
    for usable in sorted(set(GPUS.values())):
        names = [name for name, size in GPUS.items() if size == usable]
        fit = fits[names[0]]
        ax.axhline(usable / GiB, ls="--", lw=1, color="green" if fit else "red")
        verb = ("fits" if fit else "does not fit") if len(names) == 1 else ("fit" if fit else "do not fit")
        ax.annotate(f"{', '.join(names)} {verb}", (2.35, usable / GiB), fontsize=7, va="bottom", ha="right")
    ax.set_xticks([0, 1], ["per GPU", "host"])
    ax.set_xlim(-0.5, 2.4)
    ax.set_ylim(0, max(bottom, gib["gpu_peak"], gib["host"], max(GPUS.values()) / GiB) * 1.08)
    ax.set_ylabel("GiB")
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)   # beside, not on, the lines
    fig.tight_layout()
    return fig


def memory_explorer() -> Any:
    """The ipywidgets version of `explore` for JupyterLab: every control re-runs the same function."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    def show(**settings: Any) -> Exploration:
        result = explore(**settings)
        display(result.figure)
        plt.close(result.figure)
        gib = {k: v / 1024 for k, v in result.mb.items()}     # the figure's unit
        print("  ".join(f"{c} {gib[c]:,.2f} GiB" for c in (*CATEGORIES, "peak")))
        if gib["ddp_buckets"]:
            print(f"DDP gradient buckets {gib['ddp_buckets']:,.2f} GiB: GPU peak {gib['gpu_peak']:,.2f} GiB")
        for note in result.notes:
            print(f"note: {note}")
        print("fits: " + ", ".join(f"{g} {'yes' if ok else 'no'}" for g, ok in result.fits.items()))
        print("largest micro-batch that fits: " + ", ".join(
            f"{g} {result.largest_batch[g]}" + ("" if settings["loss"] == "full" else f" (full loss: {result.largest_batch_full[g]})")
            for g in GPUS))
        return result  # the widget keeps it as `.result`

    explorer = widgets.interactive(
        show,
        model=widgets.Dropdown(options=list(MODELS), value="bloom-560m"),
        batch_size=widgets.IntSlider(value=8, min=1, max=64),
        max_length=widgets.Dropdown(options=[128, 256, 512, 1024, 2048], value=512),
        precision=widgets.Dropdown(options=PRECISIONS, value="bf16"),
        sharding=widgets.Dropdown(options=STRATEGIES, value="full_shard"),
        offload=widgets.Checkbox(value=False),
        activation_checkpointing=widgets.Checkbox(value=False),
        gpus=widgets.Dropdown(options=[1, 2, 4, 8, 16], value=4),
        loss=widgets.Dropdown(options=LOSSES, value="full"),
        answer_length=widgets.IntSlider(value=ANSWER_LENGTH, min=1, max=64),
    )
    for control in explorer.kwargs_widgets:     # each label whole: "answer_le..." was cut at the default width
        control.style.description_width = "initial"
    return explorer


def front_end() -> bool:
    """True where JupyterLab (jupyter_server) started this kernel; False under papermill, nbgrader or a script."""
    import os

    return bool(os.environ.get("JPY_SESSION_NAME"))


def show_explorer() -> Any:
    """The widget in JupyterLab; without a front end, None and a line saying to call `explore(...)`.

    Headless runners (papermill, nbgrader) have nothing to move the controls, and widget comms there
    only cost time: a notebook calls `explore` for its figures and this for the widget."""
    if front_end():
        return memory_explorer()
    print("no front end here (papermill, nbgrader): call explore(...) with the settings you want")
    return None


__all__ = ["explore", "memory_explorer", "show_explorer", "Exploration", "GPUS", "MODELS", "MB"]
