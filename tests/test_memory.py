"""The memory model: hand-computed cases (arithmetic in the comments) and what CPU runs can observe."""

from __future__ import annotations

import pytest

from workshop.results import memory
from workshop.results.memory import MB, GiB, activation_bytes, estimate, get_arch, largest_model_that_fits

P560 = 559_214_592


def test_bloom_560m_parameter_formula() -> None:
    a = get_arch("bloom-560m")
    # root: V·h + 4h = 250880·1024 + 4·1024 = 256,901,120 + 4,096 = 256,905,216
    assert a.root_params == 256_905_216
    # block: 12h² + 13h = 12·1,048,576 + 13·1024 = 12,582,912 + 13,312 = 12,596,224
    assert a.block_params == 12_596_224
    # total: 256,905,216 + 24·12,596,224 = 256,905,216 + 302,309,376 = 559,214,592
    assert a.params == P560


def test_profiles_count_what_transformers_builds() -> None:
    """The formula against a real BloomForCausalLM built on the meta device (no memory, no Hub)."""
    torch = pytest.importorskip("torch")
    from transformers import BloomConfig, BloomForCausalLM

    from workshop.training import models

    for name, shapes in (("bloom-560m", models.BLOOM_560M), ("tiny", models.TINY)):
        a = get_arch(name)
        assert (a.vocab, a.hidden, a.layers, a.heads) == (
            shapes["vocab_size"], shapes["hidden_size"], shapes["n_layer"], shapes["n_head"])
        with torch.device("meta"):
            model = BloomForCausalLM(BloomConfig(**shapes))
        assert models.count_parameters(model) == a.params
    assert get_arch("bloom-560m").params == P560


def test_none_bf16_batch8_seq512_by_hand() -> None:
    bd = estimate("bloom-560m", "none", 1, "bf16", batch_size=8, max_length=512)
    assert bd.params == bd.grads == 4 * P560 == 2_236_858_368  # fp32 parameters and gradients
    assert bd.optimizer == 8 * P560 == 4_473_716_736  # AdamW exp_avg + exp_avg_sq, fp32
    x, h, V, a, L = 8 * 512, 1024, 250880, 16, 24
    # per block: 36 bytes per x·h + 6 per score element (fp32 softmax + bf16 copy) + bf16 casts of 12h² weights
    block = 36 * x * h + 6 * 8 * a * 512 * 512 + 2 * 12 * h * h
    assert block == 150_994_944 + 201_326_592 + 25_165_824
    # outside the blocks: 14·x·h + 64·x + logits 10·x·V (bf16 logits, fp32 upcast, loss copy) + bf16 embedding
    outside = 14 * x * h + 64 * x + 10 * x * V + 2 * V * h
    assert bd.activations == L * block + outside == 19_908_526_080
    # peak at backward's start: params + AdamW + activations + the loss's bf16 gradient 2·x·V
    assert bd.peak == 4 * P560 + 8 * P560 + bd.activations + 2 * x * V
    assert bd.total == bd.peak and bd.cpu == 0


def test_full_shard_4_gpus_bf16_by_hand() -> None:
    bd = estimate("bloom-560m", "full_shard", 4, "bf16", batch_size=8, max_length=512)
    arch = get_arch("bloom-560m")
    Vh = arch.vocab * arch.hidden
    # the fp32 shard + the bf16 embedding unit (kept gathered for the tied lm_head) + the bf16 blocks in
    # flight: on a GPU the next block's all-gather (prefetch) overlaps this one's compute, two at once; on
    # a CPU rank, where the collectives run in line, one (what the course's CPU runs measure)
    assert bd.params == P560 + 2 * (Vh + 2 * arch.block_params)
    cpu = estimate("bloom-560m", "full_shard", 4, "bf16", batch_size=8, max_length=512, device="cpu")
    assert cpu.params == P560 + 2 * (Vh + arch.block_params) and cpu.peak == bd.peak
    # each rank stores a quarter of the fp32 gradients; the embedding unit's bf16 unsharded gradient
    # lives through backward (counted in `other`)
    assert bd.grads == P560 and bd.unsharded_grads == 2 * Vh
    assert bd.optimizer == 2 * P560  # 8 bytes · P / 4 ranks
    x = 8 * 512
    # no autocast weight casts under FSDP's MixedPrecisionPolicy: the none-run's 19,908,526,080 less their
    # 2·(V·h + 24·12h²) = 1,117,782,016
    assert bd.activations == 19_908_526_080 - 1_117_782_016 == 18_790_744_064
    assert bd.peak == P560 + 2 * Vh + 2 * P560 + bd.activations + 2 * x * arch.vocab


