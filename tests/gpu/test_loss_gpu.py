"""The answer-only and chunked losses on CUDA: the same loss as the full one, and the logits' memory gone.

BLOOM-560M's shapes (random init), one micro-batch of 4 x 512 tokens with 8 answer positions per row,
forward and backward on the GPU. fp32 with TF32 off for the equality (bf16's rounding would hide a
wrong position); the allocator's peak of each setting for the drop. The expected drop is worked out
from the logits alone: the full loss holds b·s·V fp32 logits and cross-entropy's fp32 copy (8 B per
element) that the answer-only loss does not build; the allocator must show at least half of it.
Each figure is recorded before it is asserted (the tier's `figures`)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from workshop.training.loss import IGNORE_INDEX, model_loss

BATCH, SEQ, ANSWER = 4, 512, 8


def _step(model: torch.nn.Module, batch: dict, loss: str) -> tuple[float, int]:
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    value = model(**batch).loss if loss == "full" else model_loss(model, model.lm_head, batch, loss)
    value.backward()
    torch.cuda.synchronize()
    return value.item(), torch.cuda.max_memory_allocated()


def test_answer_only_and_chunked_equal_full_and_free_the_logits_on_cuda(figures: Any) -> None:
    from transformers import BloomConfig, BloomForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    cfg = BloomConfig(vocab_size=250880, hidden_size=1024, n_layer=24, n_head=16, hidden_dropout=0.0,
                      attention_dropout=0.0)
    model = BloomForCausalLM(cfg).cuda()
    ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ), device="cuda")
    labels = torch.full_like(ids, IGNORE_INDEX)
    for row in range(BATCH):   # answers at different places, as dynamic windows put them
        start = SEQ - ANSWER - 40 * row
        labels[row, start:start + ANSWER] = ids[row, start:start + ANSWER]
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    results = {loss: _step(model, batch, loss) for loss in ("full", "answer_only", "chunked")}
    logits_fp32 = 8 * BATCH * SEQ * cfg.vocab_size
    figures.put("loss_settings_cuda", full_logits_mb=logits_fp32 / 2**20,
                **{k: {"loss": v[0], "peak_mb": round(v[1] / 2**20, 1)} for k, v in results.items()})
    full_loss, full_peak = results["full"]
    for loss in ("answer_only", "chunked"):
        value, peak = results[loss]
        assert value == pytest.approx(full_loss, rel=1e-5), loss
        assert full_peak - peak >= logits_fp32 / 2, (loss, full_peak, peak)
