"""The one training script: every course step, every strategy, 1..N processes on 1..M nodes.

    torchrun --nproc-per-node 2 -m workshop.training.train --sharding full_shard --epochs 2
    workshop train --config run.toml --batch-size 8

Config precedence: defaults < --config file < the seed's env variables (MODEL_NAME, BATCH_SIZE, ...)
< flags. The run leaves run_args.json, metrics.jsonl and summary.json in --output-dir
(docs/design.md), and stops with an error rather than train under a strategy it was not asked for.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, MutableMapping

from workshop.training.checkpoints import latest_checkpoint, records_until, seal
from workshop.training.accelerate_yaml import follow_launch, launched_with
from workshop.training.config import (ConfigError, RunConfig, add_config_arguments, config_from_args, read_file,
                                      written_fields)
from workshop.training import log_records


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workshop train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_arguments(parser)
    parser.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    return parser


def launch_world() -> tuple[int, int, int]:
    """(rank, local rank, world size) as torchrun set them; a plain `python` run is one process."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)),
            int(os.environ.get("WORLD_SIZE", 1)))


def check_launch(cfg: RunConfig, world: int) -> None:
    if world != cfg.world_size:
        raise ConfigError("procs_per_node", f"the config asks for {cfg.world_size} processes (nodes={cfg.nodes} x "
                          f"procs_per_node={cfg.procs_per_node}) but {world} were launched",
                          f"launch with torchrun --nnodes {cfg.nodes} --nproc-per-node {cfg.procs_per_node}, "
                          "or change nodes/procs_per_node")


def world_from_launcher(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, int]:
    """Under torchrun, a config that fixes no world (neither nodes nor procs_per_node, in a file or a
    flag) takes the launcher's: `torchrun --nproc-per-node 2 -m workshop.training.train --sharding full_shard`
    runs on 2 processes. A config that fixes one keeps it ({}), and `check_launch` compares."""
    if "LOCAL_WORLD_SIZE" not in env or args.nodes is not None or args.procs_per_node is not None:
        return {}
    if args.config is not None and {"nodes", "procs_per_node"} & set(read_file(args.config)):
        return {}
    world, per_node = int(env["WORLD_SIZE"]), int(env["LOCAL_WORLD_SIZE"])
    return {"nodes": max(1, world // per_node), "procs_per_node": per_node}


TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


# What torchrun gives the one process of a world of one (the bandwidth self-test's --one-process reads it too)
ONE_PROCESS_ENV = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}


def stand_in_for_torchrun(cfg: RunConfig, env: MutableMapping[str, str] = os.environ) -> None:
    """A one-process run started without torchrun gets the environment torchrun would give it.

    The batch script starts a one-process job with plain `python` (render.py): torchrun's own
    interpreter and torch import cost ~2 s of CPU per job for nothing to coordinate. With this
    environment a one-process FSDP run still builds its (one-rank) process group. Its store listens
    on port 0, which the kernel assigns as it listens: no other rank has to find it, and a port chosen
    first and listened on seconds later (after the imports) can be taken meanwhile (slurm/ports.py)."""
    if "WORLD_SIZE" in env or cfg.world_size != 1:
        return
    env.update(ONE_PROCESS_ENV)


def skip_datasets_unless_needed(cfg: RunConfig) -> None:
    """The fixture is read from JSON, never through `datasets`; yet transformers.trainer imports it
    (with pandas and pyarrow: ~1 s of CPU per process) only because it is installed. A None entry in
    sys.modules makes `import datasets` fail and importlib report it absent, so transformers skips
    it. Any other dataset is loaded with `datasets` (data.load_examples) and keeps it."""
    if cfg.dataset == "fixture":
        sys.modules.setdefault("datasets", None)  # type: ignore[arg-type]
    elif "datasets" in sys.modules and sys.modules["datasets"] is None:
        del sys.modules["datasets"]  # an earlier fixture run in this process hid it


def leave_single_process_undistributed(cfg: RunConfig) -> None:
    """A one-process run without sharding is not distributed: without this, accelerate sees torchrun's
    variables and wraps the model in a one-rank DDP, whose gradient buckets cost real GPU memory."""
    if cfg.sharding == "none":
        for var in TORCHRUN_VARS:
            os.environ.pop(var, None)


def resolve_device(cfg: RunConfig, local_rank: int) -> "Any":
    import torch

    if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("device", "cuda was asked for but no GPU is visible to this process",
                              "run on a GPU node (check --gpus in the batch script) or set device=cpu")
        device = torch.device("cuda", local_rank)
        check_precision_on_gpu(cfg, torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device))
        return device
    return torch.device("cpu")


