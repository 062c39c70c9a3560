"""Every private PyTorch name the course reads, in one place, each with what it is for and the torch
versions it was checked on.

Why: PyTorch may rename or remove a private name (a leading underscore, or a module under `_tools`,
`_C`, `_pytree`, `_checkpoint`) in any release. The course measures with several of them (the
memory tracker's internals, FSDP2's state, the profiler's in-memory results, the flight recorder).
Kept here, a torch upgrade is checked in one file (tests/test_torch_private.py fails when a private
name is read anywhere else in workshop/), and a missing name never ends a job with an AttributeError
deep inside it: the accessor raises `NotOnThisTorch`, the feature that needs the name records "not
measured on this torch: ..." (summary.json's `not_measured`) and training goes on.

Checked on: torch 2.13.0 (CPU build, this machine). torch 2.11 (the lent GPU machine's) is checked by
scripts/compat_check.sh; add its version to `CHECKED_ON` entries when it has run there.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any, Callable

import torch

CHECKED = ("2.13.0",)


@dataclass(frozen=True)
class PrivateName:
    """One private name: where it lives, what the course reads it for, the torch versions it was seen on."""

    path: str       # module path, then the attribute (a ':' separates them)
    purpose: str
    checked_on: tuple[str, ...] = CHECKED


# the names a test lists and checks: `attr` is what an attribute access or import spells
NAMES: dict[str, PrivateName] = {
    "MemTracker": PrivateName(
        "torch.distributed._tools.mem_tracker:MemTracker",
        "tensor memory by category (params, grads, optimizer, activations) on CPU and CUDA"),
    "FSDPMemTracker": PrivateName(
        "torch.distributed._tools.fsdp2_mem_tracker:FSDPMemTracker",
        "the same for FSDP2 models: tells sharded from gathered parameters and gradients"),
    "_UpdateType": PrivateName(
        "torch.distributed._tools.mem_tracker:_UpdateType",
        "the kinds of counter update (ADD, DEL, REF, SIZE) the category sums follow"),
    "_FSDPRefType": PrivateName(
        "torch.distributed._tools.fsdp2_mem_tracker:_FSDPRefType",
        "the optimizer-state kind, to count AdamW's state before the tracker's first step"),
    "_curr_mem_snap": PrivateName(
        "torch.distributed._tools.mem_tracker:MemTracker._curr_mem_snap",
        "what the tracker counted at entry (the category sums start from it)"),
    "_update_snap": PrivateName(
        "torch.distributed._tools.mem_tracker:MemTracker._update_snap",
        "wrapped: every allocation/free/kind change also updates the course's category sums"),
    "_update_peak_stats": PrivateName(
        "torch.distributed._tools.mem_tracker:MemTracker._update_peak_stats",
        "replaced: the tracker's per-module peak walk (40 % of a tracked step) by the category maxima"),
    "_track_optimizer_states": PrivateName(
        "torch.distributed._tools.fsdp2_mem_tracker:FSDPMemTracker._track_optimizer_states",
        "counts AdamW's state at entry (FSDPMemTracker would count it only after a step)"),
    "tree_map_only": PrivateName(
        "torch.distributed._tools.mem_tracker:tree_map_only",
        "the trackers' module global, swapped for a visit that does not rebuild each operator's outputs"),
    "tree_iter": PrivateName(
        "torch.utils._pytree:tree_iter", "the leaves of an operator's outputs, in pytree order"),
    "_get_fsdp_state": PrivateName(
        "torch.distributed.fsdp:FSDPModule._get_fsdp_state",
        "FSDP2's per-module state: its parameter group and forward-hook handles"),
    "_fsdp_param_group": PrivateName(
        "torch.distributed.fsdp._fully_shard._fsdp_state:FSDPState._fsdp_param_group",
        "the applied mesh, reshard-after-forward, offload and mixed-precision policy of a unit"),
    "_pre_forward_hook_handle": PrivateName(
        "torch.distributed.fsdp._fully_shard._fsdp_state:FSDPState._pre_forward_hook_handle",
        "saved and put back around FSDPMemTracker, which restores only one module per unit"),
    "_post_forward_hook_handle": PrivateName(
        "torch.distributed.fsdp._fully_shard._fsdp_state:FSDPState._post_forward_hook_handle",
        "as _pre_forward_hook_handle"),
    "HOOK_DICTS": PrivateName(
        "torch.nn:Module._forward_pre_hooks (and _forward_pre_hooks_with_kwargs, _forward_hooks, "
        "_forward_hooks_with_kwargs, _forward_hooks_always_called)",
        "every module's forward hooks, saved and put back around FSDPMemTracker"),
    "CheckpointWrapper": PrivateName(
        "torch.distributed.algorithms._checkpoint.checkpoint_wrapper:CheckpointWrapper",
        "FSDP's activation checkpointing wraps each block in it: is checkpointing applied?"),
    "_checkpoint_wrapped_module": PrivateName(
        "torch.distributed.algorithms._checkpoint.checkpoint_wrapper:CheckpointWrapper._checkpoint_wrapped_module",
        "the block inside a CheckpointWrapper (its class, whether FSDP sharded it)"),
    "kineto_results": PrivateName(
        "torch.autograd.profiler:profile.kineto_results",
        "the profiled step's events in memory (writing and re-reading the trace cost seconds)"),
    "_dump_fr_trace_json": PrivateName(
        "torch._C._distributed_c10d:_dump_fr_trace_json",
        "the flight recorder's entries: each gloo collective's process group"),
    "_get_all_pg_configs": PrivateName(
        "torch.distributed.distributed_c10d:_get_all_pg_configs",
        "each process group's global ranks (what the profiler's export writes as pg_config)"),
    "_record_memory_history": PrivateName(
        "torch.cuda.memory:_record_memory_history",
        "CUDA: records every allocation with its stack around the tracked step (the memory snapshot)"),
    "FakeTensorMode": PrivateName(
        "torch._subclasses.fake_tensor:FakeTensorMode",
        "the dry run (workshop.training.dryrun): tensors with shapes and dtypes and no storage"),
    "FakeTensor": PrivateName(
        "torch._subclasses.fake_tensor:FakeTensor",
        "the dry run: a tensor without values, whose count of answer positions cannot be taken"),
    "FakeStore": PrivateName(
        "torch.testing._internal.distributed.fake_pg:FakeStore",
        "the dry run: the store of the `fake` process group (collectives that return at once), any world size"),
    "TorchDispatchMode": PrivateName(
        "torch.utils._python_dispatch:TorchDispatchMode",
        "the dry run's collective recorder: every c10d collective with its tensors, as CommDebugMode sees them"),
    "_dump_snapshot": PrivateName(
        "torch.cuda.memory:_dump_snapshot",
        "CUDA: writes that record as a pickle that pytorch.org/memory_viz opens"),
}

HOOK_DICTS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
              "_forward_hooks_with_kwargs", "_forward_hooks_always_called")
TRACKER_MODULES = ("torch.distributed._tools.mem_tracker", "torch.distributed._tools.fsdp2_mem_tracker")


class NotOnThisTorch(RuntimeError):
    """A private name the feature needs is missing from this torch; the message says which and what is lost."""


_NOT_MEASURED: list[str] = []


def not_measured(feature: str, error: BaseException) -> str:
    """Record (once) and print that `feature` is not measured on this torch; return the line. Training goes on."""
    line = f"not measured on this torch ({torch.__version__}): {feature}: {error}"
    if line not in _NOT_MEASURED:
        _NOT_MEASURED.append(line)
        print(f"[workshop] {line}", file=sys.stderr, flush=True)
    return line


def not_measured_lines() -> list[str]:
    """What this process could not measure for lack of a private name (summary.json's `not_measured`)."""
    return list(_NOT_MEASURED)


# The private names of the libraries above torch that the dry run (workshop.training.dryrun) drives: the
# Trainer's own step pieces, so that a dry run runs what `Trainer.train` runs. Kept here with torch's, one
# place to check on an upgrade of transformers or accelerate.
TRAINER_CHECKED = ("transformers 5.23.0", "accelerate 1.15.0")
TRAINER_NAMES: dict[str, PrivateName] = {
    "_reset_state": PrivateName(
        "accelerate.state:AcceleratorState._reset_state",
        "the dry run: accelerate's state singletons (AcceleratorState, PartialState, GradientState) emptied "
        "before and after, so the notebook's process keeps none", TRAINER_CHECKED),
    "_prepare_for_training": PrivateName(
        "transformers:Trainer._prepare_for_training",
        "the dry run: the job's model wrapped (FSDP2 through accelerate), its optimizer and scheduler made, "
        "as Trainer.train does it", TRAINER_CHECKED),
    "_set_sync_gradients": PrivateName(
        "accelerate.state:GradientState._set_sync_gradients",
        "the dry run: Trainer._run_epoch's switch, no gradient sync but on a step's last micro-batch",
        TRAINER_CHECKED),
    "_clip_grad_norm": PrivateName(
        "transformers:Trainer._clip_grad_norm",
        "the dry run: the Trainer's gradient clipping (its all-reduce of the norms is one of the step's "
        "collectives)", TRAINER_CHECKED),
}


def _missing(name: str, error: BaseException | None = None) -> NotOnThisTorch:
    entry = NAMES.get(name) or TRAINER_NAMES[name]
    why = f" ({type(error).__name__}: {error})" if error is not None else ""
    return NotOnThisTorch(f"{entry.path} is missing{why}; it was checked on torch {', '.join(entry.checked_on)} "
                          f"(used for: {entry.purpose}); see workshop/training/torch_private.py")


def _import(name: str) -> Any:
    module, _, attr = NAMES[name].path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise _missing(name, e) from e


def _attr(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError as e:
        raise _missing(name, e) from e


# ------------------------------------------------------------------------------ the memory trackers


def mem_tracker_classes() -> tuple[Any, Any]:
    """(MemTracker, FSDPMemTracker), after checking that every internal the course touches exists."""
    tracker, fsdp_tracker = _import("MemTracker"), _import("FSDPMemTracker")
    for name in ("_update_snap", "_update_peak_stats"):  # _curr_mem_snap is an instance's: read when used
        if not hasattr(tracker, name):
            raise _missing(name)
    if not hasattr(fsdp_tracker, "_track_optimizer_states"):
        raise _missing("_track_optimizer_states")
    _import("_UpdateType")
    _import("_FSDPRefType")
    return tracker, fsdp_tracker


def update_types() -> Any:
    """The tracker's `_UpdateType` enum (ADD, DEL, REF, SIZE)."""
    return _import("_UpdateType")


def tracker_snapshot(tracker: Any) -> dict[torch.device, dict[str, int]]:
    """What the tracker counts as alive now, by device and kind."""
    return _attr(tracker, "_curr_mem_snap")


def replace_tracker_updates(tracker: Any, wrap_update_snap: Callable[[Callable[..., None]], Callable[..., None]],
                            update_peaks: Callable[..., None]) -> None:
    """Route the tracker's counter updates through `wrap_update_snap(original)` and its per-operator peak
    walk to `update_peaks`."""
    original = _attr(tracker, "_update_snap")
    _attr(tracker, "_update_peak_stats")
    tracker._update_snap = wrap_update_snap(original)
    tracker._update_peak_stats = update_peaks


def track_optimizer_states(tracker: Any, optimizer: Any) -> None:
    """Count the optimizer's state now (FSDPMemTracker does so only after a step)."""
    _attr(tracker, "_track_optimizer_states")(_import("_FSDPRefType").OPT, optimizer)


def tracker_modules() -> list[Any]:
    """The trackers' modules, whose `tree_map_only` global the course swaps."""
    modules = []
    for name in TRACKER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise _missing("MemTracker", e) from e
        _attr(module, "tree_map_only")
        modules.append(module)
    return modules


def swap_tracker_tree_map(replacement: Callable[..., Any]) -> Callable[[], None]:
    """Put `replacement` in place of the trackers' `tree_map_only`; return the undo."""
    modules = tracker_modules()
    saved = [module.tree_map_only for module in modules]
    for module in modules:
        module.tree_map_only = replacement

    def restore() -> None:
        for module, original in zip(modules, saved):
            module.tree_map_only = original

    return restore


def tree_iter() -> Callable[..., Any]:
    return _import("tree_iter")


# ------------------------------------------------------------------------------------- FSDP2's state


def fsdp_state(module: torch.nn.Module) -> Any:
    """FSDP2's state object of a fully_shard-ed module."""
    return _attr(module, "_get_fsdp_state")()


def fsdp_param_group(state: Any) -> Any:
    """A unit's FSDPParamGroup (None for a unit without parameters): mesh_info, post_forward_mesh_info,
    mp_policy, offload_policy, pre_backward/post_backward."""
    return _attr(state, "_fsdp_param_group")


def fsdp_param_group_of(module: torch.nn.Module) -> Any:
    return fsdp_param_group(fsdp_state(module))


def forward_hook_handles(state: Any) -> tuple[Any, Any]:
    return _attr(state, "_pre_forward_hook_handle"), _attr(state, "_post_forward_hook_handle")


def set_forward_hook_handles(state: Any, handles: tuple[Any, Any]) -> None:
    state._pre_forward_hook_handle, state._post_forward_hook_handle = handles


def forward_hook_tables(module: torch.nn.Module) -> list[tuple[str, dict[Any, Any]]]:
    """The module's forward-hook dicts by name (the live dicts: a caller copies what it saves)."""
    return [(name, _attr(module, name)) for name in HOOK_DICTS]


# ----------------------------------------------------------------------------- activation checkpoints


def checkpoint_wrapper_class() -> type | None:
    """FSDP's CheckpointWrapper, or None when this torch has none (then nothing is wrapped by it)."""
    try:
        return _import("CheckpointWrapper")
    except NotOnThisTorch:
        return None


def checkpoint_inner(module: torch.nn.Module) -> torch.nn.Module | None:
    """The block inside a CheckpointWrapper, None for any other module."""
    return getattr(module, "_checkpoint_wrapped_module", None)


# ------------------------------------------------------------------------------ profiler and c10d


def kineto_results(profiler: Any) -> Any:
    """The in-memory results of a finished `torch.profiler.profile` (None when it recorded nothing)."""
    inner = getattr(profiler, "profiler", None)
    if inner is None:
        return None
    if not hasattr(inner, "kineto_results"):
        raise _missing("kineto_results")
    return inner.kineto_results


def flight_recorder_json() -> str:
    """The flight recorder's dump as JSON text (entries for this process's collectives)."""
    return _import("_dump_fr_trace_json")(True, False)


def all_pg_configs() -> Any:
    """Every process group's configuration (name, backend, global ranks)."""
    return _import("_get_all_pg_configs")()


# ------------------------------------------------------------------------------ CUDA memory snapshot


def memory_history_options(enabled: str | None, max_entries: int) -> dict[str, Any]:
    """The arguments of `_record_memory_history`: Python stacks only. torch's default, stacks="all", also
    records C++ frames, and symbolising those when the snapshot is dumped can take minutes on one rank while
    the others wait in a collective with a 300 s timeout; the Python frames are what a reader follows."""
    if enabled is None:
        return {"enabled": None}
    return {"enabled": enabled, "stacks": "python", "max_entries": max_entries}


def record_memory_history(enabled: str | None, max_entries: int) -> None:
    """Start (enabled="all") or stop (enabled=None) recording CUDA allocations with their Python stacks."""
    _import("_record_memory_history")(**memory_history_options(enabled, max_entries))


def dump_memory_snapshot(path: str) -> None:
    _import("_dump_snapshot")(path)


# ------------------------------------------------------------------------------ the dry run's fake tensors


def fake_tensor_mode() -> Any:
    """A FakeTensorMode that takes real inputs (the micro-batch) beside fake parameters."""
    return _import("FakeTensorMode")(allow_non_fake_inputs=True)


def is_fake(tensor: Any) -> bool:
    """Whether `tensor` is a dry run's fake tensor (shape and dtype, no values). A torch without the class
    runs no dry run: its tensors are real (training must never stop on this question)."""
    try:
        return isinstance(tensor, _import("FakeTensor"))
    except NotOnThisTorch:
        return False


def fake_store() -> Any:
    return _import("FakeStore")()


def dispatch_mode_class() -> Any:
    """The base class of a mode that sees every op dispatched (the dry run's collective recorder)."""
    return _import("TorchDispatchMode")


# ------------------------------------------------------------------------------ the Trainer's step pieces


def reset_accelerate_state() -> None:
    """Empty accelerate's state singletons (a dry run builds its own, and leaves none behind)."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    _attr(AcceleratorState, "_reset_state")(reset_partial_state=True)
    _attr(PartialState, "_reset_state")()
    _attr(GradientState, "_reset_state")()


def prepare_for_training(trainer: Any, max_steps: int) -> None:
    """What `Trainer.train` does before its first step: wrap the model, make its optimizer and scheduler."""
    _attr(trainer, "_prepare_for_training")(max_steps, None, None)


def set_sync_gradients(accelerator: Any, sync: bool) -> None:
    """Whether this micro-batch's backward syncs gradients (the Trainer's last micro-batch of a step does)."""
    _attr(accelerator.gradient_state, "_set_sync_gradients")(sync)


def clip_grad_norm(trainer: Any, model: Any) -> None:
    """The Trainer's gradient clipping, as its step runs it."""
    _attr(trainer, "_clip_grad_norm")(model)
