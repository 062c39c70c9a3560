"""Train the workshop's small offline byte-level BPE tokenizer.

Why: BLOOM's real tokenizer (250k vocab) lives on the Hugging Face Hub, which
is not reachable here. For tests and CPU demos we train a tiny stand-in on the
fixture text with the same *shape* as BLOOM's tokenizer: the same Split
pre-tokenizer regex followed by ByteLevel(use_regex=False), a ByteLevel
decoder, and the specials <unk>=0, <s>=1, </s>=2, <pad>=3 in BLOOM's order.
Byte-level BPE can encode any string, so nothing is ever mapped to <unk>.

Reads workshop/assets/squad_fixture/{train,dev}.json (build them first with
scripts/build_fixture.py) and writes workshop/assets/tokenizer/tokenizer.json.
Training is deterministic: re-running gives the same file.

Usage:  python scripts/build_tokenizer.py
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DIR = ROOT / "workshop" / "assets" / "squad_fixture"
OUT_PATH = ROOT / "workshop" / "assets" / "tokenizer" / "tokenizer.json"

VOCAB_SIZE = 800
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]  # ids 0, 1, 2, 3 as in BLOOM
PROMPT_WORDS = ["Question:", "Context:", "Answer:"]
# The pre-tokenizer regex of bigscience/bloom's tokenizer.json (Split, "isolated").
BLOOM_SPLIT_REGEX = " ?[^(\\s|[.,!?…。，、।۔،])]+"


def fixture_texts() -> Iterator[str]:
    """Yield every context, question and answer of both splits, in file order."""
    for split in ("train", "dev"):
        data = json.loads((FIXTURE_DIR / f"{split}.json").read_text(encoding="utf-8"))
        for article in data["data"]:
            for paragraph in article["paragraphs"]:
                yield paragraph["context"]
                for qa in paragraph["qas"]:
                    yield qa["question"]
                    for answer in qa["answers"]:
                        yield answer["text"]


def training_corpus() -> list[str]:
    """Fixture text plus the prompt words the fine-tuning template uses.

    The prompt words are repeated once per question (as they would be in the
    formatted training examples), both at line start and after a space, so
    that BPE learns them as whole tokens.
    """
    texts = list(fixture_texts())
    n_questions = sum(1 for t in texts if t.endswith("?"))
    prompt_lines = [" ".join(PROMPT_WORDS)] + PROMPT_WORDS
    return texts + prompt_lines * max(n_questions, 1)


def build_tokenizer() -> Tokenizer:
    """Create and train the BLOOM-shaped byte-level BPE tokenizer."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(pattern=Regex(BLOOM_SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_corpus(), trainer=trainer)
    return tokenizer


def validate(tokenizer: Tokenizer) -> None:
    """Fail loudly if the trained tokenizer misses any property we rely on."""
    for i, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != i:
            raise ValueError(f"{token} has id {tokenizer.token_to_id(token)}, expected {i}")
    for text in training_corpus():
        ids = tokenizer.encode(text).ids
        if tokenizer.decode(ids) != text:
            raise ValueError(f"round trip failed for {text[:60]!r}")
        if 0 in ids:
            raise ValueError(f"<unk> produced for {text[:60]!r}")


def main() -> int:
    tokenizer = build_tokenizer()
    validate(tokenizer)
    OUT_PATH.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(OUT_PATH), pretty=True)
    print(f"wrote {OUT_PATH} (vocab {tokenizer.get_vocab_size()}, {OUT_PATH.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