def check_precision_on_gpu(cfg: RunConfig, name: str, capability: tuple[int, int]) -> None:
    """bf16 needs compute capability 8.0 (A100, H100, L4, ...); a V100 (7.0) would emulate it, slowly, or
    fail deep in a kernel. The submit-time check (workshop.slurm.steps.check_precision) knows the
    partition's GPU by name; this one reads the device itself."""
    from workshop.training.gpus import bf16_capable

    if cfg.precision == "bf16" and not bf16_capable(capability):
        raise ConfigError("precision", f"bf16 needs a GPU of compute capability 8.0 or newer; this process has "
                          f"{name} ({capability[0]}.{capability[1]})",
                          "use precision=fp16 on this GPU (with the gradient scaler), or run on a partition "
                          "with A100/H100 GPUs")


def process_group_backend(cfg: RunConfig, device: "Any") -> str:
    """The backend of the run's process group: gloo on a CPU, NCCL on a GPU.

    With FSDP2 CPU offload on a GPU, the sharded gradients and AdamW's state are CPU DTensors, so
    gradient clipping's norm (max_grad_norm, on by default) and fp16's found-inf check all-reduce CPU
    tensors, which a NCCL-only group cannot do ("No backend type associated with device type cpu",
    pytorch/pytorch#148532). Such a run gets gloo for CPU tensors beside NCCL for CUDA ones, as
    accelerate does when its own FSDP environment asks for offload, and as torchtune does."""
    if device.type == "cpu":
        return "gloo"
    return "cuda:nccl,cpu:gloo" if cfg.offload else "nccl"


def init_process_group(cfg: RunConfig, device: "Any") -> None:
    """Create the run's process group (a run without sharding has none) before the Trainer would, with
    the backend above and the collective timeout: transformers 5.23 hands ddp_timeout to the group only
    on a GPU (its CPU path drops it), so on a CPU a hung rank would hold the others for gloo's default
    30 minutes. accelerate then finds the group made and uses it."""
    import datetime

    import torch.distributed as dist

    if cfg.sharding == "none" or dist.is_initialized():
        return
    if device.type == "cuda":
        import torch

        torch.cuda.set_device(device)   # each rank's NCCL communicator on its own GPU
    dist.init_process_group(backend=process_group_backend(cfg, device),
                            timeout=datetime.timedelta(seconds=collective_timeout_s(cfg)))


DEFAULT_COLLECTIVE_TIMEOUT_S = 1800   # torch's and TrainingArguments' own default


def collective_timeout_s(cfg: RunConfig, env: Mapping[str, str] = os.environ) -> int:
    """How long a collective may wait before the process group gives up (TrainingArguments' ddp_timeout):
    the config's `collective_timeout_s`, else the batch script's (WORKSHOP_COLLECTIVE_TIMEOUT_S: a
    quarter of the job's time limit, workshop.slurm.render), else torch's 30 minutes."""
    if cfg.collective_timeout_s > 0:
        return cfg.collective_timeout_s
    return int(env.get("WORKSHOP_COLLECTIVE_TIMEOUT_S") or 0) or DEFAULT_COLLECTIVE_TIMEOUT_S


def training_arguments(cfg: RunConfig, device: "Any", world: int) -> "Any":
    from transformers import TrainingArguments

    return TrainingArguments(**training_kwargs(cfg, device, world))


