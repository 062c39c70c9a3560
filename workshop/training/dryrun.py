"""A job at full size on paper: its memory by category, FLOPs and collectives, on any laptop, before it runs.

Why: no GPU has run the course, and the memory and communication models are checked against the
`tiny` model only, whose logits, embedding and blocks have none of BLOOM's proportions. PyTorch can run
the real model at its real size without memory or a GPU: fake tensors (`FakeTensorMode`: shapes,
dtypes and devices, no storage) and a fake process group (`fake` backend: collectives that return at
once) of the job's world size. The job's own code runs on them: the step's RunConfig, the model from
its profile's shapes (built on `meta`, never downloaded), the Trainer that wraps it (`CourseTrainer`:
the Hugging Face `fsdp`/`fsdp_config` through accelerate, or the student's `wrap_function`), the job's
precision, activation checkpointing, offload and `loss`, AdamW, the Trainer's step (`training_step`,
clipping, the optimizer). Three optimizer steps of the job's micro-batch (the longest: `max_length`) run,
measured as the job measures them: the second by the job's own tensor-memory tracker
(workshop.training.tensor_memory, the categories of summary.json's `tensor_mem_mb_per_rank`), the third,
whose collectives a job records, by `FlopCounterMode` and `CommDebugMode`.

What it is not: the fake device is the CPU. Fake CUDA tensors need CUDA streams inside FSDP2, which a
CPU build of torch lacks; the CPU device gives the same tensor bytes, without the CUDA context, the
caching allocator's reserve or NCCL's buffers (the fit check adds stated constants for those:
workshop.slurm.fit). One rank is simulated, rank 0: FSDP2 pads every shard to the first rank's size,
so no rank holds more. A CPU rank gathers one block at a time (nothing overlaps), where a GPU
prefetches the next block: a GPU's params peak holds one block more (memory.blocks_in_flight).
`loss = answer_only` cannot run on fake tensors (its gather of the answer positions has a
data-dependent shape), nor can DDP (its C++ reducer waits for a result the fake backend never gives):
both are refused. fp16's gradient scaler skips its inf check (a host sync).
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from typing import Any, Iterator

if __name__ == "__main__":
    # the dry run's own process (workshop.slurm.fit): no cyclic collection from here to its exit. Importing torch
    # and transformers makes the collector pass over a growing heap again and again: ~1 CPU-s of ~5 (see
    # workshop.training.gc_pause for the dry run itself)
    gc.disable()

import torch

from workshop.training import torch_private
from workshop.training.config import ConfigError, RunConfig
from workshop.training.gc_pause import cyclic_gc_paused
from workshop.training.counted_steps import INSTRUMENTED_STEPS
from workshop.training.dryrun_report import format_report
from workshop.training.tensor_memory import CATEGORIES

MB = 2**20
# the job's instrumented steps: the tensor-memory tracker's (2: AdamW's state exists, as at every later step)
# and the recorded collectives' (3), each on a step of its own
STEPS = max(INSTRUMENTED_STEPS.values())
FAKE_DEVICE_NOTE = ("fake tensors on the CPU device: tensor bytes only, without the CUDA context, the caching "
                    "allocator's reserve or NCCL's buffers; rank 0 simulated (FSDP2 pads every shard to its size)")
# c10d's operators (FSDP2, DDP) and the functional ones (DTensor's: the clipping norm's all-reduce) by kind
COLLECTIVE_KINDS = {
    **{("c10d", op): kind for kind, ops in (
        ("all_gather", ("_allgather_base_", "allgather_", "allgather_into_tensor_coalesced_")),
        ("reduce_scatter", ("_reduce_scatter_base_", "reduce_scatter_", "reduce_scatter_tensor_coalesced_")),
        ("all_reduce", ("allreduce_", "allreduce_coalesced_")), ("broadcast", ("broadcast_",)),
        ("all_to_all", ("alltoall_base_", "alltoall_"))) for op in ops},
    **{("_c10d_functional", op): kind for op, kind in (
        ("all_reduce", "all_reduce"), ("all_gather_into_tensor", "all_gather"),
        ("reduce_scatter_tensor", "reduce_scatter"), ("broadcast", "broadcast"))}}


def model_shapes(model: str) -> dict[str, int]:
    """The BLOOM config of a config's `model` without the Hub: a random or Hub profile's known shapes, or
    a local folder's config.json."""
    from workshop.training import models

    profile = models.resolve_profile(model)
    if profile.shapes is not None:
        return dict(profile.shapes)
    from transformers import BloomConfig

    cfg = BloomConfig.from_pretrained(profile.name)
    return dict(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, n_layer=cfg.n_layer, n_head=cfg.n_head)


