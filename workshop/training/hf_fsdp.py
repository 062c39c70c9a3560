"""Hugging Face's own FSDP spelling (`TrainingArguments(fsdp=..., fsdp_config=...)`) and what it asks for.

A student writes FSDP settings the way Hugging Face users do; the job passes them to
`TrainingArguments` as written. This module reads them the way transformers 5.x does
(`TrainingArguments._process_fsdp_args`), so the run knows what it must find applied, and it turns
what transformers would silently ignore or reject deep inside a job into a `ConfigError` at submit:
  - a key it does not read (`offload_params` is accelerate's name; transformers reads `cpu_offload`),
  - `fsdp_config` without `fsdp` (transformers drops it without a word),
  - FSDP1 (`version: 1`, `hybrid_shard`, `no_shard`): this course runs FSDP2 only,
  - words that contradict each other (`shard_grad_op` and `reshard_after_forward: true`).
No torch import: the config is checked in a notebook before anything is launched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from workshop.training.errors import ConfigError

# The fsdp_config keys transformers 5.x reads for FSDP2 (an `fsdp_` prefix is accepted and dropped).
FSDP_CONFIG_KEYS = ("version", "reshard_after_forward", "cpu_offload", "activation_checkpointing",
                    "transformer_layer_cls_to_wrap", "auto_wrap_policy", "min_num_params", "state_dict_type",
                    "cpu_ram_efficient_loading")
# Names from other APIs that transformers would ignore, and the key it reads instead.
MISNAMED_KEYS = {"offload_params": "cpu_offload", "offload": "cpu_offload", "cpu_offload_params": "cpu_offload",
                 "layer_cls_to_wrap": "transformer_layer_cls_to_wrap",
                 "transformer_cls_names_to_wrap": "transformer_layer_cls_to_wrap",
                 "sharding_strategy": "reshard_after_forward (true = FULL_SHARD, false = SHARD_GRAD_OP)"}
FSDP_WORDS = ("full_shard", "shard_grad_op", "offload", "auto_wrap")
FSDP1_WORDS = ("no_shard", "hybrid_shard", "hybrid_shard_zero2")
AUTO_WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
STATE_DICT_TYPES = ("SHARDED_STATE_DICT", "FULL_STATE_DICT")
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


@dataclass(frozen=True)
class FsdpRequest:
    """What a pair of fsdp / fsdp_config arguments asks the job to apply (FSDP2)."""

    reshard_after_forward: bool
    offload: bool
    activation_checkpointing: bool
    auto_wrap_policy: str
    layer_classes: tuple[str, ...] | None   # None: the model's `_no_split_modules` (transformers' default)

    @property
    def sharding(self) -> str:
        """The course's name for it (FSDP1's): FULL_SHARD reshards after forward, SHARD_GRAD_OP does not."""
        return "full_shard" if self.reshard_after_forward else "shard_grad_op"


def fsdp_enabled(fsdp: str) -> bool:
    return fsdp.strip().lower() not in ("", *_FALSE)


def fsdp_argument(fsdp: str) -> bool | str:
    """The value handed to `TrainingArguments(fsdp=...)`: True for a bare switch, else the words as written."""
    return True if fsdp.strip().lower() in _TRUE else fsdp.strip()


def _flag(key: str, value: Any) -> bool:
    """transformers reads these with `str_to_bool(str(value).lower())`: the same values pass here."""
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"fsdp_config.{key}", f"{value!r} is not true or false", f"write {key}: true or false")


def normalized_config(fsdp_config: Mapping[str, Any]) -> dict[str, Any]:
    """fsdp_config with transformers' `fsdp_` prefix dropped; unknown or misnamed keys raise."""
    out: dict[str, Any] = {}
    for raw_key, value in fsdp_config.items():
        key = raw_key[5:] if raw_key.startswith("fsdp_") else raw_key
        if key in MISNAMED_KEYS:
            raise ConfigError(f"fsdp_config.{raw_key}", "is not a key Hugging Face's TrainingArguments reads: "
                              "it would be ignored and the job would run without it",
                              f"write {MISNAMED_KEYS[key]} instead")
        if key not in FSDP_CONFIG_KEYS:
            raise ConfigError(f"fsdp_config.{raw_key}", "is not a key Hugging Face's TrainingArguments reads for "
                              "FSDP2 (it would be ignored)", f"use only {', '.join(FSDP_CONFIG_KEYS)}")
        out[key] = value
    return out