def training_kwargs(cfg: RunConfig, device: "Any", world: int) -> dict[str, Any]:
    """TrainingArguments for a run on `device` with `world` processes (built apart so that a test can
    read what a CUDA run would be given on a machine without CUDA)."""
    from workshop.training.sharding import trainer_sharding_kwargs

    on_cpu = device.type == "cpu"
    kwargs: dict[str, Any] = dict(
        output_dir=str(cfg.checkpoint_root),   # the Trainer writes only checkpoint-N folders there
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.effective_grad_acc,
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps if cfg.max_steps > 0 else -1,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        lr_scheduler_type="linear",
        logging_steps=cfg.logging_steps,
        logging_first_step=False,
        # the Trainer's NaN filter asks `torch.isnan(loss) or torch.isinf(loss)` of every micro-batch: a
        # host sync per step on a GPU. Off, a NaN loss is logged as NaN, which is what happened.
        logging_nan_inf_filter=False,
        eval_strategy="epoch",
        # sharded (SHARDED_STATE_DICT under FSDP): each rank writes its own shard, none gathers the model
        # transformers also saves at the last step under "steps": checkpoint_at_end alone sets a save_steps
        # no run reaches, which leaves that last save only
        save_strategy="steps" if cfg.checkpoint_every > 0 or cfg.checkpoint_at_end else "no",
        save_steps=cfg.checkpoint_every if cfg.checkpoint_every > 0 else 10**9,
        save_total_limit=2,   # the latest, and the one before it in case the job dies mid-save
        report_to=["wandb"] if cfg.wandb != "disabled" else [],
        run_name=Path(cfg.output_dir).name,
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=cfg.precision == "bf16",
        fp16=cfg.precision == "fp16",
        use_cpu=on_cpu,
        ddp_backend=process_group_backend(cfg, device) if cfg.sharding != "none" else None,
        ddp_timeout=collective_timeout_s(cfg),
        dataloader_num_workers=0,
        disable_tqdm=True,
        remove_unused_columns=False,
        # every BLOOM parameter gets a gradient each step: DDP need not search the graph for unused
        # ones (Trainer's default for a model without gradient checkpointing is to search, which
        # warns in every DDP log and costs an extra autograd-graph traversal per step)
        ddp_find_unused_parameters=False,
    )
    kwargs[checkpointing_argument()] = cfg.activation_checkpointing and not cfg.is_fsdp
    kwargs.update(trainer_sharding_kwargs(cfg))
    return kwargs


def checkpointing_argument() -> str:
    """TrainingArguments' name for the Trainer's own activation checkpointing: `activation_checkpointing` in
    transformers 5.23 (the pin; `gradient_checkpointing` is its deprecated alias there), while 5.17 (the lent
    GPU machine's) knows only `gradient_checkpointing` and raises TypeError on the other."""
    import dataclasses

    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def configure_wandb(cfg: RunConfig) -> None:
    """W&B offline by default: runs land in the run folder and are synced later with `wandb sync`."""
    if cfg.wandb == "disabled":
        return
    os.environ["WANDB_MODE"] = cfg.wandb
    os.environ.setdefault("WANDB_DIR", cfg.output_dir)
    os.environ.setdefault("WANDB_PROJECT", "fsdp-workshop")
    os.environ["WANDB_SILENT"] = "true"


_USR1_AT: list[float] = []


def listen_for_stop() -> Callable[[], bool]:
    """Catch USR1 from the first moment (its default action kills the process) and return the
    question the step-end callback asks: did USR1 arrive here, or did the batch shell leave
    $WORKSHOP_STOP_FILE (the way a USR1 for the job reaches ranks on every node)?"""
    signal.signal(signal.SIGUSR1, lambda signum, frame: _USR1_AT.append(time.time()))
    stop_file = Path(os.environ["WORKSHOP_STOP_FILE"]) if os.environ.get("WORKSHOP_STOP_FILE") else None
    return lambda: bool(_USR1_AT) or (stop_file is not None and stop_file.exists())