def test_sharding_strategies_order_as_the_course_says() -> None:
    kw = dict(model="bloom-560m", precision="bf16", batch_size=8, max_length=512)
    ddp = estimate(sharding="ddp", world_size=4, **kw)
    full = estimate(sharding="full_shard", world_size=4, **kw)
    sgo = estimate(sharding="shard_grad_op", world_size=4, **kw)
    hybrid = estimate(sharding="hybrid_shard", world_size=4, replicas=2, **kw)
    off = estimate(sharding="full_shard", world_size=4, offload=True, **kw)
    assert sgo.params == P560 + 2 * P560  # every unit stays gathered (bf16) between forward and backward
    assert hybrid.shard_size == 2 and hybrid.optimizer == 8 * P560 // 2
    assert off.optimizer == 0 and off.cpu == 16 * P560 // 4  # params, grads, AdamW: all on the host
    assert off.total < full.total < sgo.total < ddp.total
    assert full.total < hybrid.total < ddp.total
    for strategy in (full, sgo, hybrid):
        assert strategy.optimizer < ddp.optimizer and strategy.grads < ddp.grads


def test_fp32_and_grad_accumulation() -> None:
    bd = estimate("tiny", "none", 1, "fp32", batch_size=2, max_length=32)
    p = get_arch("tiny").params  # 1024·96 + 4·96 + 2·(12·96² + 13·96) = 98,688 + 2·111,840 = 322,368
    assert p == 322_368
    assert bd.params == 4 * p
    # FSDP2 without sync on non-final micro-batches keeps every unit's unsharded gradient: 4·P at any world
    one = estimate("tiny", "full_shard", 4, "fp32", 2, 32)
    acc = estimate("tiny", "full_shard", 4, "fp32", 2, 32, grad_acc=2)
    assert acc.unsharded_grads == 4 * p and acc.grads == one.grads == p
    # one step, x = 64: the fp32 shard P/4·4 = 322,368 + the fp32 embedding 4·V·h = 393,216 + AdamW 644,736
    # + activations 2·(64·x·h + 4·b·a·s²) + 12·x·h + 64·x + 8·x·V = 851,968 + 602,112 + the loss's gradient
    # 4·x·V = 262,144; with accumulation every unit's unsharded gradient (4P = 1,289,472) on top
    assert one.peak == 322_368 + 393_216 + 644_736 + 851_968 + 602_112 + 262_144 == 3_076_544
    assert acc.peak == 3_076_544 + 1_289_472


def test_activation_checkpointing_by_hand() -> None:
    tiny = get_arch("tiny")  # h 96, a 4, L 2, V 1024
    x = 2 * 32
    outside = 12 * x * 96 + 64 * x + 8 * x * 1024  # fp32: embeddings, tokens, fp32 logits + the loss's copy
    full_block = 64 * x * 96 + 4 * 2 * 4 * 32 * 32
    assert activation_bytes(tiny, 2, 32, "fp32") == 2 * full_block + outside
    # checkpointed: each block keeps its input (one h-sized tensor per token); the causal mask (b·s²) is shared
    assert activation_bytes(tiny, 2, 32, "fp32", checkpointing=True) == 2 * 4 * x * 96 + 4 * 2 * 32 * 32 + outside


def test_ddp_buckets_count_on_a_gpu_but_not_in_the_trackers_peak() -> None:
    ddp = estimate("bloom-560m", "ddp", 4, "bf16", 8, 512)
    # DDP's reducer copies every fp32 gradient into its buckets: 4 B x P = 2.24 GB, invisible to the tracker
    assert ddp.ddp_buckets == 4 * P560 == 2_236_858_368
    assert ddp.gpu_peak == ddp.peak + ddp.ddp_buckets and ddp.as_mb()["gpu_peak"] == ddp.gpu_peak / MB
    full = estimate("bloom-560m", "full_shard", 4, "bf16", 8, 512)
    assert full.ddp_buckets == 0 and full.gpu_peak == full.peak


