"""The memory model held to BLOOM's real sizes (issue #50, item 3): the committed grid of dry runs
(benchmarks/paper/grid-DATE.json) against today's model, and one live dry run of the case the model
was last fixed for (HSDP's gradient shards), in seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workshop.results import memory
from workshop.training.config import load_config

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 0.10
# the one case the grid report names as off, and the category (benchmarks/paper/grid.py's WHY says why)
NAMED_OFF = {("7b1-full_shard-x16-mb4-ac", "activations")}


def latest_grid() -> dict:
    return json.loads(sorted((ROOT / "benchmarks" / "paper").glob("grid-*.json"))[-1].read_text())


def case_config(case: dict):
    return load_config(overrides=dict(case, wandb="disabled", device="cpu"))


def test_the_committed_grid_is_todays_model_and_within_10_percent_but_the_named_case():
    grid = latest_grid()
    off = set()
    for case in grid["cases"]:
        today = memory.estimate_config(case_config(case["config"])).as_mb()
        for row in case["memory"]:
            # the report was made with this model: a change to memory.py regenerates it
            assert today[row["category"]] == pytest.approx(row["predicted_mb"], abs=0.06), (case["case"], row)
            if row["dry_run_mb"] and abs(today[row["category"]] / row["dry_run_mb"] - 1) > TOLERANCE:
                off.add((case["case"], row["category"]))
    assert off == NAMED_OFF
    report = sorted((ROOT / "benchmarks" / "paper").glob("grid-*.md"))[-1].read_text()
    assert "not yet explained" not in report and "7b1-full_shard-x16-mb4-ac, activations" in report


@pytest.mark.parametrize("case, category", [("7b1-full_shard-x16-mb4-ac", "other"),
                                            ("7b1-hybrid_shard-2x8", "other"),
                                            ("560m-full_shard-x8-ac", "activations")])
def test_the_cases_the_last_report_named_off_are_within_10_percent(case, category):
    """+12.8 %, -16.1 % and +9.4 % in the report of 2026-11-29 (AC's 4 h-sized inputs, 100 B per x·h in
    16-bit, HSDP's shards not counted)."""
    [found] = [c for c in latest_grid()["cases"] if c["case"] == case]
    [row] = [r for r in found["memory"] if r["category"] == category]
    today = memory.estimate_config(case_config(found["config"])).as_mb()[category]
    assert today == pytest.approx(row["dry_run_mb"], rel=TOLERANCE)


def test_a_tiny_bf16_hsdp_dry_run_keeps_the_block_gradient_shards_the_model_counts():
    """HSDP 2 x 2, bf16: `other` holds the blocks' reduced bf16 gradient shards for the replicas' all-reduce."""
    from workshop.training.dryrun import dry_run

    overrides = dict(model="tiny", sharding="hybrid_shard", nodes=2, procs_per_node=2, precision="bf16",
                     batch_size=2, max_length=64, pad_to_max_length=True, wandb="disabled", device="cpu")
    cfg = load_config(overrides=overrides)
    result = dry_run(cfg)
    assert result["mesh"] == [2, 2]
    hsdp = memory.estimate_config(cfg).as_mb()
    full = memory.estimate_config(load_config(overrides=dict(overrides, sharding="full_shard", nodes=1))).as_mb()
    assert hsdp["other"] > full["other"]   # without the shards the two models were equal (and 8 % under)
    assert hsdp["other"] == pytest.approx(result["memory_mb"]["other"], rel=0.05)
