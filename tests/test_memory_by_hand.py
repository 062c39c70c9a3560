"""The memory model outside the symmetric cases, against numbers worked by hand from its stated rules
(workshop/results/memory.py's docstring). Every expected value is arithmetic written out here, never a
call of the model: a wrong shard size, a dropped accumulation term or a wrong peak must fail.

BLOOM-560M: V = 250,880, h = 1024, L = 24, 16 heads; P = 559,214,592 parameters;
the tied embedding V·h = 256,901,120; one block 12h² + 13h = 12,596,224.
Micro-batch 8 x 512 tokens: x = 4096.
"""

from __future__ import annotations

import pytest

from workshop.results import memory
from workshop.results.memory import MB, GiB, activation_bytes, estimate

P = 559_214_592
VH = 256_901_120
BLOCK = 12_596_224
X = 8 * 512
# bf16 activations without autocast's weight copies (FSDP's MixedPrecisionPolicy computes in bf16):
#   per block 36·x·h + 6·b·a·s² = 150,994,944 + 201,326,592 = 352,321,536, x 24 = 8,455,716,864
#   outside   14·x·h + 64·x + 10·x·V = 58,720,256 + 262,144 + 10,276,044,800 = 10,335,027,200
ACT_BF16 = 8_455_716_864 + 10_335_027_200            # 18,790,744,064
LOSS_GRAD_BF16 = 2 * X * 250_880                        # the loss's bf16 gradient: 2,055,208,960
# backward's temporaries: max(8·x·V = 8,220,835,840, 100·x·h + 4·V·h = 1,447,034,880)
OTHER_BASE = 8_220_835_840


def test_hybrid_2_replicas_x_8_shards_on_16_gpus() -> None:
    """Each parameter is sharded over its replica group of 8, not over 16 ranks nor over 2 replicas."""
    bd = estimate("bloom-560m", "hybrid_shard", 16, "bf16", 8, 512, replicas=2)
    assert bd.shard_size == 8
    assert bd.optimizer == 8 * P // 8 == 559_214_592                  # AdamW's 8 bytes over 8 shards
    assert bd.grads == 4 * P // 8 == 279_607_296
    # the fp32 shard + the bf16 embedding unit and two bf16 blocks gathered at once (on a GPU the next
    # block's all-gather, FSDP2's prefetch, runs while this one computes)
    assert bd.params == 279_607_296 + 2 * (VH + 2 * BLOCK) == 843_794_432
    assert bd.activations == ACT_BF16 == 18_790_744_064
    # the logits' gradients (8·x·V) outlast what the embedding's backward adds at its end (dry run, benchmarks/paper)
    assert bd.other == OTHER_BASE == max(8 * 8 * 512 * 250_880, 100 * 8 * 512 * 1024 + 4 * VH + 2 * (VH + BLOCK))
    assert bd.unsharded_grads == 2 * VH                                # the embedding unit's bf16 gradient
    # at backward's start: the shard, the gathered embedding unit, AdamW, activations, the loss's gradient
    assert bd.peak == 279_607_296 + 2 * VH + 559_214_592 + ACT_BF16 + LOSS_GRAD_BF16 == 22_198_577_152
    assert bd.ddp_buckets == 0 and bd.gpu_peak == bd.peak and bd.cpu == 0


def test_hybrid_shard_size_is_world_over_replicas() -> None:
    """8 replicas of 2 hold 4 times what 2 replicas of 8 hold, of every sharded state."""
    wide = estimate("bloom-560m", "hybrid_shard", 16, "bf16", 8, 512, replicas=8)
    assert wide.shard_size == 2 and wide.optimizer == 8 * P // 2 == 2_236_858_368
    with pytest.raises(ValueError, match="3 replicas do not divide world size 16"):
        estimate("bloom-560m", "hybrid_shard", 16, "bf16", 8, 512, replicas=3)


def test_offload_with_gradient_accumulation() -> None:
    """full_shard on 4 with offload and grad_acc 2: the sharded states live on the host; on the device the
    gathered units, and every unit's unsharded bf16 gradient kept until the last micro-batch (2 x P)."""
    bd = estimate("bloom-560m", "full_shard", 4, "bf16", 8, 512, offload=True, grad_acc=2)
    assert (bd.host_params, bd.host_grads, bd.host_optimizer) == (P, P, 2 * P)   # 4P/4, 4P/4, 8P/4
    assert bd.cpu == 4 * P == 2_236_858_368
    assert bd.grads == 0 and bd.optimizer == 0
    assert bd.params == 2 * (VH + 2 * BLOCK) == 564_187_136        # the embedding unit + two blocks in flight
    assert bd.unsharded_grads == 2 * P == 1_118_429_184
    assert bd.peak == 2 * VH + 2 * P + ACT_BF16 + LOSS_GRAD_BF16 == 22_478_184_448
    one_step = estimate("bloom-560m", "full_shard", 4, "bf16", 8, 512, offload=True)
    assert one_step.unsharded_grads == 2 * VH                # without accumulation: the embedding unit's only
    assert bd.peak - one_step.peak == 2 * P


