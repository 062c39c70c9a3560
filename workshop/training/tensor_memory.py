"""Tensor memory per rank by category (params, grads, optimizer, activations, other), on any device.

Why: on a CPU the process's resident memory is dominated by the Python interpreter and libraries
(~500 MB) and barely moves with the sharding strategy, so it cannot show what FSDP saves. PyTorch's
own tracker counts every tensor storage by what it holds, on CPU and CUDA alike:
`torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker` for FSDP2 models and
`torch.distributed._tools.mem_tracker.MemTracker` otherwise (DDP, one process).

How it runs inside the HF Trainer: a callback enters the tracker (a TorchDispatchMode) at the start of
ONE optimizer step (the second, so AdamW's state already exists as it does at every later step) and
leaves it at that step's end; forward, backward of every micro-batch, clipping and the optimizer step
are inside. The tracker raises on a second root forward unless `reset_mod_stats()` is called, so it
is called after every non-final micro-batch (gradient accumulation).

What it costs: the other steps run untouched; `tensor_mem_overhead_pct` in summary.json is the
tracked step's extra time over the median untracked step, as a share of the training time. The
summary's throughput never counts the tracked step (workshop.training.counted_steps.INSTRUMENTED_STEPS). The
tracker itself (a Python call per operator) made a tracked step 2-3x an untracked one on the tiny
model (DDP with its module-level bookkeeping: 3.3x); two things here bring that to ~1.6-1.9x without
changing a single figure it measures: `watch_category_peaks` (per-category maxima kept from the
tracker's own counter updates, its module-level snapshots skipped) and `lean_tree_map` (the outputs of
each operator visited without rebuilding them). Measured on 2 busy cores (tests/runs.py's runs, the
course's lengths): 12-step runs at 2 ranks 4.5-8 %, 6-step runs at 4 ranks 4-9 %, where the course
ran 10-19 % before. The bound is physical for short runs: with a tracked step at ~1.7x, the extra
0.7 step is ~0.7/(N+1) of an N-step run (12 % at N = 5), less the time training spends outside steps
(evaluation); and one step's time on a loaded machine varies by more than that.
benchmarks/tensor_memory_overhead.py holds the course's 12-step runs to 10 % on a quiet machine.

What is counted: each category's own peak over the measured step (gradients peak after backward,
activations at the end of forward), and `peak`, the largest sum of all of them at one moment; the
categories therefore add up to more than `peak`. The tracker's kinds map to the categories as
    params      Parameter | Sharded Param + Unsharded Param
    grads       Gradient  | Sharded Grad (what each rank stores; halved by sharding over 2)
    optimizer   Optstate | OptState
    activations Activation (forward outputs saved for backward, and recomputed ones)
    other       Temp (backward temporaries, gradients of activations), Buffer, All Gather and
                Reduce Scatter buffers, Inputs, Other, and FSDP's Unsharded Grad: a unit's full
                gradient before its reduce-scatter, also reported on its own as `unsharded_grads`
                (with gradient accumulation FSDP2 keeps all of them until the final micro-batch)
What the tracker cannot see: memory allocated outside its dispatch mode and not tracked at entry —
DDP's gradient buckets (made in C++ when DDP wraps the model) and the CUDA context. On CUDA the
caching allocator's peak over the measured step itself is kept as `allocator_step_peak` (the figure
`peak` is compared with: the same step, the same batch), and its peak over training up to that
step's end (`torch.cuda.max_memory_allocated`, reset after the generation run that scores the
untrained model) as `allocator_peak`. Measuring the step alone resets the allocator's peak counters
at its start; `allocator_peaks` adds what they held before, so the run's peak over training stays whole.

Offload: with FSDP2's CPUOffloadPolicy the sharded parameters, their gradients and AdamW's state live
in host memory. On a GPU the tracker sees them on the `cpu` device; on a CPU-only host every tensor
is on `cpu`, so the split follows where the policy puts them (sharded params, sharded grads and
optimizer state: host; gathered params, activations, temporaries: device). The host side is
reported as `host_params`, `host_grads`, `host_optimizer` and `host`; the plain keys and `peak`
are the device side.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
from transformers import TrainerCallback

from workshop.training import torch_private
from workshop.training.categories import CATEGORIES
from workshop.training.counted_steps import INSTRUMENTED_STEPS, instrumented_step
from workshop.training.torch_private import HOOK_DICTS, TRACKER_MODULES, NotOnThisTorch  # noqa: F401  (re-exported)

MB = 2**20
TRACKER_TO_CATEGORY = {
    "Parameter": "params", "Sharded Param": "params", "Unsharded Param": "params",
    "Gradient": "grads", "Sharded Grad": "grads",
    "Optstate": "optimizer", "OptState": "optimizer", "Activation": "activations",
}
OFFLOADED = {"Sharded Param": "params", "Sharded Grad": "grads", "OptState": "optimizer"}


def split_snapshot(snapshot: dict[torch.device, dict[str, int]], run_device: torch.device,
                   offload: bool) -> dict[str, int]:
    """A tracker snapshot as the course's categories in bytes: device side, and host side under offload."""
    out = dict.fromkeys(CATEGORIES, 0)
    for dev, by_kind in snapshot.items():
        on_host = run_device.type != "cpu" and dev.type == "cpu"
        for kind, nbytes in by_kind.items():
            if kind == "Total":
                continue
            category = TRACKER_TO_CATEGORY.get(kind, "other")
            if on_host or (offload and run_device.type == "cpu" and kind in OFFLOADED):
                key = f"host_{category if category in OFFLOADED.values() else 'other'}"
                out[key] = out.get(key, 0) + nbytes
            else:
                out[category] += nbytes
    out["peak"] = sum(out[c] for c in CATEGORIES)
    out["unsharded_grads"] = sum(by_kind.get("Unsharded Grad", 0) for dev, by_kind in snapshot.items())
    out["host"] = sum(v for k, v in out.items() if k.startswith("host_"))
    return out


