"""Course strategies → HF Trainer FSDP2 arguments, and what was really applied, read back from the model.

Every FSDP strategy runs on FSDP2 (`fully_shard`):
  FSDP1 FULL_SHARD    → reshard_after_forward=True  (params re-sharded after each block's forward)
  FSDP1 SHARD_GRAD_OP → reshard_after_forward=False (params stay gathered until backward)
  FSDP1 HYBRID_SHARD  → a 2-D mesh (replicate x shard) through accelerate's ParallelismConfig
  FSDP1 _HYBRID_SHARD_ZERO2 → the same mesh with reshard_after_forward=False (hybrid_shard_grad_op)
`describe_applied` reads the wrapped model back so a run reports what ran, not what was asked for.
"""

from __future__ import annotations

import math

import re
from typing import Any

import torch

from workshop.training import torch_private
from workshop.training.config import HYBRID_SHARDINGS, ConfigError, RunConfig
from workshop.training.fsdp_arguments import native_fsdp_arguments
from workshop.training.hf_fsdp import FsdpRequest, parse


def requested(cfg: RunConfig) -> FsdpRequest | None:
    """What the run must find applied, read from the very arguments the Trainer gets."""
    args = native_fsdp_arguments(cfg)
    return parse(str(args[0]), args[1]) if args else None


def trainer_sharding_kwargs(cfg: RunConfig) -> dict[str, Any]:
    """TrainingArguments keyword arguments for the config's strategy (empty for none/ddp)."""
    args = native_fsdp_arguments(cfg)
    if args is None:
        return {}
    kwargs: dict[str, Any] = {"fsdp": args[0], "fsdp_config": args[1]}
    if cfg.sharding in HYBRID_SHARDINGS:
        from accelerate.parallelism_config import ParallelismConfig

        kwargs["parallelism_config"] = ParallelismConfig(dp_replicate_size=cfg.replicas,
                                                         dp_shard_size=cfg.shard_size)
    return kwargs


def block_classes(model: torch.nn.Module) -> dict[str, int]:
    """The classes of the model's repeated blocks (members of a ModuleList), with how many there are."""
    found: dict[str, int] = {}
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList):
            for member in module:
                found[type(member).__name__] = found.get(type(member).__name__, 0) + 1
    return found


def check_block_classes(cfg: RunConfig, model: torch.nn.Module) -> None:
    """A block class the model does not have stops the job with the classes it does have.

    (Left to accelerate, it is a ValueError deep in the Trainer that names neither the field nor the fix.)
    """
    request = requested(cfg)
    if request is None or request.layer_classes is None:
        return
    found = block_classes(model)
    wrong = [name for name in request.layer_classes if name not in found]
    if wrong:
        present = {type(m).__name__ for m in model.modules()}
        inside = [name for name in wrong if name in present]
        problem = (f"{type(model).__name__} has no module of class {', '.join(map(repr, wrong))} (class names are "
                   "case-sensitive)" if not inside else f"{', '.join(map(repr, inside))} is a part inside each block, "
                   "not the transformer block itself")
        blocks = ", ".join(f"{name} ({count} of them)" for name, count in found.items())
        raise ConfigError("fsdp_config.transformer_layer_cls_to_wrap", problem,
                          f"name the class of the model's repeated blocks: {blocks or 'none found'} (its "
                          f"_no_split_modules: {getattr(model, '_no_split_modules', None)})")


SHAPE_PROBE = re.compile(r"\.(\d+)\.")


def probed_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """A few named parameters whose local shapes a run records: those outside the block list and the
    first block's (every other block repeats the first one's shapes)."""
    out = {}
    for name, param in model.named_parameters():
        m = SHAPE_PROBE.search(name)
        if m is None or m.group(1) == "0":
            out[name] = param
    return out


def _dtype_name(dtype: Any) -> str | None:
    return str(dtype).removeprefix("torch.") if dtype is not None else None


def _original_class(module: torch.nn.Module) -> str:
    """The class the model was built with: FSDP2 swaps a module's class for FSDP<Class>, and FSDP's
    activation checkpointing puts each block inside a CheckpointWrapper."""
    from torch.distributed.fsdp import FSDPModule

    module = torch_private.checkpoint_inner(module) or module
    return next(c for c in type(module).__mro__ if not issubclass(c, FSDPModule)).__name__