def test_ddp_with_gradient_accumulation() -> None:
    """DDP on 4, bf16, grad_acc 2: the stored gradients of earlier micro-batches are held (4P) and a later
    micro-batch's gradient of the tied embedding is counted before it is added in (4·V·h)."""
    bd = estimate("bloom-560m", "ddp", 4, "bf16", 8, 512, grad_acc=2)
    assert bd.shard_size == 1 and bd.params == 4 * P and bd.optimizer == 8 * P
    assert bd.grads == 4 * P + 4 * VH == 3_264_462_848
    assert bd.other == OTHER_BASE          # the all-reduce's copies are DDP's buckets, outside the tracker's view
    # activations: the FSDP ones + autocast's bf16 weight copies 2·(V·h + 24·12h²) = 1,117,782,016
    # + DDP's logits-sized forward output 2·x·V = 2,055,208,960
    assert bd.activations == ACT_BF16 + 1_117_782_016 + 2_055_208_960 == 21_963_735_040
    # peak: params 4P + AdamW 8P + held gradients 4P + max(activations less DDP's output + the loss's
    # gradient, activations) = 16P + 21,963,735,040 (the two are equal here)
    assert bd.peak == 16 * P + 21_963_735_040 == 30_911_168_512
    assert bd.ddp_buckets == 4 * P and bd.gpu_peak == 30_911_168_512 + 2_236_858_368


def test_the_other_category_by_hand() -> None:
    """Backward's temporaries, by strategy: what the measured comparison checks too."""
    none = estimate("bloom-560m", "none", 1, "bf16", 8, 512)
    assert none.other == OTHER_BASE
    full = estimate("bloom-560m", "full_shard", 4, "bf16", 8, 512)
    assert full.other == OTHER_BASE      # the logits' gradients; the embedding's backward comes after them
    # the tiny model, 2 x 32 tokens, fp32: max(8·x·V = 524,288, 100·x·h + 4·V·h = 614,400 + 393,216 = 1,007,616
    # + the unsharded gradients of the embedding unit and a block, fp32: 4 (V·h + block), + in fp32 the tied
    # weight's gradient accumulated at the embedding's backward, 4·V·h)
    tiny = estimate("tiny", "full_shard", 2, "fp32", 2, 32)
    assert tiny.other == 1_007_616 + 4 * (98_304 + 111_840) + 4 * 98_304 == 2_241_408
    # BLOOM-7b1 at 16 ranks, 1 x 512, bf16: the embedding's end of backward, not the logits (dry run: 6,264 MB)
    big = estimate("bloom-7b1", "full_shard", 16, "bf16", 1, 512, device="cpu")
    # (16-bit temporaries: 24 B per x·h and 6.5 per attention score, memory.TEMPS_PER_XH / TEMPS_PER_SCORE)
    temps = 24 * 512 * 4096 + int(6.5 * 1 * 32 * 512**2)
    assert big.other == temps + 4 * 250_880 * 4096 + 2 * (250_880 * 4096 + 12 * 4096**2 + 13 * 4096)
    # HSDP 2 x 8: each block but one keeps its bf16 gradient shard for the replicas' all-reduce (dry run: 7,704.5 MB)
    hsdp = estimate("bloom-7b1", "hybrid_shard", 16, "bf16", 1, 512, replicas=2, device="cpu")
    assert hsdp.other == big.other + 2 * 29 * (12 * 4096**2 + 13 * 4096) // 8
    # DDP all-reduces in its buckets, which the tracker never sees (ddp_buckets): its `other` is one process's
    assert estimate("tiny", "ddp", 2, "fp32", 2, 32).other == estimate("tiny", "none", 1, "fp32", 2, 32).other == 1_007_616


def test_tiny_full_shard_at_two_batch_shapes() -> None:
    """The tiny model (V 1024, h 96, L 2, 4 heads, P 322,368), full_shard on 2, fp32: the shapes
    tests/test_memory_tables.py's per-rank measurements name."""
    def by_hand(b: int, s: int) -> int:
        x = b * s
        blocks = 2 * (64 * x * 96 + 4 * b * 4 * s * s)
        outside = 12 * x * 96 + 64 * x + 8 * x * 1024
        return 644_736 + 4 * 98_304 + 1_289_472 + blocks + outside + 4 * x * 1024   # shard, embedding, AdamW, ...
    assert estimate("tiny", "full_shard", 2, "fp32", 2, 40).peak == by_hand(2, 40) == 4_493_184
    assert estimate("tiny", "full_shard", 2, "fp32", 2, 56).peak == by_hand(2, 56) == 5_416_832


def test_the_ladders_published_rungs_have_their_checkpoints_heads() -> None:
    """bigscience/bloom-1b1's config.json: n_head 16 (head dim 96); bloom-3b's: n_head 32 (head dim 80). A
    rule of thumb (hidden / 128) would give 12 and 20, and under-count the attention scores."""
    assert memory.bloom_family_arch(1536, 24).heads == 16
    assert memory.bloom_family_arch(2560, 30).heads == 32
    assert memory.bloom_family_arch(5120, 40).heads == 40          # between checkpoints: head dim 128


