"""SQuAD v1.1 as causal-LM fine-tuning data: the prompt is masked, the answer is learned.

Each example becomes `Question: … Context: … Answer:` followed by ` <answer></s>`. Only the answer
and EOS carry labels; every prompt position is -100, so the loss measures answering, not copying the
context. Batches are padded dynamically to their longest example (the seed padded every example to
512 tokens, which wastes most of each batch on padding).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # torch and transformers load where a batch is made: notebook 01's first cells only tokenize
    from transformers import PreTrainedTokenizerBase

IGNORE_INDEX = -100
FIXTURE_DIR = "assets/squad_fixture"
SQUAD_DIR = "workshop/squad-v1.1"                 # the course's copy of SQuAD v1.1, under $HF_HOME


@dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    context: str
    answers: tuple[str, ...]


def squad_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """SQuAD v1.1's nested JSON (data → paragraphs → qas) as the Hub dataset's rows (`rajpurkar/squad`:
    id, title, context, question, answers {text, answer_start}), in file order."""
    return [{"id": qa["id"], "title": article.get("title", ""), "context": para["context"], "question": qa["question"],
             "answers": {"text": [a["text"] for a in qa["answers"]],
                         "answer_start": [int(a.get("answer_start", -1)) for a in qa["answers"]]}}
            for article in doc["data"] for para in article["paragraphs"] for qa in para["qas"]]


def example(row: dict[str, Any]) -> QAExample:
    """One SQuAD row as the course's example (answers without repeats, in order)."""
    return QAExample(row["id"], row["question"], row["context"], tuple(dict.fromkeys(row["answers"]["text"])))


def flatten_squad(doc: dict[str, Any]) -> list[QAExample]:
    """SQuAD's nested JSON (data → paragraphs → qas) as a flat list, in file order."""
    return [example(r) for r in squad_rows(doc)]


def fixture_path(split: str) -> Path:
    return Path(str(resources.files("workshop").joinpath(FIXTURE_DIR, f"{split}.json")))


def hf_home(env: dict[str, str] | None = None) -> Path:
    """$HF_HOME, else huggingface_hub's default (~/.cache/huggingface, under $XDG_CACHE_HOME if set)."""
    env = os.environ if env is None else env
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser()
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "huggingface"


def squad_dir(home: Path | None = None) -> Path:
    """The course's saved copy of SQuAD v1.1 (splits `train` and `validation`, the Hub's columns), written
    by `workshop prefetch` (workshop/training/hf_cache.py)."""
    return (home or hf_home()) / SQUAD_DIR


def load_examples(dataset: str, split: str, size: int) -> list[QAExample]:
    """The first `size` examples of a split ('train' or 'dev'); an error if the split is smaller."""
    if dataset == "fixture":
        examples = flatten_squad(json.loads(fixture_path(split).read_text()))
    else:
        examples = _squad_examples(split, size)
    if len(examples) < size:
        from workshop.training.config import ConfigError

        field = "train_size" if split == "train" else "eval_size"
        raise ConfigError(field, f"asks for {size} examples but the {dataset} {split} split has {len(examples)}",
                          f"set {field}={len(examples)} or fewer")
    return examples[:size]


def _squad_examples(split: str, size: int) -> list[QAExample]:
    """SQuAD v1.1 from the course's copy in the shared cache (`workshop prefetch` wrote it), read with
    `load_from_disk`, which only reads: `load_dataset` takes lock files beside the cached data even
    offline, and the shared cache is read-only for students. Without the copy, a machine with internet
    loads it from the Hub; an offline one (a compute node) is told what to run."""
    hf_split = "train" if split == "train" else "validation"
    saved = squad_dir()
    if saved.is_dir():
        from datasets import load_from_disk

        ds = load_from_disk(str(saved))[hf_split]
        rows = ds.select(range(min(size, len(ds))))
    elif os.environ.get("HF_DATASETS_OFFLINE", "") not in ("", "0") or os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        from workshop.training.config import ConfigError

        raise ConfigError("dataset", f"SQuAD v1.1 is not in the shared cache (no {saved}) and this machine is offline",
                          "run `workshop prefetch --profile <site>` on a login node (it fills the profile's hf_home), "
                          "or use dataset=fixture")
    else:
        from datasets import load_dataset

        rows = load_dataset("rajpurkar/squad", split=f"{hf_split}[:{size}]")
    return [example(r) for r in rows]


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


class EncodedDataset:
    """Pre-tokenized examples; the Trainer sees only input_ids and labels.

    A map-style dataset (`len` and indexing) is all torch's DataLoader and the Trainer ask of it; it is not a
    `torch.utils.data.Dataset` subclass so that importing this module does not import torch (issue 51: notebook
    01's kernel imports it in its first cells, and a graded kernel whose checks never build a model need not)."""

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
        import torch

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
