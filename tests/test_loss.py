"""The answer-only and chunked losses give the full loss's value and gradients (fp32, CPU).

The reference is the model's own forward with labels (Hugging Face's ForCausalLMLoss), which computes
logits at every position; the course's settings must agree with it to within float32 rounding. The
tolerances are measured: on the tiny model every difference was below 1e-5 absolute; on the
BLOOM-560M-shaped slice answer_only's tied-embedding gradient was bit-identical and chunked's differed by
2.5e-5 at most, for entries up to 0.785 (3.2e-5 relative: eight chunks add their weight gradients in
another order). The bounds leave room for that rounding without letting a wrong normalisation (a factor of
the answer share, >= 2x) or a missing position pass.
"""

from __future__ import annotations

import pytest
import torch
from transformers import BloomConfig, BloomForCausalLM

from workshop.training import data, models
from workshop.training.config import load_config
from workshop.training.errors import ConfigError
from workshop.training.loss import CHUNKS, IGNORE_INDEX, logits_positions, model_loss, shift_labels

LOSS_RTOL = 1e-5
GRAD_ATOL = 1e-5
SLICE_GRAD_RTOL = 1e-4   # of the largest gradient entry (BLOOM's vocabulary: sums over 250,880 rows)


def loss_and_grads(model: BloomForCausalLM, batch: dict, loss: str,
                   num_items: int | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    if loss == "full":
        kwargs = {"num_items_in_batch": torch.tensor(num_items)} if num_items is not None else {}
        value = model(**batch, **kwargs).loss
    else:
        value = model_loss(model, model.lm_head, batch, loss,
                           torch.tensor(num_items) if num_items is not None else None)
    value.backward()
    # no copy: zero_grad(set_to_none=True) above gives the next backward new tensors, never writes into these
    return value.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.fixture(scope="module")
def tiny() -> tuple[BloomForCausalLM, dict]:
    tok = models.load_tokenizer("tiny")
    model = models.build_model("tiny", tok, seed=0)
    rows = data.EncodedDataset(tok, data.load_examples("fixture", "train", 4), 256)
    batch = data.DynamicPaddingCollator(tok.pad_token_id)([rows[i] for i in range(4)])
    batch.pop(data.HOST_TOKENS)
    return model, batch


@pytest.mark.parametrize("loss", ["answer_only", "chunked"])
@pytest.mark.parametrize("num_items", [None, 57])
def test_tiny_model_loss_and_gradients_equal_the_full_loss(tiny, loss: str, num_items: int | None) -> None:  # noqa: ANN001
    model, batch = tiny
    ref, ref_grads = loss_and_grads(model, batch, "full", num_items)
    got, grads = loss_and_grads(model, batch, loss, num_items)
    assert got.item() == pytest.approx(ref.item(), rel=LOSS_RTOL)
    assert grads.keys() == ref_grads.keys()
    assert "transformer.word_embeddings.weight" in grads   # the tied lm_head's gradient lands here
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], rtol=0, atol=GRAD_ATOL, msg=name)


def test_the_answer_share_is_small_so_the_test_can_tell_the_settings_apart(tiny) -> None:  # noqa: ANN001
    _, batch = tiny
    answers = logits_positions(batch["labels"], "answer_only")
    # counted by hand from the definition: labels not -100, less the first column (no position predicts it)
    by_hand = sum(1 for row in batch["labels"].tolist() for t in row[1:] if t != IGNORE_INDEX)
    assert answers == by_hand
    assert 0 < answers < batch["labels"].numel() / 5
    assert logits_positions(batch["labels"], "full") == logits_positions(batch["labels"], "chunked") \
        == batch["labels"].numel()
    assert batch["labels"].numel() >= 2 * CHUNKS   # chunked really cuts the positions into several chunks


def test_a_window_without_answer_tokens_gives_zero_not_nan(tiny) -> None:  # noqa: ANN001
    model, batch = tiny
    empty = {**batch, "labels": torch.full_like(batch["labels"], IGNORE_INDEX)}
    for loss in ("answer_only", "chunked"):
        for num_items in (None, 0):
            value, grads = loss_and_grads(model, empty, loss, num_items)
            assert value.item() == 0.0
            assert all(torch.isfinite(g).all() and not g.any() for g in grads.values()), loss
    # one row of the batch without an answer in its window: the others' loss, as the full loss computes it
    partial = batch["labels"].clone()
    partial[0] = IGNORE_INDEX
    mixed = {**batch, "labels": partial}
    ref, ref_grads = loss_and_grads(model, mixed, "full")
    for loss in ("answer_only", "chunked"):
        got, grads = loss_and_grads(model, mixed, loss)
        assert got.item() == pytest.approx(ref.item(), rel=LOSS_RTOL)
        for name, g in grads.items():
            torch.testing.assert_close(g, ref_grads[name], rtol=0, atol=GRAD_ATOL, msg=name)