def test_checkpointed_activations_peak_with_one_block_recomputed() -> None:
    tiny = get_arch("tiny")
    x = 2 * 32
    bd = estimate("tiny", "full_shard", 2, "fp32", 2, 32, activation_checkpointing=True)
    block = 64 * x * 96 + 4 * 2 * 4 * 32 * 32  # one block's internals, recomputed in backward: 425,984
    kept = 2 * 4 * x * 96 + 4 * 2 * 32 * 32 + 12 * x * 96 + 64 * x + 8 * x * 1024  # blocks' inputs, mask, outside
    assert tiny.layers == 2 and bd.activations == kept + block == 1_085_440


def test_bad_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="one process"):
        estimate("tiny", "none", 2)
    with pytest.raises(ValueError, match="offload"):
        estimate("tiny", "ddp", 2, offload=True)
    with pytest.raises(ValueError, match="unknown model"):
        estimate("gpt-5", "ddp", 2)


def test_largest_model_that_fits_grows_with_fsdp() -> None:
    one = largest_model_that_fits(79, "none", 1, "bf16", 8, 512)
    eight = largest_model_that_fits(79, "full_shard", 8, "bf16", 8, 512)
    assert one.breakdown is not None and one.breakdown.total <= 79 * GiB
    assert (one.hidden, one.layers) == (2560, 30)  # bloom-3b fits one 80 GB GPU, bloom-7b1 does not
    assert estimate(memory.bloom_family_arch(4096, 30), "none", 1, "bf16", 8, 512).total > 79 * GiB
    assert eight.params > 2 * one.params
    assert largest_model_that_fits(1, "none", 1).params == 0  # nothing fits 1 GiB


def test_estimate_config_reads_run_args() -> None:
    from tests.logs_fixtures import REAL_RUN
    from workshop.results.logs import read_run_dir

    cfg = read_run_dir(REAL_RUN).config
    bd = memory.estimate_config(cfg)
    assert bd.shard_size == 2 and bd.n_params == 322_368


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert memory.main(["--model", "bloom-560m", "--sharding", "full_shard", "--world-size", "4",
                        "--precision", "bf16", "--batch-size", "8", "--max-length", "512"]) == 0
    out = capsys.readouterr().out
    # peak 23,037,399,040 bytes (tests/test_memory_by_hand.py's arithmetic) = 21,970.18 MB, 21.46 GiB
    assert "559,214,592" in out and "  peak             21,970.2 MB  (21.46 GiB per GPU, most alive at once)" in out
    for category in ("params", "grads", "optimizer", "activations", "other", "peak"):
        assert f"  {category} " in out
    assert memory.main(["--sharding", "none", "--world-size", "2"]) == 2
    assert memory.main(["--course"]) == 0
    course = capsys.readouterr().out
    row = next(line for line in course.splitlines() if line.startswith("  full_shard x4 "))
    # params P + 2(V·h + 2 blocks in flight, a GPU's prefetch) = 1,123,401,728 B = 1,071 MB; grads P / 4 = 533 MB; AdamW 2P = 1,067 MB;
    # activations 18,790,744,064 B = 17,920 MB; other 8,220,835,840 B = 7,840 MB; peak 21,970 MB; no host memory
    assert row.split()[2:] == ["1,071", "533", "1,067", "17,920", "7,840", "21,970", "21,970", "0"], row
    assert memory.main(["--json", "--fit-gpu-gb", "79", "--world-size", "8"]) == 0


@pytest.mark.slow
def test_full_shard_holds_half_the_parameters_per_rank_at_world_2(runs) -> None:  # noqa: ANN001
    """A real 2-process full_shard run: each rank holds ~1/2 of the parameters, as the model says."""
    s = runs.get("--sharding", "full_shard", nproc=2).summary
    arch = get_arch(s["model"])
    assert s["params_total"] == arch.params
    predicted = estimate(arch, "full_shard", 2, "fp32", 1, 32).optimizer // 8  # AdamW: 8 bytes per stored param
    for held in s["params_local_per_rank"]:
        assert held == pytest.approx(predicted, rel=0.01)
        assert held == pytest.approx(arch.params / 2, rel=0.01)
    assert MB == 2**20