def run(cfg: RunConfig) -> dict[str, Any]:
    """Train, evaluate and record one run; returns the summary (on every rank).

    The garbage collector is off while the libraries load and the trainer is built: importing torch,
    transformers and accelerate creates a few hundred thousand objects, and the collections they
    trigger cost each process about 1 s of its ~5 s start-up (measured, 2-core machine). Training
    runs with it on, the start-up's objects frozen out of its scans; both are undone on return."""
    gc.disable()
    try:
        return _run(cfg)
    finally:
        gc.unfreeze()
        gc.enable()


@dataclass
class _Parts:
    """The Trainer's callbacks, each kept for what it reports after training."""

    callback: Any
    tensor_mem: Any
    comm: Any
    stopper: Any
    window: Any
    batch_probe: Any


@dataclass
class _Trained:
    """What a finished training leaves for its summary, under the names `_run` gave them."""

    cfg: RunConfig
    world: int
    hosts: list[str]
    device: Any
    is_main: bool
    n_params: int
    train_ds: Any
    model: Any
    trainer: Any
    parts: _Parts
    applied: dict[str, Any]
    result: Any
    resume_from: Any
    evals: list[dict[str, Any]]
    before: dict[str, Any]
    after: dict[str, Any]
    train_runtime: float


def _prepare(cfg: RunConfig) -> tuple[Callable[[], bool], int, int, Any, Path, Any]:
    """Before torch: the stop signal, the launch checked, the device, the output folder, the checkpoint to resume."""
    stop_requested = listen_for_stop()
    skip_datasets_unless_needed(cfg)
    stand_in_for_torchrun(cfg)
    rank, local_rank, world = launch_world()
    check_launch(cfg, world)
    leave_single_process_undistributed(cfg)
    device = resolve_device(cfg, local_rank)
    configure_wandb(cfg)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    resume_from = latest_checkpoint(cfg.checkpoint_root) if cfg.resume else None
    if cfg.resume and resume_from is None:
        raise ConfigError("resume", f"there is no complete checkpoint-N folder in {str(cfg.checkpoint_root)!r} to "
                          "resume from",
                          "run without resume, and save checkpoints next time (checkpoint_every=N, or a site "
                          "profile with signal_lead_s so Slurm warns the job before its time limit)")
    return stop_requested, rank, world, device, out, resume_from


def _start_records(cfg: RunConfig, out: Path, prior: list[dict[str, Any]], resume_from: Any, hosts: list[str],
                   world: int, device: Any) -> None:
    """Rank 0: metrics.jsonl cut back to the resumed step, run_args.json and its log line, the run's first line."""
    from workshop.training import run_record

    tmp = out / "metrics.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in prior))
    tmp.replace(out / "metrics.jsonl")
    record = run_record.run_args(cfg)
    if resume_from:
        record["resumed_from"] = {"checkpoint": resume_from[0].name, "step": resume_from[1]}
    run_record.write_json(out / "run_args.json", record)
    log_records.write(log_records.RUN_ARGS, record, default=str)
    print(f"[workshop] {cfg.sharding} on {world} process(es), {cfg.nodes} node(s) {sorted(set(hosts))}, "
          f"device {device.type}, precision {cfg.precision}, model {cfg.model}", flush=True)


def _model_and_data(cfg: RunConfig) -> tuple[Any, Any, list[Any], Any, Any]:
    """The tokenizer, the model (its block classes checked against the config) and the encoded examples."""
    from workshop.training import data, models, sharding

    tok = models.load_tokenizer(cfg.model)
    model = models.build_model(cfg.model, tok, cfg.seed)
    sharding.check_block_classes(cfg, model)
    train_ex = data.load_examples(cfg.dataset, "train", cfg.train_size)
    eval_ex = data.load_examples(cfg.dataset, cfg.eval_split, cfg.eval_size)
    return tok, model, eval_ex, data.EncodedDataset(tok, train_ex, cfg.max_length), \
        data.EncodedDataset(tok, eval_ex, cfg.max_length)