def category_keys(kind: str, dev: torch.device, run_device: torch.device, offload: bool) -> tuple[str, ...]:
    """The keys of split_snapshot that one tracker kind on one device adds to (its category, and `peak`,
    `host` or `unsharded_grads`); () for the tracker's own "Total"."""
    if kind == "Total":
        return ()
    category = TRACKER_TO_CATEGORY.get(kind, "other")
    on_host = run_device.type != "cpu" and dev.type == "cpu"
    if on_host or (offload and run_device.type == "cpu" and kind in OFFLOADED):
        keys: tuple[str, ...] = (f"host_{category if category in OFFLOADED.values() else 'other'}", "host")
    else:
        keys = (category, "peak")
    return (*keys, "unsharded_grads") if kind == "Unsharded Grad" else keys


def watch_category_peaks(tracker: Any, run_device: torch.device, offload: bool) -> dict[str, int]:
    """Each category's own peak over the tracked step, and the peak of their sum (`peak`): after every
    operator, the maximum of what split_snapshot would give for the tracker's running snapshot.

    The tracker keeps only the breakdown at the moment of the total's peak, when gradients may not
    exist yet (FSDP frees nothing of them before backward): the course asks how much each category
    takes, so per-category maxima are kept beside it. Cheaply, because a tracked step must stay within
    the overhead budget (see the module docstring):
    - the category sums follow the tracker's own counter updates (`_update_snap`: allocation, free,
      change of kind, resize), one addition each, instead of re-summing the snapshot per operator;
    - the tracker's `_update_peak_stats`, called after every operator, is replaced: it walks every
      module's stats and deep-copies a snapshot at each new module-level peak, which the course never
      reads (profiled: ~40 % of a tracked DDP step of the tiny model, more than the rest of the
      tracking); ours compares the handful of sums with their maxima;
    - the tracker's other module-level snapshots (a deep copy at each module's forward and backward)
      are skipped: `get_tracker_snapshot` returns an empty one."""
    _UpdateType = torch_private.update_types()
    peaks: dict[str, int] = {}
    sums: dict[str, int] = {}
    keys_of: dict[tuple[torch.device, str], tuple[str, ...]] = {}

    def add(dev: torch.device, kind: str, nbytes: int) -> None:
        keys = keys_of.get((dev, kind))
        if keys is None:
            keys = keys_of[(dev, kind)] = category_keys(kind, dev, run_device, offload)
        for key in keys:
            sums[key] = sums.get(key, 0) + nbytes

    for dev, by_kind in torch_private.tracker_snapshot(tracker).items():  # what make_tracker already counted
        for kind, nbytes in by_kind.items():
            add(dev, kind, nbytes)

    def wrap(update_snap: Callable[..., None]) -> Callable[..., None]:
        def update_snap_and_sums(u_type: Any, winfo: Any, old_mem_consumed: int | None = None,
                                 old_reftype: Any = None) -> None:
            update_snap(u_type, winfo, old_mem_consumed, old_reftype)
            if u_type is _UpdateType.ADD:
                add(winfo.device, winfo.reftype, winfo.mem_consumed)
            elif u_type is _UpdateType.DEL:
                add(winfo.device, winfo.reftype, -winfo.mem_consumed)
            elif u_type is _UpdateType.REF:
                add(winfo.device, old_reftype, -winfo.mem_consumed)
                add(winfo.device, winfo.reftype, winfo.mem_consumed)
            else:  # SIZE
                add(winfo.device, winfo.reftype, winfo.mem_consumed - old_mem_consumed)
        return update_snap_and_sums

    def update_peaks(_peak_state: Any = None) -> None:
        for key, nbytes in sums.items():
            if nbytes > peaks.get(key, 0):
                peaks[key] = nbytes

    torch_private.replace_tracker_updates(tracker, wrap, update_peaks)
    tracker.get_tracker_snapshot = lambda type="current": {}  # noqa: A006  (module-level snapshots: unused)
    tracker.category_sums = sums  # what is alive now, by split_snapshot's keys (a test checks the two agree)
    update_peaks()
    return peaks


