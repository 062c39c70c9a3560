"""`workshop bench` keeps its promises on a CPU: real runs, an honest result file, no CPU numbers
posing as GPU figures.

The smoke run is the real harness (two course configurations, each a real `workshop.training.train` process,
one of them FSDP2, and the plain PyTorch loop it compares them with), with the tiny model and as few steps as
still leave one measured record.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workshop.bench import configs, report
from workshop.bench import harness as bench


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    root = tmp_path_factory.mktemp("bench")
    code = bench.main(["--model", "tiny", "--device", "cpu", "--configs", f"baseline,{configs.PEER},full_shard",
                       "--warmup-steps", "1", "--measure-steps", "1", "--batch-size", "2",
                       "--output", str(root / "out"), "--runs-dir", str(root / "runs"), "--no-plot"])
    return code, root


def _result(root: Path) -> dict:
    files = sorted((root / "out").glob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_cpu_smoke_run_completes_every_configuration(smoke: tuple[int, Path]) -> None:
    code, root = smoke
    result = _result(root)
    assert code == 0, [(r["name"], r.get("error")) for r in result["configs"]]
    assert [r["name"] for r in result["configs"]] == ["baseline", configs.PEER, "full_shard"]
    assert result["not_run"] == []
    by_name = {r["name"]: r for r in result["configs"]}
    for row in result["configs"]:
        assert row["status"] == "completed"
        # the warm-up record dropped; the course's runs also leave out the tracker's step 2 and the recorded
        # step 3, the plain loop instruments nothing
        assert row["measured_steps"] == 1 and row["steps"] == (2 if row["name"] == configs.PEER else 4)
        assert row["samples_per_s"] > 0 and row["tokens_per_s"] > 0
        assert row["mfu"] is None  # no honest peak on a CPU
        # MFU's numerator from the dry run: FlopCounterMode's FLOPs per token, at least 6 per parameter
        assert row["mfu_source"] == "dry run" and row["model_flops"]["flops_per_token"] > 6 * 322_368, row
        if row["name"] != configs.PEER:   # the dry run's memory beside the run's (the loop runs none of the course)
            assert row["dry_run_peak_mb"] > 0 and row["dry_run_rel_error"] is None, row   # CPU: RSS, not comparable
        assert row["config"]["precision"] == "fp32" and row["config"]["max_length"] == configs.SEQ_LEN
        # every row's throughput against the loop's, measured in the same run
        assert row["vs_plain_loop"] == pytest.approx(row["samples_per_s"] / by_name[configs.PEER]["samples_per_s"],
                                                     abs=1e-3)
    assert by_name["full_shard"]["sharding_applied"] == "full_shard"
    assert by_name["full_shard"]["wrapper"].startswith("FSDP")
    assert by_name["baseline"]["sharding_applied"] == "none"
    # the loop is the peer, not the course: no Trainer, no FSDP wrapper, its own process and log
    loop = by_name[configs.PEER]
    assert loop["wrapper"] is None and loop["sharding_applied"].startswith("none (a plain loop")
    assert "[plain loop] step 2/2" in (Path(loop["run_dir"]) / "job.log").read_text()
    assert loop["train_loss"] > 0 and all(r["loss"] > 0 for r in loop["records"])
    md = next((root / "out").glob("*.md")).read_text()
    assert f"| {configs.PEER} | fp32 | none | 2 x 1 |" in md and "| x loop |" in md


def test_the_plain_loop_uses_none_of_the_courses_code() -> None:
    """What the loop imports: torch, transformers and the standard library; nothing of workshop."""
    import ast

    from workshop.bench import plain_loop

    tree = ast.parse(Path(plain_loop.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "workshop" not in imported and {"torch", "transformers"} <= imported, imported


def test_the_plain_loops_batches_pad_to_their_longest_and_mask_the_padding() -> None:
    import torch

    from workshop.bench.plain_loop import IGNORE_INDEX, batches

    got = batches([3, 5, 2], batch_size=2, vocab=50, pad_id=0, steps=2, generator=torch.Generator().manual_seed(0))
    assert [tuple(b["input_ids"].shape) for b in got] == [(2, 5), (2, 3)]   # examples 1-2, then 3 and 1 again
    assert got[0]["attention_mask"].sum(1).tolist() == [3, 5] and got[1]["attention_mask"].sum(1).tolist() == [2, 3]
    for b in got:
        assert ((b["labels"] == IGNORE_INDEX) == (b["attention_mask"] == 0)).all()


def test_result_file_has_the_promised_shape(smoke: tuple[int, Path]) -> None:
    _, root = smoke
    result = _result(root)
    for key in ("date", "device", "device_name", "versions", "git_sha", "model", "lengths", "configs",
                "targets", "notes", "warmup_steps", "measure_steps"):
        assert key in result, key
    assert result["device"] == "cpu" and result["model"] == "tiny"
    assert {"torch", "transformers", "accelerate", "cuda", "nccl"} <= set(result["versions"])
    lengths = result["lengths"]
    assert lengths["examples"] == configs.FIXTURE_TRAIN and lengths["p50"] <= lengths["p95"] <= lengths["max"]
    assert (root / "out" / f"{Path(sorted((root / 'out').glob('*.json'))[0]).stem}.md").is_file()


def test_memory_prediction_column_is_present(smoke: tuple[int, Path]) -> None:
    _, root = smoke
    result = _result(root)
    for row in result["configs"]:
        if row["name"] == configs.PEER:   # its memory is the process's RSS; the model is shown, not judged
            assert row["mem_kind"] == "rss" and row["memory_rel_error"] is None
            continue
        pred = row["prediction"]
        assert pred["total_mb"] > 0 and "activations" in pred["components_mb"]
        # predicted at the widest batch trained on: the longest of the examples the run used
        assert pred["seq_len"] == max(result["lengths"]["lengths"][:row["config"]["train_size"]])
        # on a CPU the tensor peak of one measured step (tests/test_memory.py checks the model against it);
        # the benchmark compares the model with the CUDA allocator only
        assert row["mem_kind"] == "tensor" and row["memory_rel_error"] is None
    md = next((root / "out").glob("*.md")).read_text()
    assert "| predicted MB |" in md


def test_targets_are_not_evaluated_on_cpu(smoke: tuple[int, Path]) -> None:
    _, root = smoke
    targets = _result(root)["targets"]
    assert len(targets) == 6
    assert all(t["status"] == "not evaluated on CPU" for t in targets)
    md = next((root / "out").glob("*.md")).read_text()
    assert md.count("**not evaluated on CPU**") == 6


def test_refuses_to_write_cpu_numbers_into_benchmarks_results(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    before = set(bench.RESULTS_DIR.glob("*")) if bench.RESULTS_DIR.exists() else set()
    code = bench.main(["--model", "tiny", "--device", "cpu", "--configs", "baseline",
                       "--output", str(bench.RESULTS_DIR), "--runs-dir", str(tmp_path)])
    assert code == 2
    assert "GPU figures only" in capsys.readouterr().err
    after = set(bench.RESULTS_DIR.glob("*")) if bench.RESULTS_DIR.exists() else set()
    assert after == before and not any(tmp_path.iterdir())  # refused before anything ran
    # any benchmarks/results folder, not only this checkout's
    with pytest.raises(bench.RefusedOutput):
        bench.check_output(tmp_path / "copy" / "benchmarks" / "results", "cpu", "tiny")
    with pytest.raises(bench.RefusedOutput):
        bench.check_output(bench.RESULTS_DIR, "cuda", "tiny")
    bench.check_output(bench.RESULTS_DIR, "cuda", "bloom-560m-random")
    bench.check_output(bench.SMOKE_DIR, "cpu", "tiny")


def test_steady_state_leaves_out_the_records_the_summary_does_not_count() -> None:
    recs = [{"kind": "train", "step": s, "step_time_s": 1.0, "samples_per_s": 4.0, "tokens_per_s": 40.0,
             "tflops": None, "mfu": None, "counted": s != 2} for s in (1, 2, 3)]
    assert bench.steady_state(recs, warmup=1)["measured_steps"] == 1          # step 2: the memory tracker's
    assert configs.steps_to_measure(1, 1) == 4 and configs.steps_to_measure(3, 10) == 13   # steps 2 and 3 instrumented


def test_steady_state_drops_warmup_and_weights_by_time() -> None:
    recs = [{"kind": "train", "step": 1, "step_time_s": 10.0, "samples_per_s": 0.1, "tokens_per_s": 1.0,
             "tflops": 0.1, "mfu": 0.01},
            {"kind": "train", "step": 2, "step_time_s": 1.0, "samples_per_s": 8.0, "tokens_per_s": 800.0,
             "tflops": 100.0, "mfu": 0.1},
            {"kind": "eval", "step": 2},
            {"kind": "train", "step": 3, "step_time_s": 3.0, "samples_per_s": 4.0, "tokens_per_s": 400.0,
             "tflops": 60.0, "mfu": 0.06}]
    s = bench.steady_state(recs, warmup=1)
    assert s["measured_steps"] == 2
    assert s["samples_per_s"] == pytest.approx((8 + 12) / 4)  # 20 samples in 4 s, not the mean of rates
    assert s["mfu"] == pytest.approx((0.1 * 1 + 0.06 * 3) / 4)


def test_gpu_targets_are_judged_with_their_reasons() -> None:
    def row(name: str, sps: float, mfu: float | None, err: float | None, tracker: float | None = 0.01) -> dict:
        return {"name": name, "status": "completed", "samples_per_s": sps, "mfu": mfu, "memory_rel_error": err,
                "tracker_rel_error": tracker}

    rows = [row("seed-recipe", 10.0, 0.05, 0.02), row("baseline", 60.0, 0.45, -0.08),
            row(configs.PEER, 62.0, 0.9, None, None), row("full_shard", 50.0, 0.38, 0.05, -0.12),
            row("offload", 20.0, 0.1, 0.3)]
    speed, mfu, mem, cost, peer, tracker = report.evaluate_targets(rows, "cuda", "bloom-560m-random")
    assert speed["status"] == "met" and speed["value"] == 6.0
    assert mfu["status"] == "met" and "baseline" in mfu["why"]      # the loop's 90 % is no course configuration's
    assert mem["status"] == "not met" and "offload +30.0%" in mem["why"] and configs.PEER not in mem["why"]
    assert cost["status"] == "not met" and cost["value"] == 0.83 and "full_shard 50.00 / baseline 60.00" in cost["why"]
    assert peer["status"] == "met" and peer["value"] == 0.97
    assert tracker["status"] == "not met" and "full_shard -12.0%" in tracker["why"] and configs.PEER not in tracker["why"]
    report.add_peer_ratios(rows)
    assert [r["vs_plain_loop"] for r in rows] == [0.161, 0.968, 1.0, 0.806, 0.323]
    # without the loop (not run, or failed) no row has a ratio and its target says why
    alone = [r for r in rows if r["name"] != configs.PEER]
    report.add_peer_ratios(alone)
    assert all(r["vs_plain_loop"] is None for r in alone)
    peer = report.evaluate_targets(alone, "cuda", "bloom-560m-random")[4]
    assert peer["status"] == "not met" and f"no throughput for {configs.PEER}" in peer["why"]


def test_a_bench_stopped_early_says_which_configurations_did_not_run() -> None:
    result = {"device_name": "NVIDIA H200", "date": "2026-11-28", "model": "bloom-560m-random", "warmup_steps": 3,
              "measure_steps": 10, "git_sha": "abc", "versions": {}, "configs": [], "targets": [], "notes": [],
              "lengths": {"tokenizer": "t", "mean": 1, "p50": 1, "p95": 1, "max": 1, "examples": 1},
              "not_run": ["offload", "answer_only"]}
    md = report.markdown(result)
    assert "## Not run" in md and "- offload, answer_only: the bench stopped before them" in md


def test_seed_recipe_pads_every_batch_to_the_fixed_width() -> None:
    """The seed recipe is the config's pad_to_max_length, through the training script's own collator."""
    from workshop.training.data import IGNORE_INDEX, DynamicPaddingCollator

    assert configs.CONFIGS["seed-recipe"].changes["pad_to_max_length"] is True
    collate = DynamicPaddingCollator(3, pad_to=16)
    batch = collate([{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [5], "labels": [5]}])
    assert batch["input_ids"].shape == (2, 16)
    assert int(batch["attention_mask"].sum()) == 4  # padding never counts as a token
    assert (batch["labels"][:, 3:] == IGNORE_INDEX).all() and (batch["input_ids"][:, 3:] == 3).all()
    assert DynamicPaddingCollator(3)([{"input_ids": [5, 6], "labels": [5, 6]}])["input_ids"].shape == (1, 2)



# What the bench builds on the lent GPU machine, built here: no CPU run reaches the GPU-only paths (the seed
# recipe's fp16 at its own width, answer_only's fitted batch), and a configuration that cannot be built there
# would end the one GPU run before its first row.
CARDS = {"cpu": None, "H200 (141 GB)": 150_121_545_728, "H100 (80 GB)": 85_030_109_184}


@pytest.mark.parametrize("card", list(CARDS))
@pytest.mark.parametrize("name", [n for n in configs.CONFIGS])
def test_every_configuration_builds_as_each_card_would_build_it(name: str, card: str, tmp_path: Path) -> None:
    bc = configs.CONFIGS[name]
    device = "cpu" if card == "cpu" else "cuda"
    cfg = configs.run_config(bc, "bloom-560m-random", device, 32, 3, 10, tmp_path / name, gpu_bytes=CARDS[card])
    assert cfg.max_length == configs.SEQ_LEN and cfg.train_size % (cfg.batch_size * cfg.effective_grad_acc) == 0
    assert cfg.train_size <= configs.FIXTURE_TRAIN
    if name == "seed-recipe":   # its own batch and width, not the bench's
        assert (cfg.batch_size, cfg.effective_grad_acc, cfg.pad_to_max_length) == (1, 4, True)
        assert cfg.precision == ("fp32" if device == "cpu" else "fp16")
    if bc.fit_batch and device == "cuda":   # the memory model's largest batch, no more than the fixture holds
        fitted = configs.fitting_batch(dict(bc.changes), "bloom-560m-random", CARDS[card], limit=10**6)
        assert cfg.batch_size == min(fitted, configs.FIXTURE_TRAIN) and cfg.batch_size > 32
    prediction = bench.predict(cfg, configs.SEQ_LEN)
    assert prediction["total_mb"] > 0


def test_the_prediction_counts_the_seed_recipes_accumulated_gradient(tmp_path: Path) -> None:
    """grad_acc 4 keeps the whole fp32 gradient between micro-batches: 4 bytes a parameter more than grad_acc 1."""
    from workshop.results import memory

    seed = configs.run_config(configs.CONFIGS["seed-recipe"], "bloom-560m-random", "cuda", 32, 3, 10, tmp_path)
    alone = memory.estimate("bloom-560m-random", "none", 1, "fp16", 1, configs.SEQ_LEN, grad_acc=1)
    held = bench.predict(seed, configs.SEQ_LEN)["total_mb"] - alone.gpu_peak / memory.MB
    assert held == pytest.approx(4 * memory.get_arch("bloom-560m-random").params / memory.MB, rel=0.02)


def test_a_configuration_that_cannot_be_built_costs_its_row_not_the_bench(tmp_path: Path) -> None:
    """A batch larger than the fixture cannot be timed in whole steps: the bench says so, names it, goes on."""
    code = bench.main(["--model", "tiny", "--device", "cpu", "--configs", "baseline,full_shard", "--batch-size", "60",
                       "--output", str(tmp_path / "out"), "--runs-dir", str(tmp_path / "runs"), "--no-plot"])
    result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert code == 1 and result["configs"] == [] and result["not_run"] == []
    assert [c["name"] for c in result["not_configured"]] == ["baseline", "full_shard"]
    assert "global batch 60 is larger than the fixture (50 examples)" in result["not_configured"][0]["error"]
    md = next((tmp_path / "out").glob("*.md")).read_text()
    assert "## Not configured" in md and "- full_shard: global batch 60" in md