def _final_evals(trainer: Any, callback: Any) -> list[dict[str, Any]]:
    """The run's eval records, ending with one at the last step (evaluated now when the schedule left none there)."""
    evals = [r for r in callback.records if r["kind"] == "eval"]
    if not evals or evals[-1]["step"] != trainer.state.global_step:
        trainer.evaluate()
        evals = [r for r in callback.records if r["kind"] == "eval"]
    return evals


def _callbacks(cfg: RunConfig, out: Path, device: Any, is_main: bool, prior: list[dict[str, Any]], n_params: int,
               model: Any, counter: Any, hosts: list[str], rank: int, stop_requested: Callable[[], bool]) -> _Parts:
    """The Trainer's callbacks, in the order their hooks must run."""
    from workshop.training.batch_probe import GlobalBatchProbe
    from workshop.training.comm_recorder import CommRecorder
    from workshop.training.metrics import MetricsCallback
    from workshop.training.tensor_memory import TensorMemoryCallback
    from workshop.training.throughput import ThroughputWindow
    from workshop.training.trainer import CheckpointOnSignal, stop_check_every

    callback = MetricsCallback(out, counter, device, cfg.precision, n_params, model.config.n_layer,
                               model.config.hidden_size, is_main)
    callback.records.extend(prior)
    # the instrumented steps (counted_steps.INSTRUMENTED_STEPS) run under these; the window counts the others
    callback.tensor_memory = tensor_mem = TensorMemoryCallback(device, cfg.offload, counter)
    if is_main:
        tensor_mem.enable_snapshot(out)   # CUDA: the tracked step's memory snapshot, beside summary.json
    # first among the callbacks: its step's trace closes before their collectives (stop flag, logs)
    comm = CommRecorder(out, device, counter, hosts, rank, is_main, cfg.comm_record, tensor_mem.measure_step)
    stopper = CheckpointOnSignal(is_main, stop_requested, every=stop_check_every(device))
    callback.window = window = ThroughputWindow(counter, device)   # after `stopper`: a save ends its segment
    batch_probe = GlobalBatchProbe(counter)
    return _Parts(callback, tensor_mem, comm, stopper, window, batch_probe)


