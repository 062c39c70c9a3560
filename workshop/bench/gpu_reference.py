"""One line under a CPU run's table: what the same configuration did on a real GPU, from a committed bench.

A student on a laptop or the test cluster measures a tiny model on CPU cores; their table is right, but says
nothing of a GPU. `benchmarks/results/` holds what `workshop bench` measured on one (BLOOM-560M's shapes,
with its device, date and versions). So `Lab.table` prints, beside a table of CPU runs, the matching rows of the
newest committed result:

    the same run on <GPU>, measured <date> (BLOOM-560M shapes, batch <B>; benchmarks/results/<date>-<gpu>.md):
    full_shard <S> samples/s (<R>x a plain PyTorch loop), peak <M> MB

No results file (no GPU has run the bench yet), or one this code cannot read: no line, and nothing fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workshop.bench.configs import PEER
from workshop.bench.harness import RESULTS_DIR

# which bench configurations each exercise table is about (the bench runs one GPU: 04 and 05 get the 1-GPU run)
TABLE_CONFIGS: dict[str, tuple[str, ...]] = {
    "baseline": ("baseline",),
    "fsdp": ("baseline", "full_shard"),
    "strategies": ("full_shard", "shard_grad_op", "offload", "activation_checkpointing"),
    "scaling": ("full_shard",),
    "multinode": ("full_shard",),
}


def newest_result(results_dir: Path | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The newest readable GPU result in `results_dir` (default: the repo's; by its `created_at`), or None."""
    results_dir = results_dir or RESULTS_DIR
    found = []
    for path in sorted(results_dir.glob("*.json")) if results_dir.is_dir() else []:
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(result, dict) and result.get("device") == "cuda" and isinstance(result.get("configs"), list):
            found.append((str(result.get("created_at") or result.get("date") or ""), path.name, path, result))
    if not found:
        return None
    _, _, path, result = max(found)
    return path, result


def _row_text(row: dict[str, Any]) -> str:
    parts = [f"{row['name']} {row['samples_per_s']:.1f} samples/s"]
    if row.get("vs_plain_loop") is not None and row["name"] != PEER:
        parts[0] += f" ({row['vs_plain_loop']:.2f}x a plain PyTorch loop)"
    if row.get("peak_mem_mb") is not None:
        parts.append(f"peak {row['peak_mem_mb']:,.0f} MB")
    return ", ".join(parts)


def line(kind: str, results_dir: Path | None = None) -> str | None:
    """The line for the exercise table `kind`, or None (no result, no matching completed row, unreadable)."""
    results_dir = results_dir or RESULTS_DIR
    newest = newest_result(results_dir)
    if newest is None or kind not in TABLE_CONFIGS:
        return None
    path, result = newest
    try:
        rows = {r["name"]: r for r in result["configs"] if r.get("status") == "completed" and r.get("samples_per_s")}
        shown = [_row_text(rows[name]) for name in TABLE_CONFIGS[kind] if name in rows]
        if not shown:
            return None
        where = path.with_suffix(".md")
        try:
            where = where.relative_to(results_dir.parents[1])
        except ValueError:
            pass
        model = "BLOOM-560M shapes" if str(result.get("model", "")).startswith("bloom-560m") else result.get("model")
        return (f"the same run on {result['device_name']}, measured {result['date']} ({model}, batch "
                f"{result.get('batch_size')}; {where}): " + "; ".join(shown))
    except (KeyError, TypeError, ValueError):
        return None