# Every strategy at 1, 2 and 4 ranks, as tests/runs.py runs them (fp32, the embedded default), and
# what else the course runs: hybrid_shard (a 2x2 mesh on 4 ranks), bf16 mixed precision (FSDP2's
# MixedPrecisionPolicy; DDP's autocast), gradient accumulation (FSDP2 keeps every unit's unsharded
# gradient until the last micro-batch) and activation checkpointing. The bf16, hybrid and AC runs
# are the ones other tests already use (tests/runs.py runs each once per session).
BF16_SHORT = ("--precision", "bf16", "--train-size", "12", "--epochs", "1")
MEASURED = [((), 1), (("--sharding", "full_shard"), 1),
            (("--sharding", "ddp"), 2), (("--sharding", "full_shard"), 2), (("--sharding", "shard_grad_op"), 2),
            (("--sharding", "full_shard", "--offload"), 2),
            (("--sharding", "ddp"), 4), (("--sharding", "full_shard"), 4), (("--sharding", "shard_grad_op"), 4),
            (("--sharding", "full_shard", "--offload"), 4),
            (("--sharding", "hybrid_shard", "--hybrid-replicas", "2"), 4),
            (("--sharding", "ddp", *BF16_SHORT), 2), (("--sharding", "full_shard", *BF16_SHORT), 2),
            (("--sharding", "full_shard", "--grad-acc", "2"), 2), (("--sharding", "ddp", "--grad-acc", "2"), 2),
            (("--sharding", "full_shard", "--activation-checkpointing"), 2),
            (("--sharding", "ddp", "--activation-checkpointing"), 2),
            # the loss settings (workshop.training.loss): the logits shrink, the model follows
            (("--loss", "answer_only"), 1), (("--sharding", "full_shard", "--loss", "answer_only"), 2),
            (("--sharding", "ddp", "--loss", "answer_only"), 2), (("--sharding", "full_shard", "--loss", "chunked"), 2)]
TOLERANCE = {"params": 0.05, "grads": 0.05, "optimizer": 0.05, "host_params": 0.05, "host_grads": 0.05,
             "host_optimizer": 0.05, "activations": 0.25, "other": 0.15, "peak": 0.15}


@pytest.mark.slow
@pytest.mark.parametrize("flags,nproc", MEASURED,
                         ids=[f"{'_'.join(f.lstrip('-') for f in flags if f not in BF16_SHORT[2:]) or 'none'}-x{n}"
                              for flags, n in MEASURED])
def test_model_matches_the_measured_tensor_memory(runs, flags: tuple[str, ...], nproc: int) -> None:  # noqa: ANN001
    """The memory model against PyTorch's tracker on real runs, every rank, every category."""
    import json

    run = runs.get(*flags, nproc=nproc)
    config = json.loads((run.out_dir / "run_args.json").read_text())["config"]
    rows = memory.compare(run.summary, config)
    assert {r["rank"] for r in rows} == set(range(nproc))
    checked = [r for r in rows if r["category"] in TOLERANCE]
    assert {r["category"] for r in checked} >= {"params", "grads", "optimizer", "activations", "other", "peak"}
    for r in checked:
        if r["category"] == "other" and config["precision"] != "fp32":
            # backward's temporaries are counted in fp32 (calibrated on fp32 runs, within 8 % of them); a
            # 16-bit run keeps some in bf16: the model is an upper bound there (measured +17 to +37 %)
            assert r["measured_mb"] <= r["predicted_mb"] <= 1.5 * r["measured_mb"], r
            continue
        assert r["predicted_mb"] == pytest.approx(r["measured_mb"], rel=TOLERANCE[r["category"]], abs=1e-3), r
    assert run.summary["tensor_mem_overhead_pct"] is not None  # the measured step's cost: bounded below


@pytest.mark.slow
@pytest.mark.parametrize("sharding", ["ddp", "full_shard"])
def test_measuring_tensor_memory_stays_a_small_share_of_a_course_run(runs, sharding: str) -> None:  # noqa: ANN001
    """Notebook 03's runs (2 ranks, 12 optimizer steps of the tiny model) record what the measured step
    cost. The issue's bound, 10 % of the training time, is a speed target: benchmarks/tensor_memory_overhead.py
    checks it on a quiet machine. Beside the rest of the suite this only catches a tracker that got
    several times dearer (it cost 10-19 % of these runs before its per-operator work was cut)."""
    s = runs.get("--sharding", sharding, nproc=2).summary
    assert s["steps"] == 12
    assert 0 <= s["tensor_mem_overhead_pct"] <= SUITE_OVERHEAD_BOUND_PCT, s["tensor_mem_overhead_pct"]


SUITE_OVERHEAD_BOUND_PCT = 25.0