def build_summary(t: _Trained) -> dict[str, Any]:
    """summary.json (docs/design.md): every rank gathers its figures, in the same order on each."""
    import torch
    import torch.distributed as dist

    from workshop.training import scaler, torch_private
    from workshop.training.metrics import all_gather

    cfg, world, hosts, device, is_main, n_params = t.cfg, t.world, t.hosts, t.device, t.is_main, t.n_params
    applied, result, resume_from, evals, before, after = t.applied, t.result, t.resume_from, t.evals, t.before, t.after
    trainer, train_ds, model, train_runtime = t.trainer, t.train_ds, t.model, t.train_runtime
    callback, tensor_mem, comm = t.parts.callback, t.parts.tensor_mem, t.parts.comm
    window, batch_probe = t.parts.window, t.parts.batch_probe
    params_local = all_gather(applied.get("params_local"))
    local_shapes = all_gather(applied.get("local_shapes"))
    stored_shapes = all_gather(applied.get("stored_shapes"))
    batch_figures = batch_probe.gathered()
    if is_main:
        # one writer: lines from several ranks into one pipe can splice into rank 0's long lines
        for r, (host, local) in enumerate(zip(hosts, params_local)):
            print(f"[workshop rank {r} host {host}] params_local={local} of {n_params} ({applied.get('wrapper')})",
                  flush=True)
    trains = [r for r in callback.records if r["kind"] == "train"]
    throughput = window.figures(all_gather, callback.flops_per_token, callback.peak)
    peaks = [r["peak_mem_mb_per_rank"] for r in trains]
    per_rank = [max((v for v in col if v is not None), default=None) for col in zip(*peaks)]
    utils = [r["gpu_util_pct"] for r in trains if r["gpu_util_pct"] is not None]
    summary = {
        "status": "completed", "world_size": world, "nodes": cfg.nodes, "hosts": hosts, "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "precision": cfg.precision, "model": cfg.model, "sharding_requested": cfg.sharding,
        "sharding_applied": applied.get("sharding_applied"), "wrapper": applied.get("wrapper"),
        "reshard_after_forward": applied.get("reshard_after_forward"),
        "offload_applied": applied.get("offload_applied"), "activation_checkpointing": cfg.activation_checkpointing,
        "mesh": applied.get("mesh"), "fsdp_units": applied.get("fsdp_units"),
        "params_total": n_params, "params_local_per_rank": params_local,
        "train_loss": round(train_loss(result, trains, resume_from is not None), 6),
        "resumed_from_step": resume_from[1] if resume_from else None,
        "eval_losses": [r["eval_loss"] for r in evals], "final_eval_loss": evals[-1]["eval_loss"],
        "train_samples_per_s": throughput["train_samples_per_s"],
        "train_tokens_per_s": throughput["train_tokens_per_s"],
        "throughput_window": throughput["throughput_window"],
        "eval_samples_per_s": evals[-1].get("eval_samples_per_s"),
        "steps": trainer.state.global_step,
        "steps_per_epoch": -(-len(train_ds) // (cfg.batch_size * world * cfg.effective_grad_acc)),
        "global_batch": cfg.effective_global_batch, "grad_acc": cfg.effective_grad_acc,
        "batch_size": cfg.batch_size, "max_length": cfg.max_length,
        "peak_mem_mb": max((v for v in per_rank if v is not None), default=None), "peak_mem_mb_per_rank": per_rank,
        "mem_kind": trains[-1]["mem_kind"] if trains else None,
        "rss_mb": max((r.get("rss_mb") or 0) for r in trains) if trains else None,
        "tensor_mem_mb_per_rank": all_gather(tensor_mem.measured),
        "tensor_mem_overhead_pct": tensor_mem.overhead_pct(train_runtime),
        "memory_snapshot": tensor_mem.snapshot_summary(),
        "peak_reserved_mb": max((r["peak_reserved_mb"] or 0) for r in trains) if device.type == "cuda" else None,
        "gpu_util_pct": round(sum(utils) / len(utils), 1) if utils else None,
        "mfu": throughput["mfu"],
        "process_group_backend": str(dist.get_backend()) if dist.is_initialized() else None,
        "collective_timeout_s": collective_timeout_s(cfg) if dist.is_initialized() else None,
        "grad_scaler": scaler.describe(getattr(trainer.accelerator, "scaler", None)),
        "em_before": before.get("exact_match"), "f1_before": before.get("f1"),
        "em_after": after.get("exact_match"), "f1_after": after.get("f1"),
        "sample_predictions": after.get("examples"),
        "train_runtime_s": round(train_runtime, 2),
        "comm": comm.summary(train_runtime),
        # what this torch lacked a private name for (workshop/training/torch_private.py); empty when all ran
        "not_measured": torch_private.not_measured_lines(),
        # which loss ran (workshop.training.loss), and the positions one micro-batch of the tensor-memory
        # step projected onto the vocabulary on each rank (the memory model's logits rows)
        "loss": cfg.loss,
        "logits_positions_per_rank": all_gather(trainer.logits_positions.get(tensor_mem.measure_step)),
        "answer_positions_per_rank": all_gather(trainer.answer_positions.get(tensor_mem.measure_step)),
        # the largest logits tensor lm_head built in that step, MB (LogitsMeter: its output's bytes)
        "logits_mb_per_rank": all_gather(round(trainer.logits_bytes.get(tensor_mem.measure_step, 0) / 2**20, 4)),
    }
    summary.update(applied_fsdp_fields(cfg, applied, local_shapes, model.config, stored_shapes), **batch_figures,
                   launcher=launched_with(os.environ))
    return summary


def _run(cfg: RunConfig) -> dict[str, Any]:
    stop_requested, rank, world, device, out, resume_from = _prepare(cfg)

    if cfg.comm_record:
        from workshop.training.comm_recorder import enable_flight_recorder

        enable_flight_recorder()  # before the process group exists: it reads the switch when a group is made

    import torch.distributed as dist
    from transformers.utils import logging as hf_logging

    from workshop.training import data, evaluation, models, run_record, sharding, wrap_function
    from workshop.training.metrics import StepCounter, all_gather
    from workshop.training.trainer import CourseTrainer

    hf_logging.set_verbosity_warning()
    is_main = rank == 0
    init_process_group(cfg, device)
    args = training_arguments(cfg, device, world)
    hosts = all_gather(run_record.node_name())
    prior = records_until(out / "metrics.jsonl", resume_from[1]) if resume_from else []
    if is_main:
        _start_records(cfg, out, prior, resume_from, hosts, world, device)

    tok, model, eval_ex, train_ds, eval_ds = _model_and_data(cfg)
    n_params = models.count_parameters(model)

    synced = world > 1
    before: dict[str, Any] = {}
    if cfg.eval_generate:
        model.to(device)
        before = evaluation.em_f1(model, tok, eval_ex, cfg.max_length, cfg.max_new_tokens, device, synced=False)

    if cfg.wrap_function:
        model = wrap_function.apply(cfg, model)    # the student's own fully_shard calls, from the job's copy
    counter = StepCounter()
    parts = _callbacks(cfg, out, device, is_main, prior, n_params, model, counter, hosts, rank, stop_requested)
    callback, stopper = parts.callback, parts.stopper
    trainer = CourseTrainer(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                            data_collator=data.DynamicPaddingCollator(tok.pad_token_id, cfg.max_length if cfg.pad_to_max_length else 0), processing_class=tok,
                            callbacks=[parts.comm, parts.tensor_mem, callback, stopper, parts.window,
                                       parts.batch_probe], counter=counter,
                            loss=cfg.loss)
    applied: dict[str, Any] = {}

    def verify_wrapping() -> None:
        applied.update(sharding.describe_applied(trainer.model, trainer.model_wrapped))
        sharding.check_applied(cfg, applied)

    callback.on_train_begin_hooks.append(verify_wrapping)
    gc.freeze()
    gc.enable()
    started = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=str(resume_from[0]) if resume_from else None)
    train_runtime = time.perf_counter() - started
    if stopper.stopped_at is not None:
        return stopped_early(out, stopper.stopped_at, is_main, cfg.checkpoint_root)
    evals = _final_evals(trainer, callback)

    after: dict[str, Any] = {}
    if cfg.eval_generate:
        after = evaluation.em_f1(trainer.model, tok, eval_ex, cfg.max_length, cfg.max_new_tokens, device,
                                 synced=synced)
    summary = build_summary(_Trained(cfg, world, hosts, device, is_main, n_params, train_ds, model, trainer, parts,
                                     applied, result, resume_from, evals, before, after, train_runtime))
    if is_main:
        run_record.write_json(out / "summary.json", summary)
        log_records.write(log_records.SUMMARY, summary)
        seal(out)
    # Release the wrapped model (and any gloo work it still references) while the interpreter is
    # fully alive: freed during interpreter shutdown instead, gloo's worker threads can abort the
    # process (SIGABRT) after a run that completed.
    del trainer, model
    gc.unfreeze()   # the model was built before the freeze: let this collection reach it
    gc.collect()
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return summary


