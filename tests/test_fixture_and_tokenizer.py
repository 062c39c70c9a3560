"""The offline SQuAD fixture and the offline BLOOM-shaped tokenizer."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
from transformers import PreTrainedTokenizerFast

from workshop.training.tokenizer import load_offline_tokenizer

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DIR = ROOT / "workshop" / "assets" / "squad_fixture"
TOKENIZER_JSON = ROOT / "workshop" / "assets" / "tokenizer" / "tokenizer.json"

N_TRAIN_QUESTIONS = 50
N_DEV_QUESTIONS = 15
N_PARAGRAPHS = 15
VOCAB_SIZE = 800


def _load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(split: str) -> dict:
    return json.loads((FIXTURE_DIR / f"{split}.json").read_text(encoding="utf-8"))


def _paragraphs(split: str) -> list[dict]:
    return [p for article in _load(split)["data"] for p in article["paragraphs"]]


def _qas(split: str) -> list[tuple[str, dict]]:
    return [(p["context"], qa) for p in _paragraphs(split) for qa in p["qas"]]


def _all_fixture_texts() -> list[str]:
    texts = []
    for split in ("train", "dev"):
        for p in _paragraphs(split):
            texts.append(p["context"])
            for qa in p["qas"]:
                texts.append(qa["question"])
                texts.extend(a["text"] for a in qa["answers"])
    return texts


# ---------------------------------------------------------------- fixture


@pytest.mark.parametrize("split", ["train", "dev"])
def test_fixture_is_squad_v11_shaped(split: str) -> None:
    data = _load(split)
    assert data["version"] == "1.1"
    for article in data["data"]:
        assert isinstance(article["title"], str) and article["title"]
        for p in article["paragraphs"]:
            assert isinstance(p["context"], str)
            for qa in p["qas"]:
                assert set(qa) == {"id", "question", "answers"}
                for answer in qa["answers"]:
                    assert set(answer) == {"text", "answer_start"}
                    assert isinstance(answer["answer_start"], int)


def test_fixture_sizes() -> None:
    assert len(_qas("train")) == N_TRAIN_QUESTIONS
    assert len(_qas("dev")) == N_DEV_QUESTIONS
    assert len(_paragraphs("train")) + len(_paragraphs("dev")) == N_PARAGRAPHS
    for split in ("train", "dev"):
        for p in _paragraphs(split):
            assert 300 <= len(p["context"]) <= 700
        path = FIXTURE_DIR / f"{split}.json"
        assert path.stat().st_size < 100_000


@pytest.mark.parametrize("split", ["train", "dev"])
def test_every_answer_start_points_at_its_text(split: str) -> None:
    n_answers = 0
    for context, qa in _qas(split):
        assert qa["answers"], qa["id"]
        for answer in qa["answers"]:
            start, text = answer["answer_start"], answer["text"]
            assert 0 <= start < len(context)
            assert context[start : start + len(text)] == text, qa["id"]
            assert 1 <= len(text.split()) <= 5, text
            n_answers += 1
    assert n_answers >= len(_qas(split))


def test_answer_counts_per_split() -> None:
    assert all(len(qa["answers"]) == 1 for _, qa in _qas("train"))
    dev_counts = [len(qa["answers"]) for _, qa in _qas("dev")]
    assert all(1 <= n <= 3 for n in dev_counts)
    assert sum(n > 1 for n in dev_counts) >= 5  # alternatives, as in the real dev set


def test_question_ids_are_unique_across_splits() -> None:
    ids = [qa["id"] for split in ("train", "dev") for _, qa in _qas(split)]
    assert len(ids) == N_TRAIN_QUESTIONS + N_DEV_QUESTIONS
    assert len(set(ids)) == len(ids)


def test_train_and_dev_contexts_do_not_overlap() -> None:
    train = {p["context"] for p in _paragraphs("train")}
    dev = {p["context"] for p in _paragraphs("dev")}
    assert not train & dev


def test_fixture_files_are_reproducible_from_the_build_script() -> None:
    built = _load_script("build_fixture").build()
    for split in ("train", "dev"):
        on_disk = (FIXTURE_DIR / f"{split}.json").read_text(encoding="utf-8")
        assert on_disk == json.dumps(built[split], indent=1, ensure_ascii=False) + "\n"


# -------------------------------------------------------------- tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return load_offline_tokenizer()


def test_tokenizer_type_and_vocab(tokenizer: PreTrainedTokenizerFast) -> None:
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    assert len(tokenizer) == VOCAB_SIZE
    assert tokenizer.model_input_names == ["input_ids", "attention_mask"]


def test_special_tokens_are_0_to_3(tokenizer: PreTrainedTokenizerFast) -> None:
    assert tokenizer.unk_token_id == 0
    assert tokenizer.bos_token_id == 1
    assert tokenizer.eos_token_id == 2
    assert tokenizer.pad_token_id == 3
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3]) == ["<unk>", "<s>", "</s>", "<pad>"]


def test_uses_bloom_pre_tokenizer() -> None:
    spec = json.loads(TOKENIZER_JSON.read_text(encoding="utf-8"))
    split, byte_level = spec["pre_tokenizer"]["pretokenizers"]
    assert split["type"] == "Split"
    assert split["pattern"] == {"Regex": " ?[^(\\s|[.,!?…。，、।۔،])]+"}
    assert split["behavior"] == "Isolated"
    assert byte_level == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    assert spec["decoder"]["type"] == "ByteLevel"


def test_round_trips_all_fixture_text(tokenizer: PreTrainedTokenizerFast) -> None:
    texts = _all_fixture_texts()
    assert len(texts) > 100
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        assert tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids) == text


def test_round_trips_prompt_and_unseen_text(tokenizer: PreTrainedTokenizerFast) -> None:
    prompt = "Question: Who built it?\nContext: It was built , in 1947 .\nAnswer: Bell Labs"
    assert tokenizer.decode(tokenizer(prompt)["input_ids"]) == prompt
    # Byte-level BPE covers any Unicode text, even characters never seen in training.
    unseen = "Zürich — 東京 🙂  tabs\tand  spaces"
    ids = tokenizer(unseen)["input_ids"]
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == unseen


def test_prompt_words_are_single_tokens(tokenizer: PreTrainedTokenizerFast) -> None:
    assert tokenizer.tokenize("Question:") == ["Question:"]
    assert tokenizer.tokenize(" Context:") == ["ĠContext:"]
    assert tokenizer.tokenize(" Answer:") == ["ĠAnswer:"]


def test_adds_no_special_tokens_by_default(tokenizer: PreTrainedTokenizerFast) -> None:
    ids = tokenizer("Mount Everest")["input_ids"]
    assert not set(ids) & {0, 1, 2, 3}  # like BLOOM: no automatic <s>/</s>


def test_pads_on_the_right(tokenizer: PreTrainedTokenizerFast) -> None:
    short, long = "Nile", "The Nile flows north into the Mediterranean Sea."
    batch = tokenizer([short, long], padding=True)
    n_short = len(tokenizer(short)["input_ids"])
    n_long = len(tokenizer(long)["input_ids"])
    assert n_long > n_short
    row = batch["input_ids"][0]
    assert len(row) == n_long
    assert row[:n_short] == tokenizer(short)["input_ids"]
    assert row[n_short:] == [tokenizer.pad_token_id] * (n_long - n_short)
    assert batch["attention_mask"][0] == [1] * n_short + [0] * (n_long - n_short)
    assert batch["attention_mask"][1] == [1] * n_long


def test_tokenizer_file_is_reproducible_from_the_build_script() -> None:
    module = _load_script("build_tokenizer")
    rebuilt = json.loads(module.build_tokenizer().to_str())
    on_disk = json.loads(TOKENIZER_JSON.read_text(encoding="utf-8"))
    assert rebuilt["model"]["vocab"] == on_disk["model"]["vocab"]
    assert rebuilt["model"]["merges"] == on_disk["model"]["merges"]


def test_tokenizing_and_encoding_an_example_imports_no_torch() -> None:
    """Notebook 01's first cells (`from workshop.training import data, models`, the tokenizer, one example encoded)
    run in a fresh process without importing torch (issue 51: ~1 CPU-s of every kernel that imports them; torch
    loads where a batch or a model is made)."""
    import subprocess
    import sys

    code = ("import sys\nfrom workshop.training import data, models\ntok = models.load_tokenizer('tiny')\n"
            "row = data.encode_for_training(tok, data.load_examples('fixture', 'train', 1)[0], 64)\n"
            "print(len(row['input_ids']) == len(row['labels']) > 0, sorted(m for m in ('torch', 'transformers.modeling_utils') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2] == "True []", proc.stdout[-2000:]