def test_largest_model_for_ddp_on_a_budget_between_peak_and_gpu_peak() -> None:
    """bloom-1b1 (V 250,880, h 1536, L 24, 16 heads; P = 385,357,824 + 24 x 28,331,520 = 1,065,314,304),
    DDP on 4, bf16, 8 x 512:
      activations: blocks 24 x (36·x·h + 6·b·a·s²) = 24 x (226,492,416 + 201,326,592) = 10,267,656,192
                   outside 14·x·h + 64·x + 10·x·V = 88,080,384 + 262,144 + 10,276,044,800 = 10,364,387,328
                   autocast's copies 2·(V·h + 24·12h²) = 2,129,657,856; DDP's output 2·x·V = 2,055,208,960
      peak 12P + 24,816,910,336 = 37,600,681,984 (35.02 GiB); gpu_peak + 4P buckets = 41,861,939,200 (38.99 GiB).
    On 36 GiB it fits by the tracker's peak but not on a GPU: the answer is bloom-560m, whose gpu_peak is
    12P + 21,963,735,040 + 4P = 30,911,168,512 (28.79 GiB)."""
    a = memory.bloom_family_arch(1536, 24)
    assert a.params == 1_065_314_304
    bd = estimate(a, "ddp", 4, "bf16", 8, 512)
    assert bd.peak == 12 * 1_065_314_304 + 24_816_910_336 == 37_600_681_984
    assert bd.gpu_peak == 37_600_681_984 + 4 * 1_065_314_304 == 41_861_939_200
    fit = memory.largest_model_that_fits(36, "ddp", 4, "bf16", 8, 512)
    assert (fit.hidden, fit.layers, fit.params) == (1024, 24, P)
    assert fit.breakdown is not None and fit.breakdown.gpu_peak == 12 * P + 21_963_735_040 + 4 * P == 30_911_168_512
    # on 40 GiB (42,949,672,960 bytes) bloom-1b1 fits a GPU too
    assert (memory.largest_model_that_fits(40, "ddp", 4, "bf16", 8, 512).hidden) == 1536


def test_nothing_fits_a_gpu_too_small(capsys: pytest.CaptureFixture[str]) -> None:
    assert memory.largest_model_that_fits(1, "none", 1) == memory.Fit(0, 0, 0, 0, None)
    # the CLI: a refused config says so on stderr, under the command's own name
    assert memory.main(["--sharding", "hybrid_shard", "--world-size", "4", "--replicas", "3"]) == 2
    assert capsys.readouterr().err == "workshop estimate: hybrid_shard: 3 replicas do not divide world size 4\n"
    assert memory.main(["--model", "tiny", "--sharding", "none"]) == 0
    assert capsys.readouterr().out.splitlines()[:2] == ["parameters: 322,368 (sharded over 1)",
                                                        "per GPU (each category's own peak over a step):"]


def test_compare_predicts_each_rank_at_its_own_batch_shape() -> None:
    """summary.json's per-rank measurements against the model, by hand for the tiny model, full_shard on 2,
    fp32: params = the shard 644,736 + the gathered embedding and one block 4·(98,304 + 111,840) = 1,485,312 B;
    peak 4,493,184 B at 2 x 40 and 5,416,832 B at 2 x 56 (test_tiny_full_shard_at_two_batch_shapes)."""
    config = {"model": "tiny", "sharding": "full_shard", "precision": "fp32", "nodes": 1, "procs_per_node": 2,
              "batch_size": 2, "max_length": 256}
    ranks = [{"params": 1.5, "peak": 4.0, "batch_shape": [2, 40]}, None,
             {"params": 1.4, "peak": 5.0, "unsharded_grads": 0.4, "batch_shape": [2, 56]}]
    rows = memory.compare({"tensor_mem_mb_per_rank": ranks, "device": "cpu"}, config)   # a CPU rank: one block in flight
    by = {(r["rank"], r["category"]): r for r in rows}
    assert {r["rank"] for r in rows} == {0, 2}                          # a rank without a measurement: no rows
    assert by[0, "params"]["predicted_mb"] == round(1_485_312 / MB, 3) == 1.417
    assert by[0, "peak"] == {"rank": 0, "category": "peak", "predicted_mb": round(4_493_184 / MB, 3),
                             "measured_mb": 4.0, "rel_error": round((4_493_184 / MB - 4.0) / 4.0, 4)}
    assert by[2, "peak"]["predicted_mb"] == round(5_416_832 / MB, 3)
    assert by[0, "grads"]["measured_mb"] is None and by[0, "grads"]["rel_error"] is None
    assert (0, "unsharded_grads") not in by and (0, "host_params") not in by     # not measured: not compared
    assert by[2, "unsharded_grads"]["predicted_mb"] == round(4 * 98_304 / MB, 3)  # the embedding unit's fp32 grad


def test_the_estimate_commands_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert memory.main(["--model", "tiny", "--sharding", "full_shard", "--world-size", "2", "--offload"]) == 0
    assert "host_optimizer" in capsys.readouterr().out            # offload: host memory per rank is shown
    with pytest.raises(SystemExit):
        memory.main(["--precision", "fp8"])                         # argparse refuses it, naming the choices
    assert "invalid choice: 'fp8'" in capsys.readouterr().err
    assert memory.main(["--model", "tiny", "--sharding", "ddp", "--world-size", "2"]) == 0
    out = capsys.readouterr().out
    assert "  ddp_buckets           1.2 MB  (DDP's gradient buckets: the tracker cannot see them" in out   # 4P


def test_estimate_config_reads_the_configs_model() -> None:
    bd = memory.estimate_config({"model": "bloom-560m", "sharding": "full_shard", "nodes": 1, "procs_per_node": 4,
                                 "precision": "bf16", "batch_size": 8, "max_length": 512})
    assert bd.n_params == P and bd.peak == 23_037_399_040