def as_mb(peaks: dict[str, int], offload: bool) -> dict[str, float]:
    out = {k: round(peaks.get(k, 0) / MB, 3) for k in (*CATEGORIES, "peak")}
    if "unsharded_grads" in peaks:
        out["unsharded_grads"] = round(peaks["unsharded_grads"] / MB, 3)
    if offload or peaks.get("host"):
        out.update({k: round(peaks.get(k, 0) / MB, 3)
                    for k in ("host_params", "host_grads", "host_optimizer", "host")})
    return out


def save_fsdp_hooks(root: torch.nn.Module) -> Callable[[], None]:
    """Return a function that puts every module's forward hooks and FSDP's hook handles back as they are now.

    FSDPMemTracker swaps FSDP2's forward hooks for its own and swaps them back on exit, one module at a
    time. When one FSDP unit groups several modules (accelerate shards BLOOM's tied word_embeddings
    and lm_head as one unit), its exit removes only the last module's hook, and the next forward
    raises "does not support memory tracking for multiple iterative calls" (torch 2.13); the unit's
    pre/post-backward are wrapped twice and unwrapped once, so the next backward raises KeyError "No
    existing winfo found". Restoring the hook tables and the param groups' methods exactly as they
    were before the tracker entered gives FSDP its own hooks back."""
    from torch.distributed.fsdp import FSDPModule

    modules = list(root.modules())
    tables = [(table, dict(table)) for m in modules for _, table in torch_private.forward_hook_tables(m)]
    states = [torch_private.fsdp_state(m) for m in modules if isinstance(m, FSDPModule)]
    handles = [(st, torch_private.forward_hook_handles(st)) for st in states]
    groups = [(group, dict(vars(group))) for group in map(torch_private.fsdp_param_group, states) if group]

    def restore() -> None:
        for table, saved in tables:
            table.clear()
            table.update(saved)
        for state, saved_handles in handles:
            torch_private.set_forward_hook_handles(state, saved_handles)
        for group, saved in groups:  # the wrapped pre_backward/post_backward are instance attributes
            for name in ("pre_backward", "post_backward"):
                if name in saved:
                    setattr(group, name, saved[name])
                else:
                    vars(group).pop(name, None)

    return restore