def parse(fsdp: str, fsdp_config: Mapping[str, Any]) -> FsdpRequest | None:
    """What `TrainingArguments(fsdp=fsdp, fsdp_config=fsdp_config)` would apply; None when FSDP is off."""
    if not fsdp_enabled(fsdp):
        if fsdp_config:
            raise ConfigError("fsdp_config", "is set but fsdp is off, so Hugging Face would ignore it without "
                              "a word", "also set fsdp=true (or fsdp='full_shard auto_wrap'), or remove fsdp_config")
        return None
    conf = normalized_config(fsdp_config)
    version = str(conf.get("version", 2)).strip()
    if version != "2":
        raise ConfigError("fsdp_config.version", f"{conf['version']!r}: FSDP1 is deprecated, and its strategies are "
                          "silently changed upstream (see workshop/training/fsdp_cpu.py)", "use version 2 (FSDP2)")
    words = [] if isinstance(fsdp_argument(fsdp), bool) else fsdp.lower().split()
    for word in words:
        if word in FSDP1_WORDS:
            raise ConfigError("fsdp", f"{word!r} exists only in FSDP1 (transformers raises ValueError with "
                              "version 2)", "for HYBRID_SHARD use sharding=hybrid_shard with hybrid_replicas=R "
                              "(FSDP2's 2-D mesh); NO_SHARD is sharding=ddp")
        if word not in FSDP_WORDS:
            raise ConfigError("fsdp", f"unknown option {word!r}", f"use true, or words from {' '.join(FSDP_WORDS)}")
    if "full_shard" in words and "shard_grad_op" in words:
        raise ConfigError("fsdp", "asks for both full_shard and shard_grad_op", "choose one")
    reshard = True
    if "shard_grad_op" in words:
        reshard = False
    if "reshard_after_forward" in conf:
        written = _flag("reshard_after_forward", conf["reshard_after_forward"])
        if ("full_shard" in words or "shard_grad_op" in words) and written != reshard:
            raise ConfigError("fsdp_config.reshard_after_forward", f"is {written}, but fsdp={fsdp!r} means "
                              f"reshard_after_forward={reshard}", "say it once: drop the strategy word from fsdp "
                              "or make the two agree")
        reshard = written
    offload = "offload" in words
    if "cpu_offload" in conf:
        written = _flag("cpu_offload", conf["cpu_offload"])
        if offload and not written:
            raise ConfigError("fsdp_config.cpu_offload", "is false, but fsdp contains 'offload'", "make them agree")
        offload = written
    checkpointing = _flag("activation_checkpointing", conf.get("activation_checkpointing", False))
    policy = str(conf.get("auto_wrap_policy", AUTO_WRAP_POLICIES[0]))
    if policy not in AUTO_WRAP_POLICIES:
        raise ConfigError("fsdp_config.auto_wrap_policy", f"unknown policy {policy!r}",
                          f"use one of {', '.join(AUTO_WRAP_POLICIES)}")
    if str(conf.get("state_dict_type", STATE_DICT_TYPES[0])) not in STATE_DICT_TYPES:
        raise ConfigError("fsdp_config.state_dict_type", f"{conf['state_dict_type']!r} is not an FSDP2 state dict",
                          f"use one of {', '.join(STATE_DICT_TYPES)}")
    classes = conf.get("transformer_layer_cls_to_wrap")
    if isinstance(classes, str):
        classes = [classes]
    if classes is not None and (not isinstance(classes, (list, tuple)) or not classes
                                or not all(isinstance(c, str) and c for c in classes)):
        raise ConfigError("fsdp_config.transformer_layer_cls_to_wrap", f"{classes!r} is not a list of class names",
                          "write the block class as a list, e.g. ['BloomBlock']")
    if classes is not None and policy != "TRANSFORMER_BASED_WRAP":
        raise ConfigError("fsdp_config.transformer_layer_cls_to_wrap", f"is ignored with auto_wrap_policy {policy}",
                          "remove it, or use auto_wrap_policy TRANSFORMER_BASED_WRAP")
    return FsdpRequest(reshard_after_forward=reshard, offload=offload, activation_checkpointing=checkpointing,
                       auto_wrap_policy=policy, layer_classes=tuple(classes) if classes is not None else None)


def reduce_in_fp32(accelerator: Any) -> str | None:
    """On an fp16 run under FSDP, make accelerate's FSDP2 policy reduce gradients in fp32; return the
    reduce dtype the policy now holds (None without FSDP or mixed precision).

    Why: accelerate 1.15's policy is `MixedPrecisionPolicy(param_dtype=fp16, reduce_dtype=fp16)`, so on
    an fp16 site (a V100) every FSDP run would reduce-scatter loss-scaled fp16 gradients: a sum over N
    ranks of values the GradScaler has pushed toward fp16's maximum (65,504) overflows sooner, and the
    small ones lose their digits, while DDP all-reduces fp32 gradients. The cost is the reduce-scatter's
    bytes, twice those of fp16 (4 bytes per element instead of 2); the all-gathers stay fp16. bf16 has
    fp32's range, so bf16 runs keep accelerate's policy. Call it after the Accelerator is built and
    before `prepare` (which passes the policy to every `fully_shard`)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    policy = getattr(plugin, "mixed_precision_policy", None)
    if plugin is None or not isinstance(policy, MixedPrecisionPolicy):
        return None
    if policy.param_dtype == torch.float16 and policy.reduce_dtype != torch.float32:
        plugin.mixed_precision_policy = MixedPrecisionPolicy(
            param_dtype=policy.param_dtype, reduce_dtype=torch.float32, output_dtype=policy.output_dtype,
            cast_forward_inputs=policy.cast_forward_inputs)
    reduce = plugin.mixed_precision_policy.reduce_dtype
    return str(reduce).removeprefix("torch.") if reduce is not None else None
