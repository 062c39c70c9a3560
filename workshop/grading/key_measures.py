"""The answer key's measured figures (notebook 01): torch's sizes of a recipe's dtypes and the loss of a freshly
initialised BLOOM, by a real forward pass. Run where the reference table is written (`python -m
workshop.grading.references --write`, which stores what the hidden tests ask) and for any case the table lacks
(`workshop.grading.answer_key`): apart from both, so that neither imports the other (tests/test_layout.py) and a
graded kernel imports torch and transformers only for a case the table lacks.
"""

from __future__ import annotations

from typing import Any

# What each stored part of the model state is kept in, per recipe (a gradient has its parameter's dtype): torch's
# dtype names.
RECIPES: dict[str, dict[str, str]] = {
    # the Trainer with bf16 autocast: fp32 weights (they are the master copy), fp32 gradients, fp32 AdamW
    "trainer": {"weights": "float32", "gradients": "float32", "adam_exp_avg": "float32", "adam_exp_avg_sq": "float32"},
    # bf16 weights and gradients, an fp32 master copy in the optimizer, 8-bit AdamW moments (scales ignored)
    "eight_bit": {"weights": "bfloat16", "gradients": "bfloat16", "master_weights": "float32",
                  "adam_exp_avg": "uint8", "adam_exp_avg_sq": "uint8"},
}
BLOOM_VOCAB = 250_880        # bigscience/bloom-560m's config.json
# The blocks of the untrained model the key measures: BLOOM-560M's vocabulary on small blocks, a few seconds on
# a CPU. Notebook 01's text names them (tests/test_answer_key.py): BLOOM-560M's own blocks initialise to ~12.64,
# these to ~ln V = 12.43, both inside the check's 3 %.
UNTRAINED_BLOCKS = dict(hidden_size=64, n_layer=2, n_head=4)


def recipe_bytes(recipe: str) -> dict[str, int]:
    """Stored bytes per parameter of each part of `recipe`, from the dtypes' own element sizes."""
    import torch

    return {part: torch.empty((), dtype=getattr(torch, name)).element_size()
            for part, name in RECIPES[recipe].items()}


def untrained_loss(tok: Any, examples: list[Any], max_length: int, vocab: int = BLOOM_VOCAB, seed: int = 0) -> float:
    """Cross-entropy on the answer tokens of `examples` of a freshly initialised BLOOM with `vocab` entries, by a
    real forward pass (`workshop.grading.answer_key.untrained_loss_measured` says why the blocks are small)."""
    return _answer_loss(_untrained_bloom(tok, vocab, seed), tok, examples, max_length)


def _untrained_bloom(tok: Any, vocab: int = BLOOM_VOCAB, seed: int = 0) -> Any:
    """A freshly initialised BloomForCausalLM of `vocab` entries on `UNTRAINED_BLOCKS`, in eval mode."""
    import torch
    from transformers import BloomForCausalLM

    from workshop.training import models

    torch.manual_seed(seed)
    return BloomForCausalLM(models.bloom_config(dict(vocab_size=vocab, **UNTRAINED_BLOCKS), tok)).eval()


def _answer_loss(model: Any, tok: Any, examples: list[Any], max_length: int) -> float:
    """The model's causal-LM loss over the labelled (answer) tokens of `examples`, weighted by their count.

    The same loss as `model(input_ids, labels=...)`, with the vocabulary's logits computed only where a label
    is: an answer is a few tokens of a prompt of up to `max_length`, and the full head over every position (a
    250,880-wide row each) and its cross-entropy were two thirds of a graded 01 kernel's forward pass
    (tests/test_answer_key.py compares the two)."""
    import torch

    from workshop.training.data import IGNORE_INDEX, encode_for_training

    total, count = 0.0, 0
    with torch.no_grad():
        for ex in examples:
            row = encode_for_training(tok, ex, max_length)
            targets = torch.tensor(row["labels"][1:])               # position i predicts token i + 1
            scored = (targets != IGNORE_INDEX).nonzero().squeeze(1)
            hidden = model.transformer(input_ids=torch.tensor([row["input_ids"]])).last_hidden_state[0, scored]
            logits = model.lm_head(hidden).float()
            total += float(torch.nn.functional.cross_entropy(logits, targets[scored], reduction="sum"))
            count += len(scored)
    return total / count