def test_defaults_notes_and_the_offload_refusal() -> None:
    assert estimate().n_params == P                                       # BLOOM-560M unless told
    tiny = memory.get_arch("tiny")
    # one process in bf16 (the default strategy "none"): autocast's bf16 weight copies 2·(V·h + 2·12h²)
    assert activation_bytes(tiny, 2, 32, "bf16") - activation_bytes(tiny, 2, 32, "bf16", sharding="full_shard") \
        == 2 * (98_304 + 2 * 12 * 96 * 96) == 638_976
    off = estimate("tiny", "full_shard", 2, "fp32", 2, 32, offload=True)
    # the tiny model's block (111,840) is larger than its embedding (98,304): the larger unit's fp32 gradient
    assert off.unsharded_grads == 4 * 111_840
    assert off.notes == ["offload: sharded params, grads and AdamW states live in host memory"]
    with pytest.raises(ValueError) as e:
        estimate("tiny", "ddp", 2, offload=True)
    assert str(e.value) == "offload needs an FSDP strategy"


def test_every_sharding_the_config_accepts_the_memory_model_estimates() -> None:
    # issue 49: estimate_config raised "unknown sharding 'hybrid_shard_grad_op'", which the config accepts.
    # One owner of the names: the training config's lists, which the models read
    from workshop.comm import model as comm
    from workshop.training import config

    assert memory.SHARDINGS is config.SHARDINGS and comm.SHARDINGS is config.SHARDINGS
    for sharding in config.SHARDINGS:
        spec = {"model": "bloom-560m", "sharding": sharding, "precision": "bf16", "batch_size": 8, "max_length": 512,
                "nodes": 1 if sharding == "none" else 2, "procs_per_node": 1 if sharding == "none" else 8}
        assert memory.estimate_config(spec).peak > 0, sharding


