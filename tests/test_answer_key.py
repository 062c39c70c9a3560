"""The answer key of notebooks 01 to 03's predictions (workshop.course.answer_key) agrees with the figures
worked out by hand below, and a student's cell that calls it is flagged by the integrity scan."""

from __future__ import annotations

import math

import pytest

from workshop.course import answer_key, scan

BLOOM_560M = 559_214_592       # the model card's parameter count
BLOOM_7B1 = 7_069_016_064      # the model card's parameter count
GiB = 2**30


def test_the_recipes_bytes_are_the_dtypes_sizes() -> None:
    # fp32 is 4 bytes; bf16 2; an 8-bit moment 1
    assert answer_key.recipe_bytes("trainer") == {"weights": 4, "gradients": 4, "adam_exp_avg": 4, "adam_exp_avg_sq": 4}
    assert answer_key.recipe_bytes("eight_bit") == {"weights": 2, "gradients": 2, "master_weights": 4,
                                                    "adam_exp_avg": 1, "adam_exp_avg_sq": 1}
    # 80 GB / 16 B = 5 billion parameters; / 10 B = 8 billion
    assert answer_key.params_that_fit_b("trainer") == pytest.approx(5.0)
    assert answer_key.params_that_fit_b("eight_bit") == pytest.approx(8.0)


def test_an_untrained_bloom_charges_about_ln_of_its_vocabulary() -> None:
    from workshop.training import models
    from workshop.training.data import load_examples

    tok = models.load_tokenizer("tiny")
    examples = load_examples("fixture", "train", 2)
    measured = answer_key.untrained_loss_measured(tok, examples, 128)
    assert measured == pytest.approx(math.log(250_880), rel=0.03)   # p = 1/V for every token


def test_bloom_7b1_with_8_bit_adamw_by_hand() -> None:
    # 10 B per parameter sharded over 8, plus the tied embedding (250,880 x 4,096) and two blocks
    # (12h^2 + 13h = 201,379,840 each) gathered in bf16
    by_hand = (BLOOM_7B1 * 10 / 8 + 2 * (250_880 * 4_096 + 2 * 201_379_840)) / GiB
    assert answer_key.fsdp_state_gib("bloom-7b1", 8) == pytest.approx(by_hand, rel=1e-3)   # 10.89 GiB
    assert answer_key.fewest_gpus_for("bloom-7b1", 10) == 9     # 8 GPUs: 10.89 GiB; 9: 9.98 GiB


def test_the_8_gpu_node_sends_by_hand() -> None:
    # 2 micro-batches per step (64 / (8 x 4)); ring share 7/8; the embedding unit and root, 256,905,216
    # parameters, are not gathered again in backward; fp32 gradients for DDP, bf16 units for FSDP
    share, kept = 7 / 8, 256_905_216
    ddp = 2 * share * BLOOM_560M * 4 / 1e9
    sgo = (2 * share * BLOOM_560M + share * BLOOM_560M) * 2 / 1e9
    fs = (2 * share * (2 * BLOOM_560M - kept) + share * BLOOM_560M) * 2 / 1e9
    got = answer_key.node_sent_gb()
    assert got == pytest.approx({"ddp": ddp, "shard_grad_op": sgo, "full_shard": fs}, rel=1e-3)
    assert got["shard_grad_op"] < got["ddp"] < got["full_shard"]   # not the order of the text's 1-micro-batch example


@pytest.mark.parametrize("source", [
    "from workshop.course.answer_key import recipe_bytes\nx = recipe_bytes('eight_bit')",
    "from workshop.course import answer_key\nx = answer_key.node_sent_gb()",
    "def encode(tok, ex, n):\n    return data.EncodedDataset(tok, [ex], n)[0]",
])
def test_a_student_cell_that_calls_the_key_is_flagged(source: str) -> None:
    assert any("reference-only" in what for _, what in scan.findings(source, set(), set()))


def test_a_derivation_of_ones_own_is_not_flagged() -> None:
    assert scan.findings("import math\nuntrained_loss = math.log(250_880)\n"
                         "sent_gb = {'ddp': 2 * 7 / 8 * 559_214_592 * 4 / 1e9}", set(), set()) == []
