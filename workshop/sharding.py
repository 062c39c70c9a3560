"""Course strategies → HF Trainer FSDP2 arguments, and what was really applied, read back from the model.

Every FSDP strategy runs on FSDP2 (`fully_shard`):
  FSDP1 FULL_SHARD    → reshard_after_forward=True  (params re-sharded after each block's forward)
  FSDP1 SHARD_GRAD_OP → reshard_after_forward=False (params stay gathered until backward)
  FSDP1 HYBRID_SHARD  → a 2-D mesh (replicate x shard) through accelerate's ParallelismConfig
`describe_applied` reads the wrapped model back so a run reports what ran, not what was asked for.
"""

from __future__ import annotations

from typing import Any

import torch

from workshop.config import RunConfig

BLOCK_CLASS = "BloomBlock"


def trainer_sharding_kwargs(cfg: RunConfig) -> dict[str, Any]:
    """TrainingArguments keyword arguments for the config's strategy (empty for none/ddp)."""
    if not cfg.is_fsdp:
        return {}
    fsdp_config: dict[str, Any] = {
        "version": 2,
        "reshard_after_forward": cfg.sharding != "shard_grad_op",
        "cpu_offload": cfg.offload,
        "activation_checkpointing": cfg.activation_checkpointing,
        "transformer_layer_cls_to_wrap": [BLOCK_CLASS],
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "state_dict_type": "SHARDED_STATE_DICT",
    }
    kwargs: dict[str, Any] = {"fsdp": True, "fsdp_config": fsdp_config}
    if cfg.sharding == "hybrid_shard":
        from accelerate.parallelism_config import ParallelismConfig

        kwargs["parallelism_config"] = ParallelismConfig(dp_replicate_size=cfg.replicas,
                                                         dp_shard_size=cfg.shard_size)
    return kwargs


def _fsdp_param_groups(model: torch.nn.Module) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    groups = []
    for module in model.modules():
        if isinstance(module, FSDPModule):
            group = module._get_fsdp_state()._fsdp_param_group
            if group is not None:
                groups.append((module, group))
    return groups


def local_parameter_count(model: torch.nn.Module) -> int:
    """Parameter elements this rank holds: its shard of each DTensor, the whole of a plain tensor."""
    total = 0
    for p in {id(p): p for p in model.parameters()}.values():
        total += p.to_local().numel() if hasattr(p, "to_local") else p.numel()
    return total


def describe_applied(model: torch.nn.Module, wrapped: torch.nn.Module | None = None) -> dict[str, Any]:
    """What the wrapped model really is: strategy, wrapper class, resharding, offload, mesh, local params.

    `model` is the trainer's model (FSDP2 swaps its class in place); `wrapped` is the outermost
    wrapper (DDP for data parallel runs).
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule

    outer = wrapped if wrapped is not None else model
    info: dict[str, Any] = {"wrapper": type(outer).__name__, "reshard_after_forward": None,
                            "offload_applied": False, "mesh": None, "fsdp_units": 0,
                            "params_local": local_parameter_count(model)}
    if isinstance(model, FSDPModule):
        groups = _fsdp_param_groups(model)
        info["fsdp_units"] = len(groups)
        # FSDP2 keeps a post-forward mesh only when it reshards after forward; the root unit is
        # exempt by design (its params are needed at once by backward), so read the blocks.
        blocks = [g for m, g in groups if type(m).__name__.endswith(BLOCK_CLASS)] or [g for _, g in groups]
        reshard = {g.post_forward_mesh_info is not None for g in blocks}
        info["reshard_after_forward"] = reshard.pop() if len(reshard) == 1 else "mixed"
        info["offload_applied"] = all(isinstance(g.offload_policy, CPUOffloadPolicy) for _, g in groups)
        mesh = groups[0][1].mesh_info.mesh
        info["mesh"] = list(mesh.shape) if mesh.ndim == 2 else [1, mesh.size()]
        if mesh.ndim == 2:
            info["sharding_applied"] = "hybrid_shard"
        else:
            info["sharding_applied"] = "full_shard" if info["reshard_after_forward"] is True else "shard_grad_op"
    elif type(outer).__name__ == "DistributedDataParallel":
        # accelerate wraps even a single torchrun process in DDP; one rank shards and syncs nothing
        world = outer.process_group.size() if getattr(outer, "process_group", None) is not None else 1
        info["sharding_applied"] = "ddp" if world > 1 else "none"
    else:
        info["sharding_applied"] = "none"
    return info


class ShardingMismatch(RuntimeError):
    """The run asked for one strategy and the framework applied another: stop, never train on."""


def check_applied(cfg: RunConfig, applied: dict[str, Any]) -> None:
    """Raise ShardingMismatch when what runs is not what the config asked for."""
    problems = []
    if applied["sharding_applied"] != cfg.sharding:
        problems.append(f"asked for sharding={cfg.sharding!r}, the model is wrapped as "
                        f"{applied['sharding_applied']!r} ({applied['wrapper']})")
    if cfg.is_fsdp and applied["offload_applied"] != cfg.offload:
        problems.append(f"asked for offload={cfg.offload}, applied offload={applied['offload_applied']}")
    if cfg.sharding == "hybrid_shard" and applied["mesh"] != [cfg.replicas, cfg.shard_size]:
        problems.append(f"asked for a {cfg.replicas}x{cfg.shard_size} mesh, got {applied['mesh']}")
    if problems:
        raise ShardingMismatch("; ".join(problems) + ". Refusing to train with a different strategy "
                               "than requested (see workshop/fsdp_cpu.py for the known upstream fallbacks).")
