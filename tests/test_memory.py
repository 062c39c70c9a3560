"""The memory model: hand-computed cases (arithmetic in the comments) and what CPU runs can observe."""

from __future__ import annotations

import pytest

from workshop import memory
from workshop.memory import MB, GiB, activation_bytes, estimate, get_arch, largest_model_that_fits

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

    from workshop import models

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
    assert bd.master_weights == 4 * P560 == 2_236_858_368  # fp32 parameters = master weights
    assert bd.params == 2 * P560 == 1_118_429_184  # autocast's bf16 copies
    assert bd.grads == 4 * P560  # fp32 gradients
    assert bd.optimizer == 8 * P560 == 4_473_716_736  # AdamW exp_avg + exp_avg_sq, fp32
    assert bd.gather_buffer == bd.comm_buffers == 0
    # per layer: s·b·h·(34 + 5·a·s/h) = 512·8·1024·(34 + 5·16·512/1024) = 4,194,304·74 = 310,378,496
    assert bd.activations == 24 * 310_378_496 == 7_449_083_904
    # logits: fp32 logits + their gradient = 2·b·s·V·4 = 2·8·512·250880·4
    assert bd.logits == 8_220_835_840
    # 2,236,858,368 + 1,118,429,184 + 2,236,858,368 + 4,473,716,736 + 7,449,083,904 + 8,220,835,840
    assert bd.total == 25_735_782_400
    assert round(bd.total_mb) == 24_544


def test_full_shard_4_gpus_bf16_by_hand() -> None:
    bd = estimate("bloom-560m", "full_shard", 4, "bf16", batch_size=8, max_length=512)
    assert bd.master_weights == bd.grads == P560  # 4 bytes · P / 4 ranks
    assert bd.optimizer == 2 * P560
    assert bd.params == 0  # the bf16 compute copies are the gathered units below
    # root unit kept gathered + 2 blocks (prefetch), in bf16: 2·(256,905,216 + 2·12,596,224) = 564,195,328
    assert bd.gather_buffer == 564_195_328
    # largest unit's unsharded bf16 gradient before reduce-scatter: 2·256,905,216
    assert bd.comm_buffers == 513_810_432
    # 2·559,214,592 + 1,118,429,184 + 564,195,328 + 513,810,432 + 7,449,083,904 + 8,220,835,840
    assert bd.total == 18_984_783_872
    assert round(bd.total_mb) == 18_105


def test_sharding_strategies_order_as_the_course_says() -> None:
    kw = dict(model="bloom-560m", precision="bf16", batch_size=8, max_length=512)
    ddp = estimate(sharding="ddp", world_size=4, **kw)
    full = estimate(sharding="full_shard", world_size=4, **kw)
    sgo = estimate(sharding="shard_grad_op", world_size=4, **kw)
    hybrid = estimate(sharding="hybrid_shard", world_size=4, replicas=2, **kw)
    off = estimate(sharding="full_shard", world_size=4, offload=True, **kw)
    assert ddp.comm_buffers == 4 * P560  # DDP buckets: a second fp32 gradient copy
    assert sgo.gather_buffer == 2 * P560  # every unit stays gathered (bf16) between forward and backward
    assert hybrid.shard_size == 2 and hybrid.master_weights == 4 * P560 // 2
    assert off.master_weights == off.grads == off.optimizer == 0 and off.cpu == 16 * P560 // 4
    assert off.total < full.total < sgo.total < ddp.total
    assert full.total < hybrid.total < ddp.total


def test_fp32_has_no_master_copy() -> None:
    bd = estimate("tiny", "none", 1, "fp32", batch_size=2, max_length=32)
    p = get_arch("tiny").params  # 1024·96 + 4·96 + 2·(12·96² + 13·96) = 98,688 + 2·111,840 = 322,368
    assert p == 322_368
    assert bd.params == 4 * p and bd.master_weights == 0


def test_activation_checkpointing_by_hand() -> None:
    tiny = get_arch("tiny")  # h 96, a 4, L 2
    # per layer, bf16: s·b·h·(34 + 5·a·s/h) = 32·2·96·(34 + 5·4·32/96) = 6144·(34 + 6.667) = 249,856
    assert activation_bytes(tiny, 2, 32, "bf16") == 2 * 249_856
    # checkpointed: L block inputs 2·s·b·h each (2·2·6144 = 24,576) + one block recomputed (249,856)
    assert activation_bytes(tiny, 2, 32, "bf16", checkpointing=True) == 24_576 + 249_856
    # fp32 activations take twice the bytes
    assert activation_bytes(tiny, 2, 32, "fp32") == 4 * 249_856


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
    from workshop.logs import read_run_dir

    cfg = read_run_dir(REAL_RUN).config
    bd = memory.estimate_config(cfg)
    assert bd.shard_size == 2 and bd.n_params == 322_368


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert memory.main(["--model", "bloom-560m", "--sharding", "full_shard", "--world-size", "4",
                        "--precision", "bf16", "--batch-size", "8", "--max-length", "512"]) == 0
    out = capsys.readouterr().out
    assert "559,214,592" in out and "18,105 MB" in out
    assert memory.main(["--sharding", "none", "--world-size", "2"]) == 2
    assert memory.main(["--json", "--fit-gpu-gb", "79", "--world-size", "8"]) == 0


@pytest.mark.slow
def test_full_shard_holds_half_the_parameters_per_rank_at_world_2(runs) -> None:  # noqa: ANN001
    """A real 2-process full_shard run: each rank holds ~1/2 of the parameters, as the model says."""
    s = runs.get("--sharding", "full_shard", nproc=2).summary
    arch = get_arch(s["model"])
    assert s["params_total"] == arch.params
    predicted = estimate(arch, "full_shard", 2, "fp32", 1, 32).params // 4  # fp32 shard: 4 bytes/param
    for held in s["params_local_per_rank"]:
        assert held == pytest.approx(predicted, rel=0.01)
        assert held == pytest.approx(arch.params / 2, rel=0.01)
    assert MB == 2**20
