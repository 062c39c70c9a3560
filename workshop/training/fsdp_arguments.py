"""The `fsdp` and `fsdp_config` a run hands to `TrainingArguments`, from its config.

Apart from workshop.training.sharding (which imports torch): notebook 02 prints a config's accelerate YAML
(`workshop.training.accelerate_yaml`) from these arguments, and its kernels then need no torch (1.2 CPU-s each,
a graded kernel included). No torch import.
"""

from __future__ import annotations

from typing import Any

from workshop.training.config import GRAD_OP_SHARDINGS, RunConfig
from workshop.training.hf_fsdp import fsdp_argument, fsdp_enabled

BLOCK_CLASS = "BloomBlock"


def native_fsdp_arguments(cfg: RunConfig) -> tuple[bool | str, dict[str, Any]] | None:
    """The `fsdp` and `fsdp_config` handed to TrainingArguments (None without FSDP).

    The student's own Hugging Face arguments go as written (plus sharded checkpoints when they name no
    state_dict_type); the course's `sharding=` is spelled the same way, so both run one code path.
    With a `wrap_function` the Trainer wraps nothing (NO_WRAP): accelerate finds the student's
    FSDPModule and leaves it as it is.
    """
    if fsdp_enabled(cfg.fsdp):
        written = dict(cfg.fsdp_config)
        if not {"state_dict_type", "fsdp_state_dict_type"} & set(written):
            written["state_dict_type"] = "SHARDED_STATE_DICT"  # each rank saves its shard; none gathers the model
        return fsdp_argument(cfg.fsdp), written
    if not cfg.is_fsdp:
        return None
    fsdp_config: dict[str, Any] = {
        "version": 2,
        "reshard_after_forward": cfg.sharding not in GRAD_OP_SHARDINGS,
        "cpu_offload": cfg.offload,
        "activation_checkpointing": cfg.activation_checkpointing,
        "state_dict_type": "SHARDED_STATE_DICT",
    }
    if cfg.wrap_function:
        fsdp_config["auto_wrap_policy"] = "NO_WRAP"
    else:
        fsdp_config.update(auto_wrap_policy="TRANSFORMER_BASED_WRAP", transformer_layer_cls_to_wrap=[BLOCK_CLASS])
    return True, fsdp_config
