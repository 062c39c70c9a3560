"""EM/F1 by greedy generation, on whatever the model is at the time: plain, DDP or sharded FSDP2."""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase

from workshop.training.data import QAExample, prompt_ids
from workshop.training.squad_metrics import squad_scores


@torch.no_grad()
def generate_answers(model: torch.nn.Module, tok: PreTrainedTokenizerBase, examples: list[QAExample],
                     max_length: int, max_new_tokens: int, device: torch.device, synced: bool,
                     batch_size: int = 8) -> list[str]:
    """Greedy answers, one per example. `synced` keeps every FSDP rank stepping together until all
    ranks are done (each forward all-gathers parameters, so no rank may stop early)."""
    was_training = model.training
    model.eval()
    answers: list[str] = []
    for start in range(0, len(examples), batch_size):
        batch = [prompt_ids(tok, ex, max_length - max_new_tokens) for ex in examples[start:start + batch_size]]
        width = max(map(len, batch))
        # left padding, so every prompt ends where generation starts
        ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in batch], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, synced_gpus=synced)
        for row in out[:, width:]:
            text = tok.decode(row, skip_special_tokens=True)
            answers.append(text.strip().split("\n")[0].strip())
    model.train(was_training)
    return answers


def em_f1(model: torch.nn.Module, tok: PreTrainedTokenizerBase, examples: list[QAExample], max_length: int,
          max_new_tokens: int, device: torch.device, synced: bool) -> dict[str, float]:
    preds = generate_answers(model, tok, examples, max_length, max_new_tokens, device, synced)
    scores = squad_scores(preds, [list(ex.answers) for ex in examples])
    return {"exact_match": round(scores["exact_match"], 2), "f1": round(scores["f1"], 2),
            "examples": [{"id": ex.id, "prediction": p} for ex, p in zip(examples[:5], preds[:5])]}