def lean_tree_map() -> Callable[[], None]:
    """Make the trackers walk an operator's outputs without rebuilding them; return the undo.

    The trackers call `tree_map_only(torch.Tensor, track, outputs)` after every operator (and on module
    inputs and outputs) only for its side effect: all four call sites drop what it returns. The
    pytree version flattens, rebuilds a tree of Nones and wraps `track` anew with functools.wraps each
    time (profiled: a third of the tracked step's extra time, DDP on the tiny model). This visits the
    same tensors in the same order, and returns the tree unchanged, as `tree_map_only_` does."""
    tree_iter = torch_private.tree_iter()

    def tree_map_only_for_effect(types: Any, func: Callable[[Any], Any], tree: Any, is_leaf: Any = None) -> Any:
        if isinstance(tree, torch.Tensor):  # most operators return one tensor
            func(tree)
            return tree
        for leaf in tree_iter(tree, is_leaf=is_leaf):
            if isinstance(leaf, types):
                func(leaf)
        return tree

    return torch_private.swap_tracker_tree_map(tree_map_only_for_effect)


def make_tracker(model: torch.nn.Module, optimizer: Any) -> Any:
    """FSDP2's tracker for a fully_shard-ed model (it knows sharded from gathered), the generic one otherwise."""
    from torch.distributed.fsdp import FSDPModule

    MemTracker, FSDPMemTracker = torch_private.mem_tracker_classes()

    inner_optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer
    if isinstance(model, FSDPModule):
        tracker = FSDPMemTracker(model, inner_optimizer)
        # FSDPMemTracker counts AdamW's state only after a step; it exists from step 1 on, so count it now
        torch_private.track_optimizer_states(tracker, inner_optimizer)
        return tracker
    tracker = MemTracker()
    tracker.track_external(model, inner_optimizer)
    return tracker


SNAPSHOT_FILE = "memory_snapshot.pickle"
SNAPSHOT_ENTRIES = 100_000          # allocation events kept (a ring buffer): a BLOOM-560M step makes ~10^4
SNAPSHOT_CAP_BYTES = 64 * 2**20     # a larger dump is deleted (the job folder is the student's quota)


class MemorySnapshot:
    """CUDA: every allocation and free of the tracked step with its stack, dumped next to the run as
    `memory_snapshot.pickle` (PyTorch's memory snapshot). Open it in PyTorch's memory viewer: drag the
    file onto https://pytorch.org/memory_viz.

    Recording runs only inside the tracked step, which the throughput already leaves out
    (counted_steps.INSTRUMENTED_STEPS); the dump is written after that step's time is taken. The size
    is capped twice: `SNAPSHOT_ENTRIES` events at most, and a file over `SNAPSHOT_CAP_BYTES` is deleted
    with the reason kept (`reason`)."""

    def __init__(self, path: Any) -> None:
        self.path = path
        self.file: str | None = None
        self.reason: str | None = None
        self._on = False

    def start(self) -> None:
        try:
            torch_private.record_memory_history("all", SNAPSHOT_ENTRIES)
            self._on = True
        except NotOnThisTorch as e:
            self.reason = torch_private.not_measured("the CUDA memory snapshot", e)
        except Exception as e:  # noqa: BLE001  (a debugging aid never stops training)
            self.reason = f"the CUDA memory snapshot did not start: {type(e).__name__}: {e}"

    def stop(self) -> None:
        if not self._on:
            return
        self._on = False
        try:
            torch_private.dump_memory_snapshot(str(self.path))
            torch_private.record_memory_history(None, SNAPSHOT_ENTRIES)
            size = self.path.stat().st_size
            if size > SNAPSHOT_CAP_BYTES:
                self.path.unlink()
                self.reason = (f"the snapshot was {size / 2**20:.0f} MiB, over the {SNAPSHOT_CAP_BYTES // 2**20} MiB "
                               "cap: deleted (workshop.training.tensor_memory.SNAPSHOT_CAP_BYTES)")
            else:
                self.file = self.path.name
        except Exception as e:  # noqa: BLE001
            self.reason = f"the CUDA memory snapshot was not written: {type(e).__name__}: {e}"


