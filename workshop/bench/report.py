"""The bench's report: each row's ratio to the plain loop, the course's targets judged, the markdown table and the
figure of a results file (workshop.bench.harness writes them after each configuration).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from workshop.bench.configs import PEER

# The issue's targets.
SPEEDUP_TARGET = 5.0


MFU_TARGET = 0.40


MEMORY_TOLERANCE = 0.10


SHARDING_COST_TARGET = 0.9   # full_shard on one GPU vs no sharding


PEER_TARGET = 0.9            # the course baseline vs the plain loop


def add_peer_ratios(rows: list[dict[str, Any]]) -> None:
    """Each row's samples/s as a ratio to the plain loop's in the same run (`vs_plain_loop`; None without it)."""
    peer = next((r.get("samples_per_s") for r in rows if r["name"] == PEER), None)
    for r in rows:
        r["vs_plain_loop"] = round(r["samples_per_s"] / peer, 3) if peer and r.get("samples_per_s") else None


def _ratio_target(target: dict[str, Any], top: dict[str, Any], bottom: dict[str, Any], wanted: float) -> None:
    """`target` judged on top's samples/s over bottom's: met when the ratio reaches `wanted`."""
    if top.get("samples_per_s") and bottom.get("samples_per_s"):
        ratio = top["samples_per_s"] / bottom["samples_per_s"]
        target.update(value=round(ratio, 2), status="met" if ratio >= wanted else "not met",
                      why=f"{top['name']} {top['samples_per_s']:.2f} / {bottom['name']} {bottom['samples_per_s']:.2f} "
                          f"samples/s = {ratio:.2f}x")
    else:
        missing = [r.get("name") for r in (top, bottom) if not r.get("samples_per_s")]
        target.update(value=None, status="not met", why=f"no throughput for {', '.join(map(str, missing))} "
                      "(not run, or failed)")


def _band_target(target: dict[str, Any], errors: list[tuple[str, float | None]], what: str) -> None:
    """`target` judged on relative errors: met when every one is measured and within MEMORY_TOLERANCE."""
    unmeasured = [n for n, e in errors if e is None]
    outside = [f"{n} {e:+.1%}" for n, e in errors if e is not None and abs(e) > MEMORY_TOLERANCE]
    worst = max((abs(e) for _, e in errors if e is not None), default=None)
    if unmeasured or not errors:
        target.update(value=worst, status="not met",
                      why=f"no comparable {what} for {', '.join(unmeasured) or 'any configuration'}"
                          + (f"; outside the band: {', '.join(outside)}" if outside else ""))
    else:
        target.update(value=worst, status="not met" if outside else "met",
                      why=(f"outside +-{MEMORY_TOLERANCE:.0%}: {', '.join(outside)}" if outside else
                           f"worst error {worst:.1%}"))


def evaluate_targets(rows: list[dict[str, Any]], device: str, model: str) -> list[dict[str, Any]]:
    """Each of the issue's targets: met / not met / not evaluated, with the figure and the reason. The plain
    loop is a yardstick, not a course configuration: it counts in no target but the one that compares with it."""
    by_name = {r["name"]: r for r in rows}
    course = [r for r in rows if r["name"] != PEER]
    targets = [
        {"target": f"course baseline >= {SPEEDUP_TARGET:g}x the seed recipe in samples/s", "key": "speedup"},
        {"target": f"best configuration >= {MFU_TARGET:.0%} MFU", "key": "mfu"},
        {"target": f"memory model within {MEMORY_TOLERANCE:.0%} of measured peak (allocated) for every "
                   "configuration", "key": "memory"},
        {"target": f"full_shard on one GPU >= {SHARDING_COST_TARGET:g}x no sharding (baseline) in samples/s",
         "key": "sharding_cost"},
        {"target": f"course baseline >= {PEER_TARGET:g}x the plain PyTorch loop in samples/s", "key": "peer"},
        {"target": f"tensor tracker within {MEMORY_TOLERANCE:.0%} of measured peak (allocated) for every "
                   "configuration", "key": "tracker"},
    ]
    skip = None
    if device != "cuda":
        skip = "not evaluated on CPU"
    elif not model.startswith("bloom-560m"):
        skip = f"not evaluated: the targets are for BLOOM-560M, this run used {model!r}"

    def row(name: str) -> dict[str, Any]:
        return by_name.get(name, {"name": name})

    _ratio_target(targets[0], row("baseline"), row("seed-recipe"), SPEEDUP_TARGET)
    mfus = [(r["mfu"], r["name"]) for r in course if r["status"] == "completed" and r.get("mfu") is not None]
    if mfus:
        best, name = max(mfus)
        targets[1].update(value=best, status="met" if best >= MFU_TARGET else "not met",
                          why=f"best is {name} at {best:.1%}" + ("" if best >= MFU_TARGET else
                                                                f", {MFU_TARGET - best:.1%} short"))
    else:
        targets[1].update(value=None, status="not met", why="no configuration reported an MFU (no GPU peak "
                          "known for this device in workshop.training.metrics.PEAK_TFLOPS, or no run completed)")
    _band_target(targets[2], [(r["name"], r.get("memory_rel_error")) for r in course], "CUDA peak")
    _ratio_target(targets[3], row("full_shard"), row("baseline"), SHARDING_COST_TARGET)
    _ratio_target(targets[4], row("baseline"), row(PEER), PEER_TARGET)
    _band_target(targets[5], [(r["name"], r.get("tracker_rel_error")) for r in course], "tracker and CUDA peak")
    if skip:
        for t in targets:
            t["why"] = f"{skip} (CPU figures, for the record only: {t['why']})" if device != "cuda" else t["why"]
            t["status"] = skip
    return targets


def fmt(value: Any, spec: str = "", none: str = "n/a") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return none
    return format(value, spec)


def markdown(result: dict[str, Any]) -> str:
    """The results table in one fixed shape (nccl-tests' habit): greppable, diffable between runs."""
    dist = result["lengths"]
    lines = [
        f"# `workshop bench` — {result['device_name']}, {result['date']}",
        "",
        f"Model `{result['model']}`" + (" (random init, BLOOM-560M shapes)" if result["model"] == "bloom-560m-random"
                                         else "") + ", one process, SQuAD-shaped fixture "
        f"inputs; {result['warmup_steps']} warm-up steps dropped, {result['measure_steps']} measured. "
        f"git `{result['git_sha']}`; torch {result['versions'].get('torch')}, transformers "
        f"{result['versions'].get('transformers')}, accelerate {result['versions'].get('accelerate')}, "
        f"CUDA {result['versions'].get('cuda')}, NCCL {result['versions'].get('nccl')}.",
        "",
        f"Lengths (non-pad tokens per example, {dist['tokenizer']}): mean {dist['mean']}, p50 {dist['p50']}, "
        f"p95 {dist['p95']}, max {dist['max']} over {dist['examples']} examples.",
        "",
        "| config | precision | sharding | batch x acc | width | samples/s | x loop | tokens/s | TFLOP/s | MFU "
        "| peak alloc MB | peak reserved MB | predicted MB | error | tracker MB | tracker error | status |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| --- |",
    ]
    for r in result["configs"]:
        c = r["config"]
        ddp1 = r["prediction"].get("predicted_as") == "ddp" and c["sharding"] == "none"
        sharding = c["sharding"] + (" (DDP-1)" if ddp1 else "") + (" +offload" if c["offload"] else "") + (" +AC" if c["activation_checkpointing"] else "")
        width = f"pad {r['pad_to']}" if r.get("pad_to") else f"dyn <= {r['prediction']['seq_len']}"
        lines.append(
            f"| {r['name']} | {c['precision']} | {sharding} | {c['batch_size']} x {c['effective_grad_acc']} | {width} "
            f"| {fmt(r.get('samples_per_s'), '.2f')} | {fmt(r.get('vs_plain_loop'), '.2f')} "
            f"| {fmt(r.get('tokens_per_s'), ',.0f')} "
            f"| {fmt(r.get('tflops'), '.1f')} | {fmt(r.get('mfu'), '.1%')} | {fmt(r.get('peak_mem_mb'), ',.0f')} "
            f"| {fmt(r.get('peak_reserved_mb'), ',.0f')} | {fmt(r['prediction']['total_mb'], ',.0f')} "
            f"| {fmt(r.get('memory_rel_error'), '+.1%')} | {fmt(r.get('tracker_peak_mb'), ',.0f')} "
            f"| {fmt(r.get('tracker_rel_error'), '+.1%')} | {r['status']} |")
    lines += ["", "## Targets", ""]
    lines += [f"- **{t['status']}** — {t['target']}: {t['why']}" for t in result["targets"]]
    failed = [r for r in result["configs"] if r["status"] != "completed"]
    if failed:
        lines += ["", "## Failures", ""] + [f"- {r['name']}: {r.get('error')}" for r in failed]
    if result.get("not_run"):
        lines += ["", "## Not run", "", f"- {', '.join(result['not_run'])}: the bench stopped before them (its time "
                  "limit, or it was interrupted); the rows above are complete"]
    if result.get("not_configured"):
        lines += ["", "## Not configured", ""] + [f"- {c['name']}: {c['error']}" for c in result["not_configured"]]
    lines += ["", "## Notes", ""] + [f"- {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    """Samples/s and peak memory (measured allocated, reserved, predicted) per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["configs"]
    names = [r["name"] for r in rows]
    xs = list(range(len(rows)))

    def val(r: dict[str, Any], key: str) -> float:
        v = r.get(key)
        return float(v) if v is not None else 0.0

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(9, 2.2 * len(rows) + 3), 4.2))
    ax1.bar(xs, [val(r, "samples_per_s") for r in rows], color="C2")
    ax1.set_ylabel("samples/s (after warm-up)")
    ax1.set_title("Throughput")
    w = 0.27
    ax2.bar([x - w for x in xs], [val(r, "peak_mem_mb") for r in rows], w, label="measured (allocated)", color="C1")
    ax2.bar(xs, [val(r, "peak_reserved_mb") for r in rows], w, label="measured (reserved)", color="C3", alpha=0.7)
    ax2.bar([x + w for x in xs], [r["prediction"]["total_mb"] for r in rows], w, label="memory model", color="C0")
    ax2.set_ylabel("peak memory per device (MB)")
    ax2.set_title("Peak memory")
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.set_xticks(xs, names, rotation=25, ha="right")
        ax.grid(axis="y", alpha=0.3)
        for x, r in zip(xs, rows):
            if r["status"] != "completed":
                ax.annotate(r["status"], (x, 0), ha="center", va="bottom", fontsize=7, rotation=90)
    fig.suptitle(f"{result['model']} on {result['device_name']} ({result['date']})", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