def check_dry_runnable(cfg: RunConfig) -> None:
    """What fake tensors cannot run, refused with the field and what to do instead."""
    if cfg.sharding == "ddp":
        raise ConfigError("sharding", "ddp cannot run on the fake process group: DDP's reducer (C++) waits for its "
                          "all-reduce's result, which the fake backend never gives",
                          "dry-run the FSDP strategies or one process (sharding=none); the memory model predicts "
                          "DDP (workshop estimate), checked against CPU runs")
    if cfg.loss == "answer_only":
        raise ConfigError("loss", "answer_only cannot run on fake tensors: which positions it projects depends on "
                          "the labels' values (a data-dependent shape)",
                          "dry-run with loss=chunked or full; the memory model predicts answer_only "
                          "(workshop estimate), checked against CPU runs")


@contextlib.contextmanager
def fake_world(cfg: RunConfig) -> Iterator[None]:
    """The job's world as a fake process group, rank 0, with torchrun's variables; undone on exit
    (the process group, accelerate's shared state, the environment)."""
    import torch.distributed as dist

    if dist.is_initialized():
        raise RuntimeError("a process group already exists in this process: dry-run in a fresh one")
    # accelerate would put a CPU rank's batches on "cpu:0", FSDP2 its gathered parameters on "cpu": the same
    # memory to a real tensor, two devices to a fake one. ACCELERATE_TORCH_DEVICE names accelerate's.
    env = dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(cfg.world_size), LOCAL_WORLD_SIZE=str(cfg.procs_per_node),
               GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="0", ACCELERATE_TORCH_DEVICE="cpu")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    dist.init_process_group("fake", store=torch_private.fake_store(), rank=0, world_size=cfg.world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()
        _reset_accelerate()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _reset_accelerate() -> None:
    torch_private.reset_accelerate_state()


def build_model(cfg: RunConfig, fake_mode: Any) -> torch.nn.Module:
    """The job's model at its real shapes: built on `meta` (no weights, no Hub), then given fake storage
    on the CPU (`to_empty`; an in-place random init on fake tensors would fail, and needs no values)."""
    from transformers import BloomForCausalLM

    from workshop.training.models import bloom_config

    with torch.device("meta"):
        model = BloomForCausalLM(bloom_config(model_shapes(cfg.model)))
    with fake_mode:
        model.to_empty(device="cpu")
    model.tie_weights()   # to_empty gives each module its own copy of a tied weight: tie them again
    return model


def micro_batch(cfg: RunConfig) -> dict[str, Any]:
    """The job's largest micro-batch (batch_size x max_length, every position a token), as the collator hands
    it to the Trainer, with the collator's host-side token count. Small real tensors (zeros: an in-place
    random fill has no fake kernel); the fake mode takes them in as the Trainer moves them to its device."""
    from workshop.training.data import HOST_TOKENS

    shape = (cfg.batch_size, cfg.max_length)
    return {"input_ids": torch.zeros(shape, dtype=torch.long), "attention_mask": torch.ones(shape, dtype=torch.long),
            "labels": torch.zeros(shape, dtype=torch.long), HOST_TOKENS: cfg.batch_size * cfg.max_length}


def dry_run_trainer(cfg: RunConfig, model: torch.nn.Module) -> Any:
    """The job's Trainer (CourseTrainer, the job's TrainingArguments) around the fake model, its model
    wrapped and its optimizer made the way `Trainer.train` does it (`_prepare_for_training`: accelerate's
    prepare, FSDP2 for `fsdp`, DDP for ddp). What the dry run does not do is left out: evaluation,
    saving, logging to W&B. Wrapping runs outside the fake mode: FSDP2 builds its device mesh from real
    rank lists (the parameters are fake already, so every tensor it makes from them is fake too)."""
    from transformers import TrainingArguments
    from transformers.trainer_callback import TrainerState

    from workshop.training import sharding
    from workshop.training.metrics import StepCounter
    from workshop.training.train import training_kwargs
    from workshop.training.trainer import CourseTrainer

    kwargs = {**training_kwargs(cfg, torch.device("cpu"), cfg.world_size),
              "eval_strategy": "no", "save_strategy": "no", "report_to": [], "max_steps": STEPS}
    class DryRunTrainer(CourseTrainer):
        def _move_model_to_device(self, model: torch.nn.Module, device: Any) -> None:
            """The fake model is on the CPU already (moving a fake tensor swaps it, which a weak reference to
            it forbids); DDP and one-process jobs are moved here, FSDP ones by accelerate."""

    trainer = DryRunTrainer(model=model, args=TrainingArguments(**kwargs), counter=StepCounter(), loss=cfg.loss)
    trainer.state = TrainerState(max_steps=STEPS)
    trainer.accelerator.device_placement = False    # (as DryRunTrainer: nothing to move)
    torch_private.prepare_for_training(trainer, STEPS)
    if trainer.is_fsdp_enabled:
        # accelerate points the optimizer at the sharded parameters by matching data_ptr(), which fake
        # tensors lack (every one is 0): make the Trainer's optimizer again over the sharded parameters,
        # which is what that mapping gives a real run, and its scheduler with it
        trainer.optimizer, trainer.lr_scheduler = None, None
        trainer.optimizer = trainer.accelerator.prepare_optimizer(trainer.create_optimizer(trainer.model))
        trainer.create_scheduler(num_training_steps=STEPS, optimizer=trainer.optimizer)
    applied = sharding.describe_applied(trainer.model, trainer.model_wrapped)
    sharding.check_applied(cfg, applied)       # the job's own check: what runs is what was asked for
    return trainer, applied


def collective_recorder() -> Any:
    """A dispatch mode that keeps each collective's kind, elements and bytes of the whole tensor (an
    all-gather's output, a reduce-scatter's input: summary.json's `comm` convention), as `CommDebugMode`
    sees them. Not `CommDebugMode` itself: its module tracker fails (IndexError in its forward hook) on a
    step of several micro-batches, where the Trainer runs all but the last under `no_sync`."""
    class CollectiveBytes(torch_private.dispatch_mode_class()):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[dict[str, Any]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            if any(t.__name__ == "DTensor" for t in types):
                return NotImplemented   # as CommDebugMode: DTensor desugars into collectives on plain tensors first
            name = str(func).split(".")   # an OpOverload prints as "c10d._allgather_base_.default"
            kind = COLLECTIVE_KINDS.get(tuple(name[:2])) if len(name) > 2 else None
            if kind is not None:
                self.calls.append(_collective(kind, args))
            return func(*args, **(kwargs or {}))

    return CollectiveBytes()


def _collective(kind: str, args: tuple[Any, ...]) -> dict[str, Any]:
    """One collective call: its whole tensor (an all-gather's output and a reduce-scatter's input are
    c10d's first and second argument; an all-reduce's list of tensors the first)."""
    first, second = args[0], args[1] if len(args) > 1 else None
    if kind == "reduce_scatter" and torch.is_tensor(second) and torch.is_tensor(first) \
            and second.numel() > first.numel():
        tensors = [second]
    elif torch.is_tensor(first):
        tensors = [first]
    else:
        tensors = [t for t in (first if isinstance(first, (list, tuple)) else [first]) if torch.is_tensor(t)]
    return {"kind": kind, "elements": sum(t.numel() for t in tensors),
            "bytes": sum(t.numel() * t.element_size() for t in tensors),
            "dtype": str(tensors[0].dtype).removeprefix("torch.") if tensors else None}


def by_kind(calls: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The calls summed per kind, as summary.json's `comm.per_rank[r].by_kind` (calls, elements, bytes)."""
    out: dict[str, dict[str, int]] = {}
    for c in calls:
        slot = out.setdefault(c["kind"], {"calls": 0, "elements": 0, "bytes": 0})
        slot["calls"] += 1
        slot["elements"] += c["elements"]
        slot["bytes"] += c["bytes"]
    return out


class PhaseMeter:
    """What the measured step holds at the end of each phase (forward of the last micro-batch, its
    backward, the optimizer step), and the step's peak up to then, from the tracker's running sums."""

    def __init__(self, callback: Any) -> None:
        self.callback = callback
        self.phases: dict[str, dict[str, float]] = {}

    def mark(self, phase: str) -> None:
        tracker = self.callback.tracker
        if tracker is None:
            return
        alive, peaks = getattr(tracker, "category_sums", {}), self.callback.peaks_so_far()
        self.phases[phase] = {"alive_mb": round(alive.get("peak", 0) / MB, 3),
                              "peak_so_far_mb": round(peaks.get("peak", 0) / MB, 3),
                              **{f"{c}_mb": round(alive.get(c, 0) / MB, 3) for c in (*CATEGORIES, "host")}}


def train_steps(cfg: RunConfig, trainer: Any, fake_mode: Any) -> dict[str, Any]:
    """The Trainer's optimizer step (`Trainer._run_epoch`'s: micro-batches without sync but the last,
    `training_step`, clipping, the optimizer, the scheduler, zero_grad) as the job runs it, STEPS times:
    the job's tensor-memory tracker on its step (2), FlopCounterMode and the collective recorder on the
    step whose collectives a job records (3), neither inside the other's step, as in the job."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import TrainerControl

    from workshop.training.tensor_memory import TensorMemoryCallback

    args, control, micro = trainer.args, TrainerControl(), cfg.effective_grad_acc
    memory = TensorMemoryCallback(torch.device("cpu"), cfg.offload, trainer.counter)
    memory.model = trainer.model
    phases, flops, comm = PhaseMeter(memory), FlopCounterMode(display=False), collective_recorder()
    started = time.perf_counter()
    with fake_mode:
        for step in range(1, STEPS + 1):
            tracked, recorded = step == INSTRUMENTED_STEPS["tensor_memory"], step == INSTRUMENTED_STEPS["comm"]
            # the Trainer takes the step's batches (and counts their tokens across ranks) before its step begins
            batches, items = trainer.get_batch_samples(iter([micro_batch(cfg) for _ in range(micro)]), micro,
                                                       args.device)
            if tracked:
                memory.on_step_begin(args, trainer.state, control, optimizer=trainer.optimizer)
            with flops if recorded else contextlib.nullcontext(), comm if recorded else contextlib.nullcontext():
                optimizer_step(trainer, batches, items, phases if tracked else None,
                               (lambda: memory.on_substep_end(args, trainer.state, control)) if tracked else None)
            if tracked:
                memory.on_step_end(args, trainer.state, control)
            trainer.state.global_step += 1
    if memory.measured is None:
        raise RuntimeError(f"the tensor-memory tracker measured nothing: {memory.reason}")
    return {"memory_mb": memory.measured, "phases": phases.phases, "flops_per_step": int(flops.get_total_flops()),
            "collectives": comm.calls, "steps_s": round(time.perf_counter() - started, 2)}


def optimizer_step(trainer: Any, batches: list[dict[str, Any]], items: Any, phases: PhaseMeter | None,
                   substep_end: Any) -> None:
    """One optimizer step of the job's micro-batches, as `Trainer._run_epoch` runs it."""
    model, acc = trainer.model_wrapped, trainer.accelerator
    for i, inputs in enumerate(batches):
        last = i == len(batches) - 1
        torch_private.set_sync_gradients(acc, last)
        hook = trainer.model.register_forward_hook(lambda *_: phases.mark("forward")) \
            if phases is not None and last else None
        with contextlib.nullcontext() if last else acc.no_sync(model=model):
            trainer.training_step(model, inputs, items)
        if hook is not None:
            hook.remove()
        if substep_end is not None and not last:
            substep_end()
    if phases is not None:
        phases.mark("backward")
    if trainer.args.max_grad_norm > 0:
        torch_private.clip_grad_norm(trainer, model)
    _step_optimizer(trainer)
    trainer.lr_scheduler.step()
    model.zero_grad()
    if phases is not None:
        phases.mark("optimizer")


def _step_optimizer(trainer: Any) -> None:
    """The optimizer's step as accelerate runs it, but for fp16's gradient scaler: its step asks whether
    any gradient overflowed (`.item()`, a host sync a fake tensor cannot answer), so the dry run steps the
    inner optimizer, as every step the scaler does not skip does, then updates the scale (no sync there)."""
    optimizer = trainer.optimizer
    scaler = getattr(trainer.accelerator, "scaler", None)
    if scaler is None:
        optimizer.step()
        return
    getattr(optimizer, "optimizer", optimizer).step()
    scaler.update()


@contextlib.contextmanager
def job_world(cfg: RunConfig) -> Iterator[None]:
    """The fake process group for a distributed job; a one-process job without sharding has none (the job
    drops torchrun's variables: workshop.training.train.leave_single_process_undistributed)."""
    if cfg.sharding != "none":
        with fake_world(cfg):
            yield
        return
    try:
        yield
    finally:
        _reset_accelerate()


def dry_run(cfg: RunConfig) -> dict[str, Any]:
    """The job of `cfg` at full size on fake tensors: rank 0's memory by category (its peak and each
    phase), the FLOPs of one optimizer step and every collective of one step (module docstring)."""
    from workshop.training import models, wrap_function

    check_dry_runnable(cfg)
    started = time.perf_counter()
    with cyclic_gc_paused(), job_world(cfg):
        fake = torch_private.fake_tensor_mode()
        model = build_model(cfg, fake)
        if cfg.wrap_function:
            model = wrap_function.apply(cfg, model)    # the student's own fully_shard calls, as the job
        trainer, applied = dry_run_trainer(cfg, model)
        figures = train_steps(cfg, trainer, fake)
    calls = figures.pop("collectives")
    return {
        "config": {k: getattr(cfg, k) for k in ("model", "sharding", "nodes", "procs_per_node", "world_size",
                                                "precision", "batch_size", "max_length", "loss", "offload",
                                                "activation_checkpointing", "replicas", "shard_size")},
        "grad_acc": cfg.effective_grad_acc, "device": "cpu (fake tensors)", "rank": 0, "note": FAKE_DEVICE_NOTE,
        "params_total": models.count_parameters(model), "params_local": applied.get("params_local"),
        "sharding_applied": applied.get("sharding_applied"), "mesh": applied.get("mesh"),
        "mp_param_dtype": applied.get("mp_param_dtype"), "mp_reduce_dtype": applied.get("mp_reduce_dtype"),
        "fsdp_units": applied.get("fsdp_units"), **figures,
        "tokens_per_step": cfg.batch_size * cfg.max_length * cfg.effective_grad_acc,
        "comm": {"by_kind": by_kind(calls), "calls": calls},
        "seconds": round(time.perf_counter() - started, 2)}


def main(argv: list[str] | None = None) -> int:
    """`python -m workshop.training.dryrun --config CONFIG.json [--json]`: the dry run of a job's own config
    file (what `workshop dryrun STEP` and the submission's fit check run, in a process of their own)."""
    import argparse
    import json
    import sys

    from workshop.training.config import load_config

    p = argparse.ArgumentParser(prog="python -m workshop.training.dryrun", description=main.__doc__)
    p.add_argument("--config", required=True, help="a job's config.json (RunConfig.to_json())")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = p.parse_args(argv)
    try:
        result = dry_run(load_config(file=args.config))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    print(json.dumps(result) if args.json else format_report(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