class AllocatorPeaks:
    """The CUDA caching allocator's (allocated, reserved) peaks in bytes since training began, across the
    reset of its peak counters at the tracked step.

    Why: the tracked step's own allocator peak (`allocator_step_peak`, set beside the tracker's figure)
    needs `torch.cuda.reset_peak_memory_stats` at its start, which forgets every earlier peak; the run's
    peak since train start (summary.json's `peak_mem_mb`, `peak_reserved_mb`, metrics.jsonl's records)
    is the larger of what the counters held at that reset and what they reached after it.
    `read` and `reset` are the allocator's counters (a CPU test passes its own)."""

    def __init__(self, read: Callable[[], tuple[int, int]], reset: Callable[[], None]) -> None:
        self.read, self._reset = read, reset
        self.floor = (0, 0)   # the counters' values just before the last reset since train start

    @classmethod
    def cuda(cls, device: torch.device) -> "AllocatorPeaks":
        return cls(lambda: (torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)),
                   lambda: torch.cuda.reset_peak_memory_stats(device))

    def start(self) -> None:
        """Training starts: forget what came before (the generation run that scores the untrained model)."""
        self._reset()
        self.floor = (0, 0)

    def reset_keeping_peaks(self) -> None:
        """Reset the counters (a step is about to be measured on its own), keeping what they held."""
        self.floor = self.since_start()
        self._reset()

    def since_reset(self) -> tuple[int, int]:
        return self.read()

    def since_start(self) -> tuple[int, int]:
        allocated, reserved = self.read()
        return max(self.floor[0], allocated), max(self.floor[1], reserved)