def applied_fsdp_fields(cfg: RunConfig, applied: dict[str, Any], local_shapes: list[dict[str, list[int]]],
                        model_config: Any, stored_shapes: list[dict[str, list[int]]] | None = None) -> dict[str, Any]:
    """summary.json's read-back of the FSDP wrapping the job applied, beside what was asked for: the
    checks of notebook 02 read these (units, block class, policy, per-rank shard shapes, and the padded
    storage behind each rank's shard)."""
    from workshop.training import sharding, wrap_function
    from workshop.training.fsdp_arguments import native_fsdp_arguments

    native = native_fsdp_arguments(cfg)
    return {
        "hf_fsdp": native[0] if native else None, "hf_fsdp_config": native[1] if native else None,
        "fsdp_unit_names": applied.get("fsdp_unit_names"), "blocks_wrapped": applied.get("blocks_wrapped"),
        "wrapped_classes": applied.get("wrapped_classes"), "other_units": applied.get("other_units"),
        "n_layer": getattr(model_config, "n_layer", None),
        "mp_param_dtype": applied.get("mp_param_dtype"), "mp_reduce_dtype": applied.get("mp_reduce_dtype"),
        "activation_checkpointing_applied": applied.get("activation_checkpointing_applied"),
        "wrap_function": cfg.wrap_function or None, "wrap_function_sha256": wrap_function.digest(cfg),
        "param_shapes": applied.get("param_shapes"),
        "local_shapes_per_rank": {name: [rank.get(name) for rank in local_shapes]
                                  for name in (applied.get("param_shapes") or {})},
        "stored_shapes_per_rank": {name: [(rank or {}).get(name) for rank in stored_shapes or []]
                                   for name in (applied.get("param_shapes") or {})},
    }


