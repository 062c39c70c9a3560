"""Offline stand-in for BLOOM's tokenizer.

Why: this workshop runs with no access to the Hugging Face Hub, so
``AutoTokenizer.from_pretrained("bigscience/bloom-560m")`` cannot download
BLOOM's tokenizer. Instead we ship a tiny byte-level BPE (see
``scripts/build_tokenizer.py``) trained on the SQuAD fixture. It mirrors
BLOOM's tokenizer in everything the training code relies on: the same
pre-tokenizer, byte-level decoding (any text round-trips), the special tokens
``<unk>``=0, ``<s>``=1, ``</s>``=2, ``<pad>``=3, and right padding. Only its
vocabulary (~800 tokens instead of ~250k) differs.
"""

from __future__ import annotations

from importlib.resources import as_file, files

from transformers import PreTrainedTokenizerFast

_TOKENIZER_RESOURCE = ("assets", "tokenizer", "tokenizer.json")


def load_offline_tokenizer() -> PreTrainedTokenizerFast:
    """Load the bundled BLOOM-shaped tokenizer (no network access needed).

    The file is found with importlib.resources so this also works when the
    package is installed rather than run from a source checkout.
    """
    resource = files("workshop").joinpath(*_TOKENIZER_RESOURCE)
    with as_file(resource) as path:
        return PreTrainedTokenizerFast(
            tokenizer_file=str(path),
            bos_token="<s>",
            eos_token="</s>",
            unk_token="<unk>",
            pad_token="<pad>",
            model_input_names=["input_ids", "attention_mask"],
            padding_side="right",
            # Keep decode() an exact inverse of encode(): do not "clean up"
            # spaces before punctuation.
            clean_up_tokenization_spaces=False,
        )