class TensorMemoryCallback(TrainerCallback):
    """Measures one optimizer step with PyTorch's memory tracker; keeps the training-only peaks."""

    def __init__(self, device: torch.device, offload: bool, counter: Any = None) -> None:
        self.device, self.offload = device, offload
        self.measure_step = INSTRUMENTED_STEPS["tensor_memory"]  # the throughput leaves this step out
        self.counter = counter  # workshop.training.metrics.StepCounter: the measured micro-batches' shapes
        self.shapes: list[tuple[int, ...]] = []
        self.model: torch.nn.Module | None = None  # the wrapped model; set by the training script
        self.tracker: Any = None
        self._restore_hooks: Callable[[], None] | None = None
        self._peaks: dict[str, int] = {}
        self.measured: dict[str, float] | None = None
        self.reason: str | None = None  # why nothing was measured, when a private torch name is missing
        self.tracked_step_s: float | None = None
        self.untracked_steps_s: list[float] = []
        self._started = 0.0
        self.peaks = AllocatorPeaks.cuda(device) if device.type == "cuda" else None  # CUDA: since train start
        self.snapshot: MemorySnapshot | None = None  # CUDA, one rank: set by the training script (enable_snapshot)

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
        # training only: forget what the generation run on the untrained model allocated
        if self.peaks is not None:
            self.peaks.start()
        self.measure_step = instrumented_step("tensor_memory", state.max_steps)
        if self.counter is not None and self.measure_step > state.global_step:   # a resumed run past it measures nothing
            self.counter.leave_out_of_throughput(self.measure_step, "tensor_memory")

    def on_step_begin(self, args, state, control, optimizer=None, model=None, **kwargs):  # noqa: ANN001
        self._started = time.perf_counter()
        if self.measured is None and self.tracker is None and self.reason is None \
                and state.global_step + 1 == self.measure_step:
            model = self.model if self.model is not None else model
            try:
                tracker = make_tracker(model, optimizer)
                self._peaks = watch_category_peaks(tracker, self.device, self.offload)
                restore_hooks = save_fsdp_hooks(model)
                restore_tree_map = lean_tree_map()
            except NotOnThisTorch as e:  # the step runs untracked; summary.json says why
                self.reason = torch_private.not_measured("tensor memory by category", e)
                return
            self.tracker = tracker
            self._restore_hooks = lambda: (restore_hooks(), restore_tree_map())
            if self.peaks is not None:   # the measured step's own allocator peak, beside the tracker's
                self.peaks.reset_keeping_peaks()
            if self.snapshot is not None:
                self.snapshot.start()
            try:
                self.tracker.__enter__()
            except (AttributeError, ImportError, KeyError) as e:  # a tracker internal this torch changed
                self._restore_hooks()
                self.tracker, self._restore_hooks = None, None
                if self.snapshot is not None:
                    self.snapshot.stop()
                self.reason = torch_private.not_measured(
                    "tensor memory by category", NotOnThisTorch(f"the memory tracker did not start: {type(e).__name__}: {e}"))

    def enable_snapshot(self, run_dir: Any) -> None:
        """Record the CUDA memory snapshot of the tracked step into run_dir (CUDA only; call on one rank)."""
        from pathlib import Path

        if self.device.type == "cuda":
            self.snapshot = MemorySnapshot(Path(run_dir) / SNAPSHOT_FILE)

    def snapshot_summary(self) -> dict[str, Any] | None:
        """summary.json's `memory_snapshot`: the file beside it, or why there is none (None off CUDA)."""
        if self.snapshot is None:
            return None
        return {"file": self.snapshot.file, "reason": self.snapshot.reason,
                "open_with": "https://pytorch.org/memory_viz (drag the file onto the page)"}

    def on_substep_end(self, args, state, control, **kwargs):  # noqa: ANN001
        if self.tracker is not None:
            self.shapes.append(self.counter.last_shape if self.counter else ())
            self.tracker.reset_mod_stats()  # the next micro-batch's forward is not "a second iteration"

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
        if self.tracker is None:
            self.untracked_steps_s.append(time.perf_counter() - self._started)
            return
        self.tracker.__exit__(None, None, None)
        if self._restore_hooks is not None:
            self._restore_hooks()
        self.tracked_step_s = time.perf_counter() - self._started
        if self.snapshot is not None:   # after the step's time: the dump is no part of it
            self.snapshot.stop()
        self.measured = as_mb(self._peaks, self.offload)
        self.shapes.append(self.counter.last_shape if self.counter else ())
        # (micro-batch, longest sequence): what the memory model needs to predict this step
        self.measured["batch_shape"] = [max(s[0] for s in self.shapes), max(s[-1] for s in self.shapes)] \
            if all(self.shapes) else None
        self.measured["micro_batches"] = len(self.shapes)
        if self.peaks is not None:
            self.measured["allocator_step_peak"] = round(self.peaks.since_reset()[0] / MB, 3)
            self.measured["allocator_peak"] = round(self.peaks.since_start()[0] / MB, 3)
        self.tracker = None

    def peaks_so_far(self) -> dict[str, int]:
        """Each category's peak (and `peak`) in bytes since the measured step began: a dry run reads them
        at the end of each phase (workshop.training.dryrun)."""
        return dict(self._peaks)

    def allocator_peaks(self) -> tuple[int, int]:
        """CUDA: the caching allocator's (allocated, reserved) peaks in bytes since train start, the
        counts from before the measured step's reset included."""
        assert self.peaks is not None, "allocator peaks exist on CUDA only"
        return self.peaks.since_start()

    def peak_so_far_mb(self) -> float | None:
        """The logging step's peak: the CUDA allocator's since train start, or on CPU the measured step's
        tensor peak — None in metrics.jsonl's records before the measured step (the second), since nothing
        else on a CPU counts tensors (docs/design.md says the same)."""
        if self.peaks is not None:
            return round(self.allocator_peaks()[0] / MB, 1)
        return round(self.measured["peak"], 1) if self.measured else None

    def overhead_pct(self, train_runtime_s: float) -> float | None:
        """The measured step's extra time over the median untracked step, as a share of the training time."""
        steps = sorted(self.untracked_steps_s)
        if self.tracked_step_s is None or not steps or train_runtime_s <= 0:
            return None
        typical = steps[len(steps) // 2]
        return round(100 * max(0.0, self.tracked_step_s - typical) / train_runtime_s, 2)