def train_loss(result: Any, trains: list[dict[str, Any]], resumed: bool) -> float:
    """The mean training loss over all steps. After a resume the Trainer's own figure counts only the
    resumed steps' losses (divided by all steps), so it is taken from the logged records instead,
    each weighted by the steps it covers."""
    if not resumed or not trains:
        return float(result.training_loss)
    total, last = 0.0, 0
    for r in trains:
        total += r["loss"] * (r["step"] - last)
        last = r["step"]
    return total / last if last else float(result.training_loss)


def stopped_early(out: Path, step: int, is_main: bool, checkpoints: Path) -> dict[str, Any]:
    """Slurm's time-limit warning stopped the run at a checkpoint: say so, leave no summary (the run
    did not finish), and leave $WORKSHOP_STOPPED_FILE, on which the batch script ends at once with
    its distinct exit code (the job shows as CHECKPOINTED) instead of holding the GPUs until TIMEOUT."""
    import torch.distributed as dist

    info = {"status": "checkpointed", "step": step, "checkpoint": str(checkpoints / f"checkpoint-{step}"),
            "reason": "SIGUSR1: the time limit is near", "fix": "submit again with resume (--resume)"}
    if is_main:
        log_records.write(log_records.CHECKPOINT, info)
        if os.environ.get("WORKSHOP_STOPPED_FILE"):
            Path(os.environ["WORKSHOP_STOPPED_FILE"]).write_text(json.dumps(info) + "\n")
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return info


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        # what the launcher says where the config is silent: torchrun's world, accelerate launch's YAML
        cfg = follow_launch(config_from_args(args, os.environ), written_fields(args), os.environ,
                            world=world_from_launcher(args, os.environ))
        if args.print_config:
            print(json.dumps(cfg.resolved(), indent=1))
            return 0
        run(cfg)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


def exit_after_run(code: int) -> None:
    """Exit a launched training process without interpreter finalization once the run is written.

    Seen here with torch 2.13 + gloo (1 in ~50 runs): after summary.json, digest.json and
    destroy_process_group, a rank still aborted in interpreter shutdown ("terminate called without
    an active exception", SIGABRT), so Slurm marked a completed job FAILED. Known upstream: gloo
    worker threads can outlive the Python objects they hold (pytorch/pytorch#179291). Everything a
    run leaves is written and flushed first; W&B, if used, is finished explicitly.
    """
    if "wandb" in sys.modules:
        import wandb

        if wandb.run is not None:
            wandb.finish()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_after_run(main())