def test_the_design_states_the_overhead_bounds_the_checks_hold() -> None:
    """docs/design.md says what holds the tensor-memory overhead: the benchmark's bound on a quiet machine and
    this suite's looser one beside its other work; both numbers are the ones the checks use."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("overhead", root / "benchmarks" / "tensor_memory_overhead.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    design = " ".join((root / "docs" / "design.md").read_text().split())
    assert f"holds notebook 03's 12-step runs to {bench.BOUND_PCT:.0f} % on a quiet machine" in design
    assert (f"`test_measuring_tensor_memory_stays_a_small_share_of_a_course_run` holds the same runs to "
            f"{SUITE_OVERHEAD_BOUND_PCT:.0f} %") in design


@pytest.mark.slow
def test_course_tables_show_what_fsdp_saves_at_2_ranks(runs) -> None:  # noqa: ANN001
    """The embedded default's strategies table at 2 ranks, from real runs: what the course teaches."""
    from workshop.results import tables

    names = {"ddp": ("--sharding", "ddp"), "full_shard": ("--sharding", "full_shard"),
             "shard_grad_op": ("--sharding", "shard_grad_op"), "offload": ("--sharding", "full_shard", "--offload"),
             "full_shard+ac": ("--sharding", "full_shard", "--activation-checkpointing"),
             "ddp+ac": ("--sharding", "ddp", "--activation-checkpointing")}
    df = tables.strategies_table([runs.get(*flags, nproc=2).out_dir for flags in names.values()])
    df.index = list(names)
    ddp = df.loc["ddp"]
    for sharded in ("full_shard", "shard_grad_op"):
        for col in ("optimizer_mb", "grads_mb"):
            assert df.loc[sharded, col] == pytest.approx(ddp[col] / 2, rel=0.01)
    assert df.loc["full_shard", "peak_mem_mb"] < df.loc["shard_grad_op", "peak_mem_mb"] < ddp["peak_mem_mb"]
    off, full = df.loc["offload"], df.loc["full_shard"]
    assert off["optimizer_mb"] == off["grads_mb"] == 0 and off["params_mb"] < full["params_mb"]
    assert off["host_mb"] == pytest.approx(full["optimizer_mb"] + full["grads_mb"] + ddp["params_mb"] / 2, rel=0.01)
    assert df.loc["full_shard+ac", "activations_mb"] < full["activations_mb"]
    assert df.loc["ddp+ac", "activations_mb"] < ddp["activations_mb"]
    assert (df["rss_mb"] > 10 * df["peak_mem_mb"]).all()  # the interpreter, not the tensors, fills RSS


@pytest.mark.slow
def test_lab_memory_table_and_stacked_plot(runs, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """The notebooks' API: predicted vs measured per category for a list of jobs, and its stacked bars."""
    from workshop.student.lab import Lab

    monkeypatch.chdir(tmp_path)
    lab = Lab("local", quiet=True)
    dirs = [runs.get("--sharding", "ddp", nproc=2).out_dir, runs.get("--sharding", "full_shard", "--offload", nproc=2).out_dir]
    table = lab.memory(dirs, names=["ddp", "offload"])
    assert set(table.index.get_level_values("run")) == {"ddp", "offload"}
    assert table.loc[("offload", "host_optimizer"), "measured_mb"] == table.loc[("ddp", "optimizer"), "measured_mb"] / 2
    assert (table["rel_error"].abs() < 0.15).loc[(slice(None), ["params", "peak"]), ].all()
    fig = lab.plot("memory_categories", table, save="memory")
    assert (tmp_path / "plots" / "memory.png").stat().st_size > 0
    assert len(fig.axes[0].patches) == 2 * 2 * 5  # two runs x (predicted, measured) x five categories
    with pytest.raises(ValueError, match="names"):
        lab.memory(dirs, names=["one"])


def test_the_trackers_drop_what_tree_map_only_returns() -> None:
    """workshop.training.tensor_memory.lean_tree_map swaps the trackers' `tree_map_only` for one that
    returns its input unchanged, which is only right while every call in them is a bare statement: a
    torch release that uses the result would otherwise get the wrong tree, silently."""
    import ast
    import importlib
    import inspect

    from workshop.training.tensor_memory import TRACKER_MODULES

    for name in TRACKER_MODULES:
        tree = ast.parse(inspect.getsource(importlib.import_module(name)))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "tree_map_only"]
        bare = [n.value for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]
        assert calls, f"{name} no longer calls tree_map_only: revisit lean_tree_map"
        assert all(any(c is b for b in bare) for c in calls), f"{name} uses tree_map_only's result"