def test_shifted_labels_are_the_next_tokens() -> None:
    labels = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 7, 8]])
    assert shift_labels(labels).tolist() == [[IGNORE_INDEX, 7, 8, IGNORE_INDEX]]


def test_bloom_560m_shaped_slice_equal_loss_and_tied_gradient() -> None:
    """BLOOM-560M's vocabulary and width (250,880 x 1024), one block, 2 x 12 tokens: the tied
    embedding's 1 GB gradient agrees entry by entry."""
    torch.manual_seed(0)
    cfg = BloomConfig(vocab_size=250880, hidden_size=1024, n_layer=1, n_head=16, hidden_dropout=0.0,
                      attention_dropout=0.0)
    with torch.device("meta"):   # skip Hugging Face's init of 257 M values; BLOOM's own init scale, by hand
        model = BloomForCausalLM(cfg)
    model.to_empty(device="cpu")
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, cfg.initializer_range)
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.fill_(1.0)
                m.bias.zero_()
    model.tie_weights()
    assert model.lm_head.weight is model.transformer.word_embeddings.weight
    ids = torch.randint(0, cfg.vocab_size, (2, 12))
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 8:], labels[1, 5:9] = ids[0, 8:], ids[1, 5:9]   # answers of 4 tokens at different places
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    ref, ref_grads = loss_and_grads(model, batch, "full")
    inf = float("inf")    # the largest |entry|, reduced without a temporary of the embedding's 1 GB
    scales = {name: torch.linalg.vector_norm(g, inf).item() for name, g in ref_grads.items()}
    for loss in ("answer_only", "chunked"):
        got, grads = loss_and_grads(model, batch, loss)
        assert got.item() == pytest.approx(ref.item(), rel=LOSS_RTOL), loss
        assert grads.keys() == ref_grads.keys(), loss
        for name, g in grads.items():
            # every entry within the bound: the largest difference, in place (NaN, if any, fails the comparison
            # too), where assert_close makes several temporaries of the embedding's 1 GB
            worst = torch.linalg.vector_norm(g.sub_(ref_grads[name]), inf).item()
            assert worst <= SLICE_GRAD_RTOL * scales[name], f"{loss} {name}: {worst} > {SLICE_GRAD_RTOL} x max"
        del grads


def test_a_bad_loss_setting_names_the_field_and_the_fix() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(overrides={"loss": "answers"})
    assert e.value.field == "loss" and "answer_only" in str(e.value)
    assert load_config(overrides={"loss": "Answer-Only"}).loss == "answer_only"
    assert load_config().loss == "full"


def test_memory_model_logits_by_hand() -> None:
    """The logits tensor by the loss setting, worked out from its definition (positions x V x bytes):
    BLOOM-560M, bf16, a micro-batch of 8 x 512 with 8 answer positions per example."""
    from workshop.results import memory

    V = 250880
    full = memory.estimate("bloom-560m", "full_shard", 4, "bf16", 8, 512)
    answer = memory.estimate("bloom-560m", "full_shard", 4, "bf16", 8, 512, loss="answer_only", answer_tokens=64)
    chunked = memory.estimate("bloom-560m", "full_shard", 4, "bf16", 8, 512, loss="chunked")
    assert full.logits == 8 * 512 * V * 2
    assert answer.logits == 64 * V * 2
    assert chunked.logits == 512 * V * 2   # 4,096 positions in CHUNKS = 8 chunks
    # the settings change activations and the step's peak, never what FSDP shards
    for bd in (answer, chunked):
        assert (bd.params, bd.grads, bd.optimizer) == (full.params, full.grads, full.optimizer)
        assert bd.activations < full.activations and bd.peak < full.peak
    # the full loss's activations hold 10 B per logits element in 16-bit (bf16 logits, fp32 upcast, CE's copy)
    assert full.activations - answer.activations >= 10 * (8 * 512 - 64) * V * 0.95
    with pytest.raises(ValueError, match="answer_tokens"):
        memory.estimate("bloom-560m", "full_shard", 4, "bf16", 8, 512, loss="answer_only")
    assert CHUNKS == memory.CHUNKS


def test_explorer_shows_the_larger_micro_batch_a_small_loss_allows() -> None:
    from workshop.student.explorer import GPUS, explore

    full = explore(draw=False)
    answer = explore(draw=False, loss="answer_only", answer_length=8)
    assert answer.largest_batch_full == full.largest_batch
    for gpu in GPUS:
        assert answer.largest_batch[gpu] > 2 * full.largest_batch[gpu] > 0
        # the largest batch fits and one more does not, by the model's own figures
        b = answer.largest_batch[gpu]
        assert explore(draw=False, loss="answer_only", answer_length=8, batch_size=b).fits[gpu]
        assert not explore(draw=False, loss="answer_only", answer_length=8, batch_size=b + 1).fits[gpu]