def test_hybrid_shard_grad_op_keeps_every_unit_gathered_over_its_shard_group() -> None:
    # 2 nodes x 8: replicas 2, shard group 8. Stored fp32 shard 4P/8 = 279,607,296; reshard_after_forward=False
    # keeps the whole model gathered in bf16, 2P = 1,118,429,184, as shard_grad_op does
    bd = memory.estimate_config({"model": "bloom-560m", "sharding": "hybrid_shard_grad_op", "precision": "bf16",
                                 "batch_size": 8, "max_length": 512, "nodes": 2, "procs_per_node": 8})
    assert bd.shard_size == 8
    assert bd.params == 4 * P // 8 + 2 * P
    assert (bd.grads, bd.optimizer) == (4 * P // 8, 8 * P // 8)
    sgo = estimate("bloom-560m", "shard_grad_op", 8, "bf16", 8, 512)
    assert (bd.params, bd.peak) == (sgo.params, sgo.peak)   # the same ranks' worth of state, replicated twice


def test_compare_predicts_on_the_device_the_run_ran_on() -> None:
    """The summary's `device` decides, else the config's; "auto" (or none) is a course site's GPU. The tiny model,
    full_shard on 2, fp32, 2 x 40: params = the shard 644,736 + the embedding 4·98,304 + the blocks in flight,
    one on a CPU rank (4·111,840: 1,485,312 B = 1.417 MB), two on a GPU (1,932,672 B = 1.843 MB)."""
    config = {"model": "tiny", "sharding": "full_shard", "precision": "fp32", "world_size": 2, "batch_size": 2}
    measured = {"tensor_mem_mb_per_rank": [{"params": 1.4, "batch_shape": [2, 40]}]}

    def params_mb(summary: dict, cfg: dict) -> float:
        return next(r["predicted_mb"] for r in memory.compare(summary, cfg) if r["category"] == "params")

    assert params_mb(measured, {**config, "device": "cpu"}) == 1.417            # the config's, when the summary has none
    assert params_mb(measured, config) == params_mb(measured, {**config, "device": "auto"}) == 1.843
    assert params_mb({**measured, "device": "cuda"}, {**config, "device": "cpu"}) == 1.843   # where it ran wins
    assert params_mb({**measured, "device": "cpu"}, config) == 1.417


def test_compare_holds_an_answer_only_runs_logits_against_its_own_positions() -> None:
    """Under loss answer_only the logits tensor is answer positions x V, in the compute dtype: the tiny model in
    fp32 at 30 positions 4·30·1024 = 122,880 B (0.1172 MB), at 20 positions 81,920 B (0.0781 MB). A rank that
    measured no logits has no logits row; the positions must be there to predict at all."""
    config = {"model": "tiny", "sharding": "full_shard", "precision": "fp32", "world_size": 2, "batch_size": 2,
              "loss": "answer_only", "device": "cpu"}
    ranks = [{"peak": 3.0, "batch_shape": [2, 40]}, {"peak": 3.0, "batch_shape": [2, 40]}]
    summary = {"tensor_mem_mb_per_rank": ranks, "logits_positions_per_rank": [30, 20], "logits_mb_per_rank": [0.11, 0]}
    logits = [r for r in memory.compare(summary, config) if r["category"] == "logits"]
    # (122,880 / 2**20 - 0.11) / 0.11 = 0.06534...
    assert logits == [{"rank": 0, "category": "logits", "predicted_mb": 0.1172, "measured_mb": 0.11, "rel_error": 0.0653}]
    summary["logits_mb_per_rank"] = [0.11, 0.08]
    assert [r["predicted_mb"] for r in memory.compare(summary, config) if r["category"] == "logits"] == [0.1172, 0.0781]
    # the full loss on the same summary: every position, 4·80·1024 = 327,680 B = 0.3125 MB
    full = memory.compare(summary, {**config, "loss": "full"})
    assert [r["predicted_mb"] for r in full if r["category"] == "logits"] == [0.3125, 0.3125]
    with pytest.raises(ValueError, match="needs answer_tokens"):
        memory.compare({**summary, "logits_positions_per_rank": [30]}, config)    # rank 1's positions missing


def test_the_course_table_quotes_bloom_560m_at_the_notebooks_batch() -> None:
    """`workshop estimate --course`: BLOOM-560M, bf16, 8 x 512 unless told. Offload moves the sharded states to
    the host, 16 B x P / 4 = 2,133 MB; checkpointing keeps each block's input (24 x 2·x·h), the shared mask
    (2·b·s²) and the outside terms (10,335,027,200 B), plus one block recomputed (352,321,536 B): 10,388 MB."""
    table = memory.course_table()
    assert table == memory.course_table("bloom-560m", "bf16", 8, 512)
    lines = table.splitlines()
    assert lines[0] == "bloom-560m, bf16, batch 8 x 512 tokens per GPU (MB per GPU):"
    assert lines[1].split() == ["config", "params", "grads", "optimizer", "activations", "other", "peak", "gpu_peak",
                                "host"]
    rows = {line[2:26].strip(): line[26:].split() for line in lines[2:]}
    assert list(rows) == ["one GPU", "ddp x4", "full_shard x4", "shard_grad_op x4", "full_shard x4 + offload",
                          "full_shard x4 + AC"]
    assert rows["full_shard x4 + offload"][1:3] == ["0", "0"] and rows["full_shard x4 + offload"][-1] == "2,133"
    assert rows["full_shard x4 + AC"][3] == "10,388" and rows["full_shard x4"][3] == "17,920"
    assert rows["ddp x4"][-3:] == ["27,346", "29,479", "0"]        # peak, gpu_peak (+ 4P buckets), host
    assert "bloom-1b1, fp32, batch 2 x 128" in memory.course_table("bloom-1b1", "fp32", 2, 128)


def test_the_breakdown_names_what_a_gpu_must_hold_beside_the_trackers_peak() -> None:
    """DDP on 4, bf16, 8 x 512: peak 12P + 21,963,735,040 = 28,674,310,144 B (27,346.0 MB); the buckets 4P
    (2,133.2 MB) on top make gpu_peak 30,911,168,512 B = 29,479.2 MB = 28.79 GiB."""
    text = memory.format_breakdown(estimate("bloom-560m", "ddp", 4, "bf16", 8, 512))
    assert text.splitlines()[-3:] == [
        "  peak             27,346.0 MB  (26.71 GiB per GPU, most alive at once)",
        "  ddp_buckets       2,133.2 MB  (DDP's gradient buckets: the tracker cannot see them, a GPU's allocator does)",
        "  gpu_peak         29,479.2 MB  (28.79 GiB: peak + buckets, what a GPU must hold)"]
    assert "gpu_peak" not in memory.format_breakdown(estimate("bloom-560m", "full_shard", 4, "bf16", 8, 512))


def test_the_breakdown_of_an_offloaded_run_adds_host_memory_below_the_gpus() -> None:
    """full_shard on 4 with offload: per rank the host holds P/4·4 params, as much gradient, 2P AdamW (4P in all)."""
    lines = memory.format_breakdown(estimate("bloom-560m", "full_shard", 4, "bf16", 8, 512, offload=True)).splitlines()
    assert lines[0] == "parameters: 559,214,592 (sharded over 4)" and lines[7].startswith("  peak ")
    assert [line.split()[:2] for line in lines[8:12]] == [["host_params", "533.3"], ["host_grads", "533.3"],
                                                          ["host_optimizer", "1,066.6"], ["host", "2,133.2"]]
    assert all(line.endswith("MB  (host memory per rank)") for line in lines[8:12])
    assert lines[12:] == ["note: offload: sharded params, grads and AdamW states live in host memory"]


def test_between_checkpoints_a_rung_takes_bloom_s_usual_head_dim() -> None:
    """Head dim 64 up to hidden 1024, 128 above, and at least one head; the published shapes only for BLOOM's
    own vocabulary (a model with another tokenizer is not that checkpoint)."""
    heads = {h: memory.bloom_family_arch(h, 12).heads for h in (32, 96, 128, 512, 1024, 1025, 1200, 5120)}
    assert heads == {32: 1, 96: 1, 128: 2, 512: 8, 1024: 16, 1025: 8, 1200: 9, 5120: 40}
    assert all(type(n) is int for n in heads.values())
    assert memory.bloom_family_arch(1536, 24, vocab=32_000).heads == 12        # not bloom-1b1's 16
    assert memory.bloom_family_arch(1536, 24).heads == 16
    a = memory.bloom_family_arch(5120, 40)
    assert (a.name, a.vocab, a.hidden, a.layers) == ("bloom-h5120-l40", 250_880, 5120, 40)


def test_a_model_that_fills_the_gpu_exactly_fits() -> None:
    """The budget is a bound a model may reach: bloom-3b (3,002,557,440 parameters, 32 heads), one process,
    bf16, 8 x 512 (the defaults), fits a GPU of exactly its gpu_peak and not one byte less (then bloom-1b7)."""
    bd = estimate(memory.bloom_family_arch(2560, 30), "none", 1, "bf16", 8, 512)
    fit = memory.largest_model_that_fits(bd.gpu_peak / GiB)
    assert (fit.params, fit.hidden, fit.layers, fit.heads, fit.breakdown) == (3_002_557_440, 2560, 30, 32, bd)
    assert memory.largest_model_that_fits((bd.gpu_peak - 1) / GiB).hidden == 2048
    # hybrid_shard keeps one replica unless told: sharded over all 8 GPUs (24 GiB, 1 x 256) bloom-7b1 fits
    assert memory.largest_model_that_fits(24, "hybrid_shard", 8, "bf16", 1, 256).hidden == 4096
    assert memory.largest_model_that_fits(24, "hybrid_shard", 8, "bf16", 1, 256, replicas=2).hidden == 2560


def test_estimate_args_reads_a_run_as_the_training_config_resolves_it() -> None:
    """What a prediction is keyed by (the grader's references): the world from nodes x procs_per_node unless
    world_size says it; hybrid_shard's replicas from hybrid_replicas, else one per node; grad_acc derived
    from global_batch / (batch_size x world) when one is set; "auto" on a course site is its GPUs."""
    cfg = {"model": "bloom-560m", "sharding": "hybrid_shard", "nodes": 2, "procs_per_node": 4, "precision": "bf16",
           "batch_size": 4, "max_length": 128, "global_batch": 64, "grad_acc": 5, "device": "auto", "loss": None}
    assert memory.estimate_args(cfg) == ("bloom-560m", "hybrid_shard", 8, "bf16", 4, 128, False, False, 2, 2, "cuda",
                                         "full", None)
    assert memory.estimate_args({**cfg, "hybrid_replicas": 4})[8] == 4
    assert memory.estimate_args({**cfg, "world_size": 16, "replicas": 8})[2::6] == (16, 8)
    assert memory.estimate_args({**cfg, "global_batch": 16})[9] == 1          # 16 // (4 x 8) = 0: at least 1
    acc = memory.estimate_args({**cfg, "global_batch": 80})[9]               # as RunConfig derives it: 80 // 32
    assert acc == 2 and type(acc) is int
    for unset in ({}, {"nodes": None}):                                       # no nodes given: one replica group
        assert memory.estimate_args({"sharding": "hybrid_shard", "world_size": 4, **unset})[8] == 1
    assert memory.estimate_args({"world_size": 2, "global_batch": 8})[9] == 4   # micro-batch 1 unless told: 8 // 2
    assert memory.estimate_args({**cfg, "global_batch": 0})[9] == 5           # no global batch: grad_acc
    assert memory.estimate_args({**cfg, "global_batch": 0, "grad_acc": None})[9] == 1
    assert memory.estimate_args({**cfg, "sharding": "full_shard"})[8] == 1   # replicas only under hybrid sharding
    cpu = memory.estimate_args({**cfg, "device": "cpu", "loss": "answer_only", "offload": 1,
                                "activation_checkpointing": 1}, [2, 40], answer_tokens=30)
    assert cpu[4:8] + cpu[10:] == (2, 40, True, True, "cpu", "answer_only", 30)


def test_estimate_args_of_a_config_that_names_nothing() -> None:
    """An empty config (or an object without the fields) is read as the tiny model on one process, fp32,
    1 x 256 tokens, the full loss, on a GPU; an object's fields are read as attributes."""
    from types import SimpleNamespace

    tiny = ("tiny", "none", 1, "fp32", 1, 256, False, False, 1, 1, "cuda", "full", None)
    assert memory.estimate_args({}) == memory.estimate_args(SimpleNamespace()) == tiny
    run = SimpleNamespace(model="bloom-560m", world_size=4, sharding="ddp", batch_size=2, global_batch=16)
    assert memory.estimate_args(run)[:3] + memory.estimate_args(run)[9:10] == ("bloom-560m", "ddp", 4, 2)


def test_a_small_loss_moves_the_activation_peak_into_backward() -> None:
    """The tiny model, one process, 2 x 32 (x = 64), chunked: 8 rows of logits. fp32: forward keeps the blocks
    2·(64·x·h + 4·b·a·s²) = 851,968 and outside 12·x·h + 64·x + 8·rows·V = 143,360 (995,328); backward's floor
    takes off the logits' 8·rows·V = 65,536 and adds 4·b·a·s² + 20·x·h = 155,648: 1,085,440, the category's peak.
    The step's peak: 12P = 3,868,416 + the floor + 40·x·h of temporaries = 5,199,616 (above forward's end with the
    loss's gradient 4·rows·V, 1,028,096). DDP's logits-sized output is gone with the full loss: the same figures."""
    for bd in (estimate("tiny", "none", 1, "fp32", 2, 32, loss="chunked"),
               estimate("tiny", "ddp", 2, "fp32", 2, 32, loss="chunked")):
        assert (bd.activations, bd.logits, bd.peak) == (1_085_440, 4 * 8 * 1024, 5_199_616)
    # answer_only at 10 positions: the same floor and peak (what is kept does not depend on the rows), logits 4·10·V
    answers = estimate("tiny", "ddp", 2, "fp32", 2, 32, loss="answer_only", answer_tokens=10)
    assert (answers.activations, answers.logits, answers.peak) == (1_085_440, 40_960, 5_199_616)
    # the answer positions are some of the micro-batch's 64, never more, never fewer than none
    assert [estimate("tiny", "none", 1, "fp32", 2, 32, loss="answer_only", answer_tokens=n).logits
            for n in (1000, 64, 0, -5)] == [4 * 64 * 1024, 4 * 64 * 1024, 0, 0]
    # bf16: blocks 2·(36·x·h + 6·b·a·s²) = 540,672, outside 14·x·h + 64·x + 10·rows·V = 172,032, autocast's
    # copies 2·(V·h + 2·12h²) = 638,976 (1,351,680); floor - 10·rows·V + 155,648 = 1,425,408; peak 12P + floor
    # + 40·x·h = 5,539,584
    bf16 = estimate("tiny", "none", 1, "bf16", 2, 32, loss="chunked")
    assert (bf16.activations, bf16.logits, bf16.peak) == (1_425_408, 2 * 8 * 1024, 5_539_584)


def test_the_model_names_the_field_it_cannot_describe() -> None:
    """Each refusal says what is wrong and what to use instead."""
    refusals = {("tiny", "zero3"): "unknown sharding 'zero3'; use one of none, ddp, full_shard, shard_grad_op, "
                                   "hybrid_shard, hybrid_shard_grad_op",
                ("tiny", "none", 2): "sharding 'none' is one process: use world_size=1, or ddp/an FSDP strategy",
                ("tiny", "none", 1, "fp8"): "unknown precision 'fp8'; use fp32, bf16 or fp16",
                ("tiny", "none", 1, "fp32", 0): "world_size, batch_size, max_length, replicas and grad_acc must be >= 1"}
    for args, message in refusals.items():
        with pytest.raises(ValueError) as e:
            estimate(*args)
        assert str(e.value) == message
    for kw in (dict(world_size=0), dict(max_length=0), dict(replicas=0), dict(grad_acc=0)):
        with pytest.raises(ValueError, match="must be >= 1"):
            estimate("tiny", "ddp", **{"world_size": 2, **kw})
    with pytest.raises(ValueError) as e:
        estimate("tiny", "none", 1, loss="sparse")
    assert str(e.value) == "unknown loss 'sparse'; use one of full, answer_only, chunked"
    with pytest.raises(ValueError) as e:
        estimate("tiny", "none", 1, loss="answer_only")
    assert str(e.value) == ("loss 'answer_only' needs answer_tokens: the micro-batch's positions with an answer token "
                            "next (e.g. batch_size x the answer's tokens, EOS included)")


def test_the_peak_at_the_end_of_backward_by_hand() -> None:
    """When the step's activations are small, FSDP's peak comes at backward's end: the stored shard, AdamW, every
    reduced gradient shard, the embedding gathered again with its backward's fp32 temporary and unsharded
    gradient. The tiny model, full_shard on 2, fp32, 2 x 32, chunked: shard 644,736 + AdamW 1,289,472 + grads
    644,736 + the embedding 4·V·h = 393,216 + (4 + 4)·V·h = 786,432 + fp32's tied gradient accumulated 4·V·h."""
    end = 644_736 + 1_289_472 + 644_736 + 393_216 + 786_432 + 393_216
    assert estimate("tiny", "full_shard", 2, "fp32", 2, 32, loss="chunked").peak == end == 4_151_808
    # with accumulation every unit's fp32 unsharded gradient (4P = 1,289,472) is held until then too
    assert estimate("tiny", "full_shard", 2, "fp32", 2, 32, loss="chunked", grad_acc=2).peak == end + 1_289_472
    # BLOOM-7b1, HSDP 2 x 8, bf16, 1 x 512 (P 7,069,016,064; V·h 1,027,604,480; a block 201,379,840): 4P/8 + 8P/8
    # + 4P/8, the bf16 embedding 2·V·h, its fp32 temporary and bf16 gradient 6·V·h, and 29 blocks' bf16 gradient
    # shards kept for the replicas' all-reduce 2·29·block/8
    P, VH, BLOCK7 = 7_069_016_064, 1_027_604_480, 201_379_840
    hsdp = estimate("bloom-7b1", "hybrid_shard", 16, "bf16", 1, 512, replicas=2, device="cpu")
    assert hsdp.peak == 16 * P // 8 + 8 * VH + 2 * 29 * BLOCK7 // 8 == 23_818_871_808


def test_hsdp_in_fp32_keeps_no_gradient_shards_beyond_the_stored_ones() -> None:
    """In fp32 the reduced shard is the stored gradient itself: HSDP 2 x 2 holds what full_shard on 2 holds."""
    hybrid = estimate("tiny", "hybrid_shard", 4, "fp32", 2, 32, replicas=2)
    full = estimate("tiny", "full_shard", 2, "fp32", 2, 32)
    assert (hybrid.other, hybrid.peak) == (full.other, full.peak) and hybrid.other == 2_241_408


def test_backwards_temporaries_grow_with_each_sequences_attention_scores() -> None:
    """BLOOM-7b1 at 16 ranks, 2 x 512, bf16: 24·x·h = 100,663,296 and 6.5 B per score, 6.5·b·a·s² = 109,051,904,
    + the embedding's fp32 temporary 4·V·h and the unsharded bf16 gradients of it and a block 2·(V·h + block)."""
    big = estimate("bloom-7b1", "full_shard", 16, "bf16", 2, 512, device="cpu")
    assert big.other == 100_663_296 + 109_051_904 + 4 * 1_027_604_480 + 2 * (1_027_604_480 + 201_379_840)


def test_with_a_small_vocabulary_the_largest_parameter_is_the_mlps() -> None:
    """One process with accumulation counts the largest parameter's incoming gradient once more: the tied
    embedding (V·h) for BLOOM, but with V = 128 and h = 96 the MLP's 4h x h weight (36,864 > 12,288)."""
    narrow = memory.Arch("narrow", 128, 96, 2, 4)
    assert narrow.params == 236_352
    assert estimate(narrow, "none", 1, "fp32", 1, 8, grad_acc=2).grads == 4 * 236_352 + 4 * 4 * 96 * 96


def test_every_figure_is_whole_bytes_when_the_ranks_do_not_divide_the_model() -> None:
    """full_shard on 5: the fp32 shard 4P // 5 = 257,894 bytes + the embedding and two blocks in flight 1,287,936."""
    bd = estimate("tiny", "full_shard", 5, "fp32", 2, 32)
    assert bd.params == 257_894 + 4 * (98_304 + 2 * 111_840)
    hsdp = estimate("bloom-560m", "hybrid_shard", 10, "bf16", 1, 128, replicas=2)   # 2·23 block shards over 5 ranks
    off = estimate("tiny", "full_shard", 5, "fp32", 2, 32, offload=True)
    for b in (bd, hsdp, off):
        assert all(type(getattr(b, f)) is int for f in ("params", "grads", "optimizer", "activations", "other", "peak",
                                                        "host_params", "host_grads", "host_optimizer"))
    assert bd.as_mb()["total"] == bd.peak / MB


def test_the_largest_micro_batch_is_the_last_that_fits_exactly() -> None:
    """Bisection over 1..MAX_MICRO_BATCH for a peak that grows with the batch: a budget a batch fills exactly is
    that batch's; under one sequence's peak, nothing fits (0)."""
    from types import SimpleNamespace

    def predict(b: int) -> SimpleNamespace:
        return SimpleNamespace(gpu_peak=1000 * b + 500)                 # 500 bytes of model, 1,000 per sequence

    budgets = {999: 0, 1500: 1, 2499: 1, 7500: 7, 7499: 6, 100_000: 99, 4096 * 1000 + 500: 4096, 10**9: 4096}
    for usable, batch in budgets.items():
        found = memory.largest_micro_batch(predict, usable)
        assert (found, type(found)) == (batch, int), usable
    assert memory.MAX_MICRO_BATCH == 4096
    # the memory model itself: the tiny model, full_shard on 2, fp32, 32 tokens, in a budget of 10 MiB
    tiny = lambda b: estimate("tiny", "full_shard", 2, "fp32", b, 32)   # noqa: E731
    b = memory.largest_micro_batch(tiny, 10 * MB)
    assert tiny(b).gpu_peak <= 10 * MB < tiny(b + 1).gpu_peak and b > 1


def test_answer_only_over_every_position_is_the_full_loss() -> None:
    """When every position is an answer position, the small loss projects what the full loss does: the same
    logits, activations and peak (the tiny model, one process, fp32, 2 x 32: 64 positions)."""
    full = estimate("tiny", "none", 1, "fp32", 2, 32)
    every = estimate("tiny", "none", 1, "fp32", 2, 32, loss="answer_only", answer_tokens=64)
    assert (every.logits, every.activations, every.peak) == (full.logits, full.activations, full.peak)


def test_chunks_cover_every_position() -> None:
    """chunked projects ceil(x / 8) positions at once: 2 x 33 = 66 positions, 9 rows (4·9·1024 B in fp32)."""
    assert estimate("tiny", "none", 1, "fp32", 2, 33, loss="chunked").logits == 4 * 9 * 1024
    assert memory.logits_rows("chunked", 2, 33) == 9 and memory.logits_rows("chunked", 2, 32) == 8


def test_the_defaults_are_bloom_560m_on_one_gpu_at_8_x_512_in_bf16() -> None:
    """What `estimate()` and activation_bytes assume unless told, and the smallest sequence the model accepts."""
    assert estimate() == estimate("bloom-560m", "full_shard", 1, "bf16", 8, 512, device="cuda")
    tiny = memory.get_arch("tiny")
    assert activation_bytes(tiny, 2, 32) == activation_bytes(tiny, 2, 32, "bf16", False, "none")
    assert estimate("tiny", "none", 1, "fp32", 1, 1).peak > 0                  # one token: a sequence still
    with pytest.raises(ValueError) as e:
        estimate("tiny", "none", 1, offload=True)
    assert str(e.value) == "offload needs an FSDP strategy"                   # one process cannot offload either
    with pytest.raises(ValueError) as e:
        memory.get_arch("gpt-5")
    assert str(e.value).startswith("unknown model profile 'gpt-5'; use one of bloom-560m, bloom-1b1, bloom-1b7, ")
