"""Model profiles: the real BLOOM-560M from the Hub, its exact shapes with random weights, and a tiny one.

`bloom-560m-random` has the same shapes, memory and speed as the real model, so a GPU benchmark or
a memory-model check needs no Hub access. `tiny` is the offline default: the same architecture
class, small enough that the whole course runs on two CPU cores in minutes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the model classes cost ~2 s of import, torch ~1 s: a notebook that only tokenizes skips them
    import torch
    from transformers import BloomConfig, PreTrainedModel, PreTrainedTokenizerBase

HUB_ID = "bigscience/bloom-560m"

# The shapes of bigscience/bloom-560m (its config.json): 559,214,592 parameters.
BLOOM_560M = dict(vocab_size=250880, hidden_size=1024, n_layer=24, n_head=16)
# The shapes of bigscience/bloom-7b1 (its config.json): 7,069,016,064 parameters. Known here so that a dry run
# (workshop.training.dryrun) builds it on `meta` without the Hub; a 7b1 job is beyond the course's GPUs.
BLOOM_7B1 = dict(vocab_size=250880, hidden_size=4096, n_layer=30, n_head=32)
# A few hundred thousand parameters; vocab covers the offline tokenizer.
TINY = dict(vocab_size=1024, hidden_size=96, n_layer=2, n_head=4)


@dataclass(frozen=True)
class ModelProfile:
    name: str
    source: str  # "hub", "random" or "path"
    shapes: dict | None = None
    hub_id: str = HUB_ID   # the Hub's name of a "hub" profile

    @property
    def needs_hub(self) -> bool:
        return self.source == "hub"


PROFILES = {
    "tiny": ModelProfile("tiny", "random", TINY),
    "bloom-560m-random": ModelProfile("bloom-560m-random", "random", BLOOM_560M),
    "bloom-560m": ModelProfile("bloom-560m", "hub", BLOOM_560M),
    "bloom-7b1-random": ModelProfile("bloom-7b1-random", "random", BLOOM_7B1),
    "bloom-7b1": ModelProfile("bloom-7b1", "hub", BLOOM_7B1, "bigscience/bloom-7b1"),
}
ALIASES = {HUB_ID: "bloom-560m", "bigscience/bloom-7b1": "bloom-7b1"}


def resolve_profile(name: str) -> ModelProfile:
    """The profile for a config's `model` field; a local folder with config.json is a 'path' profile."""
    name = ALIASES.get(name, name)
    if name in PROFILES:
        return PROFILES[name]
    if (Path(name) / "config.json").is_file():
        return ModelProfile(name, "path")
    from workshop.training.config import ConfigError

    raise ConfigError("model", f"unknown model {name!r}",
                      f"use one of {', '.join(PROFILES)} or a local folder holding a saved model")


def bloom_config(shapes: dict, tokenizer: PreTrainedTokenizerBase | None = None) -> BloomConfig:
    from transformers import BloomConfig

    cfg = BloomConfig(**shapes, hidden_dropout=0.0, attention_dropout=0.0)
    if tokenizer is not None:
        cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id = (
            tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
    return cfg


def load_tokenizer(model: str) -> PreTrainedTokenizerBase:
    """BLOOM's own tokenizer for the Hub model; otherwise the offline one committed to the repo."""
    profile = resolve_profile(model)
    if profile.source == "random":
        from workshop.training.tokenizer import load_offline_tokenizer

        return load_offline_tokenizer()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(profile.hub_id if profile.needs_hub else profile.name)
    tok.padding_side = "right"
    return tok


def build_model(model: str, tokenizer: PreTrainedTokenizerBase, seed: int) -> PreTrainedModel:
    """The model in fp32 on CPU, initialised identically on every rank (same seed) before sharding."""
    import torch
    from transformers import BloomForCausalLM

    profile = resolve_profile(model)
    torch.manual_seed(seed)
    if profile.source == "random":
        cfg = bloom_config(profile.shapes, tokenizer)
        if len(tokenizer) > cfg.vocab_size:
            raise ValueError(f"tokenizer has {len(tokenizer)} tokens, model vocab is {cfg.vocab_size}")
        return BloomForCausalLM(cfg)
    source = profile.hub_id if profile.needs_hub else profile.name
    return BloomForCausalLM.from_pretrained(source, dtype=torch.float32)


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (tied embeddings counted once), as in the model card's 559M."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