def checkpointing_applied(model: torch.nn.Module) -> bool:
    """FSDP's activation checkpointing wraps blocks in CheckpointWrapper; the Trainer's own sets the
    model's is_activation_checkpointing."""
    wrapper = torch_private.checkpoint_wrapper_class()
    return ((wrapper is not None and any(isinstance(m, wrapper) for m in model.modules()))
            or bool(getattr(model, "is_activation_checkpointing", False)))


def fsdp_param_groups(model: torch.nn.Module) -> list[Any]:
    """Each FSDP parameter group of the wrapped model once, in module order: what the wrapping reads back
    (and what a student's own `fully_shard` function is checked by, workshop.training.wrap_function)."""
    from torch.distributed.fsdp import FSDPModule

    groups, seen = [], set()
    for module in model.modules():
        if isinstance(module, FSDPModule):
            group = torch_private.fsdp_param_group_of(module)
            # fully_shard([a, b]) gives several modules one group (accelerate's embedding + final norm tail)
            if group is not None and id(group) not in seen:
                seen.add(id(group))
                groups.append((module, group))
    return groups


def _blocks(model: torch.nn.Module) -> list[tuple[torch.nn.Module, ...]]:
    """Each repeated block (a ModuleList member) with the block inside it when FSDP's activation
    checkpointing has put it in a CheckpointWrapper (accelerate then shards the inner block)."""
    return [(member, inner) if (inner := torch_private.checkpoint_inner(member)) is not None else (member,)
            for m in model.modules() if isinstance(m, torch.nn.ModuleList) for member in m]


def local_parameter_count(model: torch.nn.Module) -> int:
    """Parameter elements this rank holds: its shard of each DTensor, the whole of a plain tensor."""
    total = 0
    for p in {id(p): p for p in model.parameters()}.values():
        total += p.to_local().numel() if hasattr(p, "to_local") else p.numel()
    return total


