"""The one training script: every course step, every strategy, 1..N processes on 1..M nodes.

    torchrun --nproc-per-node 2 -m workshop.train --sharding full_shard --epochs 2
    workshop train --config run.toml --batch-size 8

Config precedence: defaults < --config file < the seed's env variables (MODEL_NAME, BATCH_SIZE, ...)
< flags. The run leaves run_args.json, metrics.jsonl and summary.json in --output-dir
(docs/design.md), and stops with an error rather than train under a strategy it was not asked for.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from workshop.config import ConfigError, RunConfig, add_config_arguments, config_from_args


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


TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


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
        return torch.device("cuda", local_rank)
    if cfg.precision == "fp16":
        raise ConfigError("precision", "fp16 mixed precision needs a GPU; this process runs on the CPU",
                          "use precision=bf16 or fp32 on CPU, fp16 only on GPUs without bf16 (V100)")
    return torch.device("cpu")


def training_arguments(cfg: RunConfig, device: "Any", world: int) -> "Any":
    from transformers import TrainingArguments

    from workshop.sharding import trainer_sharding_kwargs

    on_cpu = device.type == "cpu"
    kwargs: dict[str, Any] = dict(
        output_dir=cfg.output_dir,
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
        eval_strategy="epoch",
        save_strategy="no",
        report_to=["wandb"] if cfg.wandb != "disabled" else [],
        run_name=Path(cfg.output_dir).name,
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=cfg.precision == "bf16",
        fp16=cfg.precision == "fp16",
        use_cpu=on_cpu,
        ddp_backend="gloo" if on_cpu and world > 1 else None,
        dataloader_num_workers=0,
        disable_tqdm=True,
        remove_unused_columns=False,
        activation_checkpointing=cfg.activation_checkpointing and not cfg.is_fsdp,
    )
    kwargs.update(trainer_sharding_kwargs(cfg))
    return TrainingArguments(**kwargs)


def configure_wandb(cfg: RunConfig) -> None:
    """W&B offline by default: runs land in the run folder and are synced later with `wandb sync`."""
    if cfg.wandb == "disabled":
        return
    os.environ["WANDB_MODE"] = cfg.wandb
    os.environ.setdefault("WANDB_DIR", cfg.output_dir)
    os.environ.setdefault("WANDB_PROJECT", "fsdp-workshop")
    os.environ["WANDB_SILENT"] = "true"


def run(cfg: RunConfig) -> dict[str, Any]:
    """Train, evaluate and record one run; returns the summary (on every rank)."""
    rank, local_rank, world = launch_world()
    check_launch(cfg, world)
    leave_single_process_undistributed(cfg)
    device = resolve_device(cfg, local_rank)
    configure_wandb(cfg)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)

    import torch
    import torch.distributed as dist
    from transformers.utils import logging as hf_logging

    from workshop import data, evaluation, models, run_record, sharding
    from workshop.metrics import MetricsCallback, StepCounter, _all_gather
    from workshop.trainer import CourseTrainer

    hf_logging.set_verbosity_warning()
    is_main = rank == 0
    args = training_arguments(cfg, device, world)  # initialises the process group under torchrun
    hosts = _all_gather(run_record.node_name())
    if is_main:
        (out / "metrics.jsonl").write_text("")
        record = run_record.run_args(cfg)
        run_record.write_json(out / "run_args.json", record)
        print("WORKSHOP_RUN_ARGS " + json.dumps(record, default=str), flush=True)
        print(f"[workshop] {cfg.sharding} on {world} process(es), {cfg.nodes} node(s) {sorted(set(hosts))}, "
              f"device {device.type}, precision {cfg.precision}, model {cfg.model}", flush=True)

    tok = models.load_tokenizer(cfg.model)
    model = models.build_model(cfg.model, tok, cfg.seed)
    n_params = models.count_parameters(model)
    train_ex = data.load_examples(cfg.dataset, "train", cfg.train_size)
    eval_ex = data.load_examples(cfg.dataset, cfg.eval_split, cfg.eval_size)
    train_ds = data.EncodedDataset(tok, train_ex, cfg.max_length)
    eval_ds = data.EncodedDataset(tok, eval_ex, cfg.max_length)

    synced = world > 1
    before: dict[str, Any] = {}
    if cfg.eval_generate:
        model.to(device)
        before = evaluation.em_f1(model, tok, eval_ex, cfg.max_length, cfg.max_new_tokens, device, synced=False)

    counter = StepCounter()
    callback = MetricsCallback(out, counter, device, cfg.precision, n_params, model.config.n_layer,
                               model.config.hidden_size, is_main)
    trainer = CourseTrainer(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                            data_collator=data.DynamicPaddingCollator(tok.pad_token_id, cfg.max_length if cfg.pad_to_max_length else 0), processing_class=tok,
                            callbacks=[callback], counter=counter)
    applied: dict[str, Any] = {}

    def verify_wrapping() -> None:
        applied.update(sharding.describe_applied(trainer.model, trainer.model_wrapped))
        sharding.check_applied(cfg, applied)

    callback.on_train_begin_hooks.append(verify_wrapping)
    started = time.perf_counter()
    result = trainer.train()
    train_runtime = time.perf_counter() - started
    evals = [r for r in callback.records if r["kind"] == "eval"]
    if not evals or evals[-1]["step"] != trainer.state.global_step:
        trainer.evaluate()
        evals = [r for r in callback.records if r["kind"] == "eval"]

    after: dict[str, Any] = {}
    if cfg.eval_generate:
        after = evaluation.em_f1(trainer.model, tok, eval_ex, cfg.max_length, cfg.max_new_tokens, device,
                                 synced=synced)
    params_local = _all_gather(applied.get("params_local"))
    print(f"[workshop rank {rank} host {run_record.node_name()}] params_local={applied.get('params_local')} "
          f"of {n_params} ({applied.get('wrapper')})", flush=True)
    trains = [r for r in callback.records if r["kind"] == "train"]
    totals = counter.totals
    peaks = [r["peak_mem_mb_per_rank"] for r in trains]
    per_rank = [max(col) for col in zip(*peaks)] if peaks else []
    utils = [r["gpu_util_pct"] for r in trains if r["gpu_util_pct"] is not None]
    mfus = [r["mfu"] for r in trains if r["mfu"] is not None]
    summary = {
        "status": "completed", "world_size": world, "nodes": cfg.nodes, "hosts": hosts, "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "precision": cfg.precision, "model": cfg.model, "sharding_requested": cfg.sharding,
        "sharding_applied": applied.get("sharding_applied"), "wrapper": applied.get("wrapper"),
        "reshard_after_forward": applied.get("reshard_after_forward"),
        "offload_applied": applied.get("offload_applied"), "activation_checkpointing": cfg.activation_checkpointing,
        "mesh": applied.get("mesh"), "fsdp_units": applied.get("fsdp_units"),
        "params_total": n_params, "params_local_per_rank": params_local,
        "train_loss": round(float(result.training_loss), 6),
        "eval_losses": [r["eval_loss"] for r in evals], "final_eval_loss": evals[-1]["eval_loss"],
        "train_samples_per_s": round(totals["samples"] / totals["seconds"], 3) if totals["seconds"] else None,
        "train_tokens_per_s": round(totals["tokens"] / totals["seconds"], 1) if totals["seconds"] else None,
        "eval_samples_per_s": evals[-1].get("eval_samples_per_s"),
        "steps": trainer.state.global_step,
        "steps_per_epoch": -(-len(train_ds) // (cfg.batch_size * world * cfg.effective_grad_acc)),
        "global_batch": cfg.effective_global_batch, "grad_acc": cfg.effective_grad_acc,
        "batch_size": cfg.batch_size, "max_length": cfg.max_length,
        "peak_mem_mb": max(per_rank) if per_rank else None, "peak_mem_mb_per_rank": per_rank,
        "mem_kind": trains[-1]["mem_kind"] if trains else None,
        "peak_reserved_mb": max((r["peak_reserved_mb"] or 0) for r in trains) if device.type == "cuda" else None,
        "gpu_util_pct": round(sum(utils) / len(utils), 1) if utils else None,
        "mfu": round(sum(mfus) / len(mfus), 4) if mfus else None,
        "em_before": before.get("exact_match"), "f1_before": before.get("f1"),
        "em_after": after.get("exact_match"), "f1_after": after.get("f1"),
        "sample_predictions": after.get("examples"),
        "train_runtime_s": round(train_runtime, 2),
    }
    if is_main:
        run_record.write_json(out / "summary.json", summary)
        print("WORKSHOP_SUMMARY " + json.dumps(summary), flush=True)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return summary


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        cfg = config_from_args(args, os.environ)
        if args.print_config:
            print(json.dumps(cfg.resolved(), indent=1))
            return 0
        run(cfg)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
