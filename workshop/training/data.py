"""SQuAD v1.1 as causal-LM fine-tuning data: the prompt is masked, the answer is learned.

Each example becomes `Question: … Context: … Answer:` followed by ` <answer></s>`. Only the answer
and EOS carry labels; every prompt position is -100, so the loss measures answering, not copying the
context. Batches are padded dynamically to their longest example (the seed padded every example to
512 tokens, which wastes most of each batch on padding).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

IGNORE_INDEX = -100
FIXTURE_DIR = "assets/squad_fixture"


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    context: str
    answers: tuple[str, ...]


def flatten_squad(doc: dict[str, Any]) -> list[QAExample]:
    """SQuAD's nested JSON (data → paragraphs → qas) as a flat list, in file order."""
    out = []
    for article in doc["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                answers = tuple(dict.fromkeys(a["text"] for a in qa["answers"]))
                out.append(QAExample(qa["id"], qa["question"], para["context"], answers))
    return out


def fixture_path(split: str) -> Path:
    return Path(str(resources.files("workshop").joinpath(FIXTURE_DIR, f"{split}.json")))


def load_examples(dataset: str, split: str, size: int) -> list[QAExample]:
    """The first `size` examples of a split ('train' or 'dev'); an error if the split is smaller."""
    if dataset == "fixture":
        examples = flatten_squad(json.loads(fixture_path(split).read_text()))
    else:
        from datasets import load_dataset

        hf_split = "train" if split == "train" else "validation"
        ds = load_dataset("rajpurkar/squad", split=f"{hf_split}[:{size}]")
        examples = [QAExample(r["id"], r["question"], r["context"], tuple(dict.fromkeys(r["answers"]["text"])))
                    for r in ds]
    if len(examples) < size:
        from workshop.training.config import ConfigError

        field = "train_size" if split == "train" else "eval_size"
        raise ConfigError(field, f"asks for {size} examples but the {dataset} {split} split has {len(examples)}",
                          f"set {field}={len(examples)} or fewer")
    return examples[:size]


def prompt_ids(tok: PreTrainedTokenizerBase, ex: QAExample, budget: int) -> list[int]:
    """Token ids of the prompt, shortening the context (never the question) to fit `budget` tokens."""
    head = tok(f"Question: {ex.question}\nContext:", add_special_tokens=False)["input_ids"]
    context = tok(f" {ex.context}", add_special_tokens=False)["input_ids"]
    tail = tok("\nAnswer:", add_special_tokens=False)["input_ids"]
    room = budget - len(head) - len(tail)
    if room < 0:
        raise ValueError(f"question {ex.id} alone needs {len(head) + len(tail)} tokens; raise max_length")
    return head + context[:room] + tail


def encode_for_training(tok: PreTrainedTokenizerBase, ex: QAExample, max_length: int) -> dict[str, list[int]]:
    """input_ids = prompt + answer + EOS; labels = -100 over the prompt, the answer ids after it."""
    answer = tok(f" {ex.answers[0]}", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    answer = answer[: max_length // 2]
    prompt = prompt_ids(tok, ex, max_length - len(answer))
    return {"input_ids": prompt + answer, "labels": [IGNORE_INDEX] * len(prompt) + answer}


class EncodedDataset(torch.utils.data.Dataset):
    """Pre-tokenized examples; the Trainer sees only input_ids and labels."""

    def __init__(self, tok: PreTrainedTokenizerBase, examples: list[QAExample], max_length: int) -> None:
        self.examples = examples
        self.rows = [encode_for_training(tok, ex, max_length) for ex in examples]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        return self.rows[i]


# The batch key under which the collator hands the batch's non-pad token count (a Python int) to the
# trainer: counted here, on the host, so no training step sums a mask on the GPU (a device sync) to
# count tokens. The trainer takes it out before the model sees the batch (workshop.training.metrics.StepCounter).
HOST_TOKENS = "workshop_host_tokens"


@dataclass
class DynamicPaddingCollator:
    """Pads a batch to its own longest example (or to `pad_to`, the seed recipe's fixed width):
    pad id in input_ids, 0 in attention_mask, -100 in labels; and counts its non-pad tokens (HOST_TOKENS)."""

    pad_token_id: int
    pad_to: int = 0

    def __call__(self, rows: list[dict[str, list[int]]]) -> dict[str, Any]:
        width = max(self.pad_to, max(len(r["input_ids"]) for r in rows))
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            n = len(r["input_ids"])
            ids[i, :n] = torch.tensor(r["input_ids"])
            labels[i, :n] = torch.tensor(r["labels"])
            mask[i, :n] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": labels,
                HOST_TOKENS: sum(len(r["input_ids"]) for r in rows)}