def stored_shape(param: torch.nn.Parameter) -> list[int]:
    """The shape of the storage behind this rank's part of a parameter. FSDP2 keeps each rank's `Shard(0)`
    chunk padded to ceil(rows / N) rows, with the parameter a narrowed view of it: on the last ranks the
    view (`to_local()`) can be shorter than what is stored, so that every rank sends equal bytes in the
    all-gather. Without FSDP the storage is the parameter."""
    local = param.to_local() if hasattr(param, "to_local") else param
    shape = list(local.shape)
    row = math.prod(shape[1:]) * local.element_size()
    if not shape or not row:
        return shape
    return [local.untyped_storage().nbytes() // row, *shape[1:]]


def describe_applied(model: torch.nn.Module, wrapped: torch.nn.Module | None = None) -> dict[str, Any]:
    """What the wrapped model really is: strategy, wrapper class, resharding, offload, mesh, local params.

    `model` is the trainer's model (FSDP2 swaps its class in place); `wrapped` is the outermost
    wrapper (DDP for data parallel runs).
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule

    outer = wrapped if wrapped is not None else model
    probed = probed_parameters(model)
    info: dict[str, Any] = {"wrapper": type(outer).__name__, "reshard_after_forward": None,
                            "offload_applied": False, "mesh": None, "fsdp_units": 0,
                            "params_local": local_parameter_count(model),
                            "fsdp_unit_names": [], "blocks_wrapped": 0, "wrapped_classes": [], "other_units": [],
                            "mp_param_dtype": None, "mp_reduce_dtype": None,
                            "activation_checkpointing_applied": checkpointing_applied(model),
                            "param_shapes": {n: list(p.shape) for n, p in probed.items()},
                            "local_shapes": {n: list(p.to_local().shape) if hasattr(p, "to_local") else list(p.shape)
                                             for n, p in probed.items()},
                            "stored_shapes": {n: stored_shape(p) for n, p in probed.items()}}
    if isinstance(model, FSDPModule):
        units = [(name, m) for name, m in model.named_modules() if isinstance(m, FSDPModule)]
        info["fsdp_unit_names"] = [name for name, _ in units]
        wrapped_blocks = [block for block in _blocks(model) if any(isinstance(m, FSDPModule) for m in block)]
        blocks = {id(m) for block in _blocks(model) for m in block}
        info["blocks_wrapped"] = len(wrapped_blocks)
        info["wrapped_classes"] = sorted({_original_class(block[0]) for block in wrapped_blocks})
        info["other_units"] = sorted({_original_class(m) for name, m in units if name and id(m) not in blocks})
        try:
            groups = fsdp_param_groups(model)
        except torch_private.NotOnThisTorch as e:  # the read-back needs FSDP2's private state: say so, train on
            info["not_measured"] = torch_private.not_measured("the applied FSDP strategy (read back)", e)
            info["sharding_applied"] = None
            return info
        info["fsdp_units"] = len(groups)
        for key, attr in (("mp_param_dtype", "param_dtype"), ("mp_reduce_dtype", "reduce_dtype")):
            names = {_dtype_name(getattr(g.mp_policy, attr)) for _, g in groups}
            info[key] = names.pop() if len(names) == 1 else "mixed"
        # FSDP2 keeps a post-forward mesh only when it reshards after forward; the root unit is
        # exempt by design (its params are needed at once by backward), so read the blocks.
        # accelerate keeps its embedding + final-norm unit gathered (reshard_after_forward=False) whatever
        # was asked; the blocks carry the request
        block_groups = [g for m, g in groups if id(m) in blocks] or [g for _, g in groups]
        reshard = {g.post_forward_mesh_info is not None for g in block_groups}
        info["reshard_after_forward"] = reshard.pop() if len(reshard) == 1 else "mixed"
        info["offload_applied"] = all(isinstance(g.offload_policy, CPUOffloadPolicy) for _, g in groups)
        mesh = groups[0][1].mesh_info.mesh
        info["mesh"] = list(mesh.shape) if mesh.ndim == 2 else [1, mesh.size()]
        if mesh.ndim == 2:
            info["sharding_applied"] = "hybrid_shard" if info["reshard_after_forward"] is True else "hybrid_shard_grad_op"
        else:
            info["sharding_applied"] = "full_shard" if info["reshard_after_forward"] is True else "shard_grad_op"
    elif type(outer).__name__ == "DistributedDataParallel":
        # accelerate wraps even a single torchrun process in DDP; one rank shards and syncs nothing. DDP always
        # keeps its process group (the default one unless given another)
        info["sharding_applied"] = "ddp" if outer.process_group.size() > 1 else "none"
    else:
        info["sharding_applied"] = "none"
    return info


class ShardingMismatch(RuntimeError):
    """The run asked for one strategy and the framework applied another: stop, never train on."""


def check_applied(cfg: RunConfig, applied: dict[str, Any]) -> None:
    """Raise ShardingMismatch when what runs is not what the config asked for."""
    problems = []
    if applied.get("not_measured"):  # this torch lacks what the read-back reads: nothing to compare
        return
    if applied["sharding_applied"] != cfg.sharding:
        problems.append(f"asked for sharding={cfg.sharding!r}, the model is wrapped as "
                        f"{applied['sharding_applied']!r} ({applied['wrapper']})")
    if cfg.is_fsdp and applied["offload_applied"] != cfg.offload:
        problems.append(f"asked for offload={cfg.offload}, applied offload={applied['offload_applied']}")
    if cfg.sharding in HYBRID_SHARDINGS and applied["mesh"] != [cfg.replicas, cfg.shard_size]:
        problems.append(f"asked for a {cfg.replicas}x{cfg.shard_size} mesh, got {applied['mesh']}")
    if applied["activation_checkpointing_applied"] != cfg.activation_checkpointing:
        problems.append(f"asked for activation_checkpointing={cfg.activation_checkpointing}, applied "
                        f"{applied['activation_checkpointing_applied']}")
    request = requested(cfg)
    if request is not None and not cfg.wrap_function:
        if request.auto_wrap_policy == "NO_WRAP" and applied["blocks_wrapped"]:
            problems.append(f"asked for NO_WRAP, {applied['blocks_wrapped']} blocks were wrapped")
        if request.layer_classes and set(applied["wrapped_classes"]) != set(request.layer_classes):
            problems.append(f"asked to wrap {list(request.layer_classes)}, wrapped {applied['wrapped_classes']}")
    if problems:
        raise ShardingMismatch("; ".join(problems) + ". Refusing to train with a different strategy "
                               "than requested (see workshop/training/fsdp_cpu.py for the known upstream fallbacks).")
