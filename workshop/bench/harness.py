"""`workshop bench`: every course configuration as a real training run on one device, measured.

Why a harness and not a notebook: the course makes promises (the course baseline is 5x the seed
recipe, FSDP reaches 40% MFU, the memory model predicts each run within 10%) and a promise needs a
figure that anyone can re-make with one command, with the date, device and versions beside it.

Each configuration is one `torchrun --nproc-per-node 1 -m workshop.training.train --config CONFIG.json` in a
subprocess (the job launch contract of docs/design.md; CPU smoke runs skip the launcher and set its
environment themselves), so CUDA peak-memory counters start from zero and nothing leaks between
configurations. The first `--warmup-steps` records of each run's
metrics.jsonl (CUDA/cuBLAS initialisation, FSDP lazy init, allocator growth) are dropped, and so is
any record the run's summary does not count (the memory tracker's step); the figures are
time-weighted over the remaining records. Peak memory is over training, from train start.

The seed recipe padded every example to 512 tokens: that is the config's `pad_to_max_length`, so
every configuration, the seed recipe included, runs the training script's own path unchanged.

Beside the course's configurations runs one peer that uses none of the course's code: a plain PyTorch loop
(workshop.bench.plain_loop) on the same shapes, batch and lengths. Every row's samples/s is also given as a
ratio to it (`vs_plain_loop`): an absolute figure does not carry from one GPU to another, a ratio does.

GPU figures go to benchmarks/results/; CPU numbers are refused there (smoke runs: benchmarks/smoke/,
git-ignored). The result files are rewritten after each configuration, so a bench stopped by its time limit
still leaves what it measured.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workshop.slurm.ports import rendezvous_port
from workshop.training.config import ENV_VARS, RunConfig, load_config

REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO / "benchmarks" / "results"
SMOKE_DIR = REPO / "benchmarks" / "smoke"
SEQ_LEN = 512  # the course's max_length for SQuAD, and the seed recipe's fixed width
FIXTURE_TRAIN = 50  # examples in workshop/assets/squad_fixture/train.json

# The issue's targets.
SPEEDUP_TARGET = 5.0
MFU_TARGET = 0.40
MEMORY_TOLERANCE = 0.10
SHARDING_COST_TARGET = 0.9   # full_shard on one GPU vs no sharding
PEER_TARGET = 0.9            # the course baseline vs the plain loop
PEER = "plain-loop"


@dataclass(frozen=True)
class BenchConfig:
    """One course configuration: the RunConfig changes that define it, and why it is in the table."""

    name: str
    why: str
    changes: dict[str, Any]
    pad_to: int = 0  # > 0: every batch padded to this many tokens (the seed recipe)
    course_batch: bool = True  # use the bench's --batch-size (False: the recipe fixes its own batch)
    fit_batch: bool = False  # on a GPU: the largest micro-batch the memory model says fits the card
    peer: bool = False  # the plain PyTorch loop (workshop.bench.plain_loop), not the course's training script


CONFIGS: dict[str, BenchConfig] = {c.name: c for c in (
    BenchConfig("seed-recipe", "the seed course's KAUST baseline: pad to 512, batch 1, grad acc 4, fp16, no sharding",
                dict(precision="fp16", sharding="none", batch_size=1, grad_acc=4, pad_to_max_length=True,
                     max_length=SEQ_LEN), pad_to=SEQ_LEN,
                course_batch=False),
    BenchConfig("baseline", "the course baseline: bf16, dynamic padding, no sharding",
                dict(precision="bf16", sharding="none")),
    BenchConfig(PEER, "the peer: a plain PyTorch loop on the same shapes, batch and lengths (bf16 autocast, fused "
                "AdamW, clipping at 1.0; no Trainer, no FSDP, none of the course's code)",
                dict(precision="bf16", sharding="none"), peer=True),
    BenchConfig("full_shard", "FSDP2 reshard_after_forward=True (FSDP1 FULL_SHARD)",
                dict(precision="bf16", sharding="full_shard")),
    BenchConfig("shard_grad_op", "FSDP2 reshard_after_forward=False (FSDP1 SHARD_GRAD_OP)",
                dict(precision="bf16", sharding="shard_grad_op")),
    BenchConfig("offload", "FSDP2 full_shard with CPU offload of params, grads and AdamW state",
                dict(precision="bf16", sharding="full_shard", offload=True)),
    BenchConfig("activation_checkpointing", "FSDP2 full_shard with activation checkpointing per BloomBlock",
                dict(precision="bf16", sharding="full_shard", activation_checkpointing=True)),
    BenchConfig("answer_only", "FSDP2 full_shard, logits only at answer positions (loss=answer_only), at the "
                "largest micro-batch the memory model says fits the GPU",
                dict(precision="bf16", sharding="full_shard", loss="answer_only"), fit_batch=True),
)}

# answer_only's batch search assumes this many answer positions per example (the fixture's answers
# with EOS are 2 to 12 tokens); the run itself reads back the positions it projected
FIT_ANSWER_TOKENS = 12


def fitting_batch(changes: dict[str, Any], model: str, gpu_bytes: int, limit: int = 1024) -> int:
    """The largest micro-batch whose predicted GPU peak (memory.estimate, at SEQ_LEN) fits `gpu_bytes`,
    less the CUDA context; at least 1."""
    from workshop.results import memory

    def predict(batch: int) -> Any:
        return memory.estimate(model, changes.get("sharding", "none"), 1, changes.get("precision", "bf16"), batch,
                               SEQ_LEN, loss=changes.get("loss", "full"), answer_tokens=batch * FIT_ANSWER_TOKENS)

    return max(1, min(limit, memory.largest_micro_batch(predict, gpu_bytes - memory.CUDA_CONTEXT)))


# ---------------------------------------------------------------------------------------- paths


def device_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3': a file name a shell never has to quote."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def is_results_path(path: Path) -> bool:
    """Whether `path` is (inside) a benchmarks/results folder, this repo's or any copy's."""
    resolved = Path(os.path.abspath(path))
    if resolved == RESULTS_DIR or RESULTS_DIR in resolved.parents:
        return True
    parts = resolved.parts
    return any(parts[i:i + 2] == ("benchmarks", "results") for i in range(len(parts) - 1))


class RefusedOutput(ValueError):
    """CPU (or non-BLOOM-560M) numbers asked to go where only GPU figures belong."""


def check_output(out_dir: Path, device: str, model: str) -> None:
    """benchmarks/results is for BLOOM-560M figures measured on a GPU; anything else stays out."""
    if not is_results_path(out_dir):
        return
    if device != "cuda":
        raise RefusedOutput(f"{out_dir} holds GPU figures only, and this run is on {device!r}. "
                            f"Write CPU smoke runs elsewhere (default: {SMOKE_DIR}, git-ignored), "
                            "or run on a GPU node with --device cuda")
    if not model.startswith("bloom-560m"):
        raise RefusedOutput(f"{out_dir} holds BLOOM-560M figures only, and this run's model is {model!r}. "
                            "Use --model bloom-560m-random, or another --output")


def unique_stem(out_dir: Path, stem: str) -> str:
    """`stem`, or `stem-2`, `stem-3`...: a second run on the same day never overwrites a committed one."""
    candidate, n = stem, 1
    while (out_dir / f"{candidate}.json").exists():
        n += 1
        candidate = f"{stem}-{n}"
    return candidate


# ---------------------------------------------------------------------------------------- inputs


def length_distribution(model: str, max_length: int, n: int = FIXTURE_TRAIN) -> dict[str, Any]:
    """Non-pad tokens per fixture example, encoded exactly as training encodes them."""
    from workshop.training import data, models

    tok = models.load_tokenizer(model)
    in_order = [len(data.encode_for_training(tok, ex, max_length)["input_ids"])
                for ex in data.load_examples("fixture", "train", n)]
    lengths = sorted(in_order)
    p95 = lengths[min(len(lengths) - 1, math.ceil(0.95 * len(lengths)) - 1)]
    return {"source": "workshop/assets/squad_fixture/train.json", "examples": len(lengths),
            "tokenizer": f"{type(tok).__name__}, vocab {len(tok)}" + (
                " (the offline BLOOM-shaped BPE: more tokens per word than BLOOM's 250k vocabulary)"
                if len(tok) < 10_000 else ""),
            "max_length": max_length, "mean": round(statistics.mean(lengths), 1),
            "p50": statistics.median(lengths), "p95": p95, "min": lengths[0], "max": lengths[-1],
            "lengths": in_order}  # in fixture order: a run on train_size=k trains on the first k


def train_size_for(global_batch: int, max_steps: int, available: int = FIXTURE_TRAIN) -> int:
    """Whole batches only (no short last batch in the timings), and no more examples than the run
    trains on, so every example (the longest one included) is seen and sets the measured peak."""
    usable = available - available % global_batch
    if usable < global_batch:
        raise ValueError(f"global batch {global_batch} is larger than the fixture ({available} examples)")
    return min(usable, max_steps * global_batch)


def steps_to_measure(warmup: int, measure: int) -> int:
    """Steps to run for `measure` records after the warm-up that are not an instrumented step (the memory
    tracker's and the communication recorder's: the run's summary and steady_state leave them out)."""
    from workshop.training.counted_steps import INSTRUMENTED_STEPS

    steps = warmup + measure
    while sum(1 for s in range(warmup + 1, steps + 1) if s not in INSTRUMENTED_STEPS.values()) < measure:
        steps += 1
    return steps


def run_config(bc: BenchConfig, model: str, device: str, batch_size: int, warmup: int, measure: int,
               out_dir: Path, gpu_bytes: int | None = None) -> RunConfig:
    """The RunConfig of one configuration, validated; on a CPU every precision becomes fp32 (fp16
    needs a GPU, bf16 on CPU measures nothing the course cares about). `gpu_bytes`: the card's memory for a
    fitted batch (default: the visible GPU's), so a CPU test can build what an H100 or an H200 would run."""
    changes = dict(bc.changes)
    if bc.course_batch:
        changes.update(batch_size=batch_size, grad_acc=1)
    if bc.fit_batch and device == "cuda":
        if gpu_bytes is None:
            import torch

            gpu_bytes = torch.cuda.get_device_properties(0).total_memory
        # no larger than the fixture: a batch of more examples than it holds has no whole step to time
        changes.update(batch_size=fitting_batch(changes, model, gpu_bytes, limit=FIXTURE_TRAIN), grad_acc=1)
    if device == "cpu":
        changes["precision"] = "fp32"
    max_steps = warmup + measure if bc.peer else steps_to_measure(warmup, measure)   # the loop instruments no step
    global_batch = changes["batch_size"] * changes.get("grad_acc", 1)
    settings: dict[str, Any] = dict(
        model=model, dataset="fixture", train_size=train_size_for(global_batch, max_steps), eval_size=8,
        eval_split="dev", max_length=SEQ_LEN, global_batch=0, max_steps=max_steps, logging_steps=1,
        eval_generate=False, device=device, nodes=1, procs_per_node=1, wandb="disabled",
        output_dir=str(out_dir))
    settings.update(changes)   # the configuration's own settings win (the seed recipe restates max_length)
    return load_config(overrides=settings)


# ---------------------------------------------------------------------------------------- launching


def child_env(device: str) -> dict[str, str]:
    """The environment of a run: no seed env vars (they would override the config file), no Hub,
    the repo importable, and on a GPU every CPU core for the offload configuration's CPU AdamW
    (torchrun would otherwise set OMP_NUM_THREADS=1)."""
    drop = set(ENV_VARS) | {"FP16", "BF16"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("WORKSHOP_")}
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    if "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1" if device == "cpu" else str(len(os.sched_getaffinity(0)))
    return env


def launch(cfg: RunConfig, pad_to: int, timeout: float, device: str,
           launcher: str = "torchrun") -> tuple[int, str, float]:
    """One process running the training script on `cfg`, started by torchrun (the course's launch
    contract) or directly with torchrun's environment (CPU smoke runs: ~1/3 less start-up);
    returns (exit code, log, wall seconds)."""
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_path = cfg.to_json(out / "config.json")
    entry = ["-m", "workshop.training.train"]
    env, port = child_env(device), str(rendezvous_port())
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
               "--master-port", port, *entry, "--config", str(config_path)]
    else:  # what torchrun sets for one process, without paying for the launcher's own torch import
        cmd = [sys.executable, *entry, "--config", str(config_path)]
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", GROUP_RANK="0",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    return _run(cmd, env, out, timeout)


def _run(cmd: list[str], env: dict[str, str], out: Path, timeout: float) -> tuple[int, str, float]:
    """Run `cmd`, its output into out/job.log; (exit code, log, wall seconds), 124 when past `timeout`."""
    started = time.perf_counter()
    # Its own session, so a timeout kills torchrun's worker too and never leaves a GPU held.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        code, log = 124, (log or "") + f"\n[workshop bench] killed after {timeout:.0f} s (--timeout)\n"
    wall = time.perf_counter() - started
    (out / "job.log").write_text(" ".join(cmd) + "\n" + log)
    return code, log, wall


def peer_spec(cfg: RunConfig, lengths: list[int]) -> dict[str, Any]:
    """What the plain loop needs to do the same work as `cfg`: the model's shapes (a BloomConfig dict), the
    examples' token counts in fixture order, batch, steps, precision and the device's peak for MFU."""
    from workshop.training import metrics, models

    profile = models.resolve_profile(cfg.model)
    if profile.shapes is not None:
        model_config = models.bloom_config(profile.shapes, models.load_tokenizer(cfg.model)).to_diff_dict()
    else:   # a local folder: its own config.json
        model_config = json.loads((Path(profile.name) / "config.json").read_text())
    for key in ("transformers_version", "architectures", "model_type", "torch_dtype", "dtype"):
        model_config.pop(key, None)
    peak = None
    if cfg.device == "cuda":
        import torch

        peak = metrics.peak_for_name(torch.cuda.get_device_name(0), cfg.precision)
    return {"model_config": model_config, "lengths": lengths[:cfg.train_size], "batch_size": cfg.batch_size,
            "steps": cfg.max_steps, "device": cfg.device, "precision": cfg.precision, "seed": cfg.seed,
            "output_dir": cfg.output_dir, "peak_tflops": peak}


def launch_peer(cfg: RunConfig, lengths: list[int], timeout: float, device: str) -> tuple[int, str, float]:
    """The plain loop in its own process (so its CUDA counters start from zero, as each course run's do)."""
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "plain_loop_spec.json"
    spec.write_text(json.dumps(peer_spec(cfg, lengths), indent=1) + "\n")
    return _run([sys.executable, "-m", "workshop.bench.plain_loop", "--spec", str(spec)], child_env(device),
                out, timeout)


# ---------------------------------------------------------------------------------------- measuring


def steady_state(records: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Throughput and MFU over the records after the warm-up, weighted by each record's duration
    (sum of samples / sum of seconds, not a mean of rates). A record whose steps the run's own summary
    leaves out (`counted` false: the tracker's instrumented step) is left out here too."""
    kept = [r for r in records if r.get("kind") == "train" and r["step"] > warmup and r.get("counted") is not False]
    seconds = sum(r["step_time_s"] for r in kept)
    if not kept or seconds <= 0:
        return {"measured_steps": 0}

    def weighted(key: str) -> float | None:
        if any(r.get(key) is None for r in kept):
            return None
        return sum(r[key] * r["step_time_s"] for r in kept) / seconds

    sps, tps, tflops, mfu = weighted("samples_per_s"), weighted("tokens_per_s"), weighted("tflops"), weighted("mfu")
    return {"measured_steps": len(kept), "measured_seconds": round(seconds, 4),
            "samples_per_s": round(sps, 3) if sps is not None else None,
            "tokens_per_s": round(tps, 1) if tps is not None else None,
            "tflops": round(tflops, 3) if tflops is not None else None,
            "mfu": round(mfu, 4) if mfu is not None else None,
            "step_time_s_median": round(statistics.median(r["step_time_s"] for r in kept), 4)}


def predict(cfg: RunConfig, seq_len: int, wrapper: str | None = None,
            answer_tokens: int | None = None) -> dict[str, Any]:
    """The memory model's prediction for what ran, at the widest batch the run trained on (dynamic
    padding: the longest example; the seed recipe: the fixed width). A run that read back a DDP
    wrapper is predicted as ddp (`predicted_as` says which); a one-process 'none' run is a plain model."""
    from workshop.results import memory

    sharding = "ddp" if cfg.sharding == "none" and wrapper == "DistributedDataParallel" else cfg.sharding
    if cfg.loss == "answer_only" and answer_tokens is None:
        answer_tokens = cfg.batch_size * FIT_ANSWER_TOKENS   # before the run: the search's assumption
    # grad_acc: the seed recipe accumulates 4 micro-batches, and keeps a full fp32 gradient between them
    bd = memory.estimate(cfg.model, sharding, cfg.world_size, cfg.precision, cfg.batch_size, seq_len,
                         cfg.offload, cfg.activation_checkpointing, cfg.replicas, grad_acc=cfg.effective_grad_acc,
                         device="cpu" if cfg.device == "cpu" else "cuda", loss=cfg.loss, answer_tokens=answer_tokens)
    # what a GPU's allocator holds: the tracker's peak plus DDP's gradient buckets
    return {"seq_len": seq_len, "predicted_as": sharding, "total_mb": round(bd.gpu_peak / memory.MB, 1),
            "components_mb": {k: round(v, 1) for k, v in bd.as_mb().items()}}


def dry_run_flops(cfg: RunConfig, seq_len: int, cache: Path) -> dict[str, Any]:
    """MFU's numerator from the dry run (workshop.training.dryrun): the FLOPs of one optimizer step of this
    configuration's batch at `seq_len` tokens, counted by FlopCounterMode on the job's own code, per token.
    Model FLOPs, as MFU counts them: without activation checkpointing's recomputation, with the full loss
    (answer_only's positions depend on the data: the same model FLOPs per token, as the formula's 6N counts
    lm_head whole). On one device the sharding changes no FLOP, so one dry run (cached by its config's hash)
    serves every configuration of a batch and width."""
    from workshop.slurm.fit import dry_run
    from workshop.training.config import ConfigError

    counted = load_config(base=cfg, overrides=dict(sharding="none", nodes=1, procs_per_node=1, offload=False,
                                                   activation_checkpointing=False, loss="full", precision="fp32",
                                                   max_length=max(32, seq_len), pad_to_max_length=False))
    try:
        result = dry_run(counted, cache)
    except ConfigError as e:
        return {"error": str(e), "seq_len": seq_len}
    return {"flops_per_step": result["flops_per_step"], "tokens_per_step": result["tokens_per_step"],
            "flops_per_token": result["flops_per_step"] / result["tokens_per_step"], "seq_len": counted.max_length}


def with_dry_run_mfu(row: dict[str, Any], cfg: RunConfig, lengths: list[int], pad_to: int, cache: Path) -> None:
    """The row's MFU from the dry run's FLOPs per token (at the mean width trained on: the fixed pad width, or
    the examples' mean length), over the data sheet's peak; the formula's figure (6N + 12·L·h·s per token,
    workshop.training.metrics) stays beside it as `mfu_formula`. Without a dry run the formula's figure stands,
    and `mfu_source` says why."""
    from workshop.training.metrics import peak_for_name

    seq = pad_to or round(statistics.mean(lengths[:cfg.train_size] or [SEQ_LEN]))
    flops = dry_run_flops(cfg, seq, cache)
    row["model_flops"], row["mfu_formula"] = flops, row.get("mfu")
    peak = peak_for_name(row.get("device_name") or "", cfg.precision)
    if flops.get("flops_per_token") is None:
        row["mfu_source"] = f"formula (the dry run failed: {flops.get('error')})"
        return
    row["mfu_source"] = "dry run"
    row["mfu"] = round(row["tokens_per_s"] * flops["flops_per_token"] / (peak * 1e12), 4) \
        if peak and row.get("tokens_per_s") else None


def with_dry_run_memory(row: dict[str, Any], cfg: RunConfig, seq_len: int, cache: Path) -> None:
    """The configuration's dry run at the width the prediction takes (its tensor peak, rank 0, one block
    gathered at a time), beside the measured allocator peak: what the first GPU run checks the dry run
    against. None where the configuration cannot be dry-run (answer_only's data-dependent shape)."""
    from workshop.slurm.fit import dry_run
    from workshop.training.config import ConfigError

    try:
        result = dry_run(load_config(base=cfg, overrides={"max_length": max(32, seq_len), "pad_to_max_length": False}),
                         cache)
    except ConfigError as e:
        row["dry_run_peak_mb"], row["dry_run_error"] = None, str(e)
        return
    row["dry_run_peak_mb"] = round(result["memory_mb"]["peak"], 1)
    measured = row.get("peak_mem_mb") if row.get("mem_kind") == "cuda_allocated" else None
    row["dry_run_rel_error"] = round((row["dry_run_peak_mb"] - measured) / measured, 4) if measured else None


def diagnosis(run_dir: Path, log: str) -> str:
    """One sentence on why a run failed (workshop.results.diagnose), else the log's last line."""
    try:
        from workshop.results.diagnose import diagnose

        found = diagnose(run_dir / "job.log")
        if found:
            return f"{found[0].title}. Change: {found[0].fix}"
    except Exception as e:  # a failed diagnosis must not hide the failure itself
        return f"(diagnose failed: {e}) " + (log.strip().splitlines() or [""])[-1][:300]
    return (log.strip().splitlines() or ["(empty log)"])[-1][:300]


def measure(bc: BenchConfig, cfg: RunConfig, warmup: int, timeout: float, device: str,
            lengths: list[int], launcher: str = "torchrun") -> dict[str, Any]:
    """Run one configuration and turn its run folder into one row of the results."""
    run_dir = Path(cfg.output_dir)
    if bc.peer:
        code, log, wall = launch_peer(cfg, lengths, timeout, device)
    else:
        code, log, wall = launch(cfg, bc.pad_to, timeout, device, launcher)
    seq = bc.pad_to or max(lengths[:cfg.train_size])
    row: dict[str, Any] = {"name": bc.name, "why": bc.why, "config": cfg.resolved(), "pad_to": bc.pad_to or None,
                           "run_dir": str(run_dir), "exit_code": code, "wall_s": round(wall, 1),
                           "prediction": predict(cfg, seq)}
    summary_path = run_dir / "summary.json"
    if code == 124:
        row.update(status="failed", error=f"did not finish within --timeout {timeout:.0f} s; raise it, or look "
                                          f"at {run_dir / 'job.log'} for where it stalled")
        return row
    if code != 0 or not summary_path.is_file():
        row.update(status="failed", error=diagnosis(run_dir, log))
        return row
    summary = json.loads(summary_path.read_text())
    positions = summary.get("logits_positions_per_rank") or [None]
    row["prediction"] = predict(cfg, seq, summary.get("wrapper"), positions[0] if cfg.loss == "answer_only" else None)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    stats = steady_state(records, warmup)
    measured = summary.get("peak_mem_mb")
    comparable = summary.get("mem_kind") == "cuda_allocated" and measured
    tracker = (summary.get("tensor_mem_mb_per_rank") or [None])[0] or {}
    row.update(
        status="completed" if stats["measured_steps"] else "failed",
        device_name=summary.get("device_name"), sharding_applied=summary.get("sharding_applied"),
        wrapper=summary.get("wrapper"), offload_applied=summary.get("offload_applied"),
        steps=summary.get("steps"), warmup_steps=warmup, **stats,
        peak_mem_mb=measured, peak_reserved_mb=summary.get("peak_reserved_mb"), mem_kind=summary.get("mem_kind"),
        memory_rel_error=round((row["prediction"]["total_mb"] - measured) / measured, 4) if comparable else None,
        # the tensor tracker's peak of its one step (PyTorch's MemTracker), against the same allocator peak
        tracker_peak_mb=tracker.get("peak"),
        tracker_rel_error=round((tracker["peak"] - measured) / measured, 4)
        if comparable and tracker.get("peak") is not None else None,
        fused_adamw=summary.get("fused_adamw"),
        train_loss=summary.get("train_loss"), loss=summary.get("loss"),
        logits_mb=(summary.get("logits_mb_per_rank") or [None])[0],
        records=[{k: r.get(k) for k in ("step", "loss", "step_time_s", "samples_per_s", "tokens_per_s", "tflops",
                                        "mfu", "peak_mem_mb", "peak_reserved_mb")}
                 for r in records if r.get("kind") == "train"],
    )
    if not stats["measured_steps"]:
        row["error"] = f"no train records after the {warmup} warm-up steps"
    else:
        with_dry_run_mfu(row, cfg, lengths, bc.pad_to, run_dir.parent / ".dryrun")
        if not bc.peer:
            with_dry_run_memory(row, cfg, seq, run_dir.parent / ".dryrun")
    return row


# ---------------------------------------------------------------------------------------- targets


def add_peer_ratios(rows: list[dict[str, Any]]) -> None:
    """Each row's samples/s as a ratio to the plain loop's in the same run (`vs_plain_loop`; None without it)."""
    peer = next((r.get("samples_per_s") for r in rows if r["name"] == PEER), None)
    for r in rows:
        r["vs_plain_loop"] = round(r["samples_per_s"] / peer, 3) if peer and r.get("samples_per_s") else None


def _ratio_target(target: dict[str, Any], top: dict[str, Any], bottom: dict[str, Any], wanted: float) -> None:
    """`target` judged on top's samples/s over bottom's: met when the ratio reaches `wanted`."""
    if top.get("samples_per_s") and bottom.get("samples_per_s"):
        ratio = top["samples_per_s"] / bottom["samples_per_s"]
        target.update(value=round(ratio, 2), status="met" if ratio >= wanted else "not met",
                      why=f"{top['name']} {top['samples_per_s']:.2f} / {bottom['name']} {bottom['samples_per_s']:.2f} "
                          f"samples/s = {ratio:.2f}x")
    else:
        missing = [r.get("name") for r in (top, bottom) if not r.get("samples_per_s")]
        target.update(value=None, status="not met", why=f"no throughput for {', '.join(map(str, missing))} "
                      "(not run, or failed)")


def _band_target(target: dict[str, Any], errors: list[tuple[str, float | None]], what: str) -> None:
    """`target` judged on relative errors: met when every one is measured and within MEMORY_TOLERANCE."""
    unmeasured = [n for n, e in errors if e is None]
    outside = [f"{n} {e:+.1%}" for n, e in errors if e is not None and abs(e) > MEMORY_TOLERANCE]
    worst = max((abs(e) for _, e in errors if e is not None), default=None)
    if unmeasured or not errors:
        target.update(value=worst, status="not met",
                      why=f"no comparable {what} for {', '.join(unmeasured) or 'any configuration'}"
                          + (f"; outside the band: {', '.join(outside)}" if outside else ""))
    else:
        target.update(value=worst, status="not met" if outside else "met",
                      why=(f"outside +-{MEMORY_TOLERANCE:.0%}: {', '.join(outside)}" if outside else
                           f"worst error {worst:.1%}"))


def evaluate_targets(rows: list[dict[str, Any]], device: str, model: str) -> list[dict[str, Any]]:
    """Each of the issue's targets: met / not met / not evaluated, with the figure and the reason. The plain
    loop is a yardstick, not a course configuration: it counts in no target but the one that compares with it."""
    by_name = {r["name"]: r for r in rows}
    course = [r for r in rows if r["name"] != PEER]
    targets = [
        {"target": f"course baseline >= {SPEEDUP_TARGET:g}x the seed recipe in samples/s", "key": "speedup"},
        {"target": f"best configuration >= {MFU_TARGET:.0%} MFU", "key": "mfu"},
        {"target": f"memory model within {MEMORY_TOLERANCE:.0%} of measured peak (allocated) for every "
                   "configuration", "key": "memory"},
        {"target": f"full_shard on one GPU >= {SHARDING_COST_TARGET:g}x no sharding (baseline) in samples/s",
         "key": "sharding_cost"},
        {"target": f"course baseline >= {PEER_TARGET:g}x the plain PyTorch loop in samples/s", "key": "peer"},
        {"target": f"tensor tracker within {MEMORY_TOLERANCE:.0%} of measured peak (allocated) for every "
                   "configuration", "key": "tracker"},
    ]
    skip = None
    if device != "cuda":
        skip = "not evaluated on CPU"
    elif not model.startswith("bloom-560m"):
        skip = f"not evaluated: the targets are for BLOOM-560M, this run used {model!r}"

    def row(name: str) -> dict[str, Any]:
        return by_name.get(name, {"name": name})

    _ratio_target(targets[0], row("baseline"), row("seed-recipe"), SPEEDUP_TARGET)
    mfus = [(r["mfu"], r["name"]) for r in course if r["status"] == "completed" and r.get("mfu") is not None]
    if mfus:
        best, name = max(mfus)
        targets[1].update(value=best, status="met" if best >= MFU_TARGET else "not met",
                          why=f"best is {name} at {best:.1%}" + ("" if best >= MFU_TARGET else
                                                                f", {MFU_TARGET - best:.1%} short"))
    else:
        targets[1].update(value=None, status="not met", why="no configuration reported an MFU (no GPU peak "
                          "known for this device in workshop.training.metrics.PEAK_TFLOPS, or no run completed)")
    _band_target(targets[2], [(r["name"], r.get("memory_rel_error")) for r in course], "CUDA peak")
    _ratio_target(targets[3], row("full_shard"), row("baseline"), SHARDING_COST_TARGET)
    _ratio_target(targets[4], row("baseline"), row(PEER), PEER_TARGET)
    _band_target(targets[5], [(r["name"], r.get("tracker_rel_error")) for r in course], "tracker and CUDA peak")
    if skip:
        for t in targets:
            t["why"] = f"{skip} (CPU figures, for the record only: {t['why']})" if device != "cuda" else t["why"]
            t["status"] = skip
    return targets


# ---------------------------------------------------------------------------------------- writing


def _fmt(value: Any, spec: str = "", none: str = "n/a") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return none
    return format(value, spec)


def markdown(result: dict[str, Any]) -> str:
    """The results table in one fixed shape (nccl-tests' habit): greppable, diffable between runs."""
    dist = result["lengths"]
    lines = [
        f"# `workshop bench` — {result['device_name']}, {result['date']}",
        "",
        f"Model `{result['model']}`" + (" (random init, BLOOM-560M shapes)" if result["model"] == "bloom-560m-random"
                                         else "") + ", one process, SQuAD-shaped fixture "
        f"inputs; {result['warmup_steps']} warm-up steps dropped, {result['measure_steps']} measured. "
        f"git `{result['git_sha']}`; torch {result['versions'].get('torch')}, transformers "
        f"{result['versions'].get('transformers')}, accelerate {result['versions'].get('accelerate')}, "
        f"CUDA {result['versions'].get('cuda')}, NCCL {result['versions'].get('nccl')}.",
        "",
        f"Lengths (non-pad tokens per example, {dist['tokenizer']}): mean {dist['mean']}, p50 {dist['p50']}, "
        f"p95 {dist['p95']}, max {dist['max']} over {dist['examples']} examples.",
        "",
        "| config | precision | sharding | batch x acc | width | samples/s | x loop | tokens/s | TFLOP/s | MFU "
        "| peak alloc MB | peak reserved MB | predicted MB | error | tracker MB | tracker error | status |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| --- |",
    ]
    for r in result["configs"]:
        c = r["config"]
        ddp1 = r["prediction"].get("predicted_as") == "ddp" and c["sharding"] == "none"
        sharding = c["sharding"] + (" (DDP-1)" if ddp1 else "") + (" +offload" if c["offload"] else "") + (" +AC" if c["activation_checkpointing"] else "")
        width = f"pad {r['pad_to']}" if r.get("pad_to") else f"dyn <= {r['prediction']['seq_len']}"
        lines.append(
            f"| {r['name']} | {c['precision']} | {sharding} | {c['batch_size']} x {c['effective_grad_acc']} | {width} "
            f"| {_fmt(r.get('samples_per_s'), '.2f')} | {_fmt(r.get('vs_plain_loop'), '.2f')} "
            f"| {_fmt(r.get('tokens_per_s'), ',.0f')} "
            f"| {_fmt(r.get('tflops'), '.1f')} | {_fmt(r.get('mfu'), '.1%')} | {_fmt(r.get('peak_mem_mb'), ',.0f')} "
            f"| {_fmt(r.get('peak_reserved_mb'), ',.0f')} | {_fmt(r['prediction']['total_mb'], ',.0f')} "
            f"| {_fmt(r.get('memory_rel_error'), '+.1%')} | {_fmt(r.get('tracker_peak_mb'), ',.0f')} "
            f"| {_fmt(r.get('tracker_rel_error'), '+.1%')} | {r['status']} |")
    lines += ["", "## Targets", ""]
    lines += [f"- **{t['status']}** — {t['target']}: {t['why']}" for t in result["targets"]]
    failed = [r for r in result["configs"] if r["status"] != "completed"]
    if failed:
        lines += ["", "## Failures", ""] + [f"- {r['name']}: {r.get('error')}" for r in failed]
    if result.get("not_run"):
        lines += ["", "## Not run", "", f"- {', '.join(result['not_run'])}: the bench stopped before them (its time "
                  "limit, or it was interrupted); the rows above are complete"]
    if result.get("not_configured"):
        lines += ["", "## Not configured", ""] + [f"- {c['name']}: {c['error']}" for c in result["not_configured"]]
    lines += ["", "## Notes", ""] + [f"- {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    """Samples/s and peak memory (measured allocated, reserved, predicted) per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["configs"]
    names = [r["name"] for r in rows]
    xs = list(range(len(rows)))

    def val(r: dict[str, Any], key: str) -> float:
        v = r.get(key)
        return float(v) if v is not None else 0.0

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(9, 2.2 * len(rows) + 3), 4.2))
    ax1.bar(xs, [val(r, "samples_per_s") for r in rows], color="C2")
    ax1.set_ylabel("samples/s (after warm-up)")
    ax1.set_title("Throughput")
    w = 0.27
    ax2.bar([x - w for x in xs], [val(r, "peak_mem_mb") for r in rows], w, label="measured (allocated)", color="C1")
    ax2.bar(xs, [val(r, "peak_reserved_mb") for r in rows], w, label="measured (reserved)", color="C3", alpha=0.7)
    ax2.bar([x + w for x in xs], [r["prediction"]["total_mb"] for r in rows], w, label="memory model", color="C0")
    ax2.set_ylabel("peak memory per device (MB)")
    ax2.set_title("Peak memory")
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.set_xticks(xs, names, rotation=25, ha="right")
        ax.grid(axis="y", alpha=0.3)
        for x, r in zip(xs, rows):
            if r["status"] != "completed":
                ax.annotate(r["status"], (x, 0), ha="center", va="bottom", fontsize=7, rotation=90)
    fig.suptitle(f"{result['model']} on {result['device_name']} ({result['date']})", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


# ---------------------------------------------------------------------------------------- the bench


@dataclass
class BenchOptions:
    model: str = "bloom-560m-random"
    device: str = "cuda"
    configs: list[str] = field(default_factory=lambda: list(CONFIGS))
    batch_size: int = 32
    warmup_steps: int = 3
    measure_steps: int = 10
    output: Path | None = None
    runs_dir: Path | None = None
    timeout: float = 900.0
    plot: bool = True
    launcher: str = "torchrun"


def visible_device_name(device: str) -> str:
    """The GPU the bench will measure (its name goes into the file name and is checked against each run's), or cpu."""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise RefusedOutput("--device cuda, but no GPU is visible. Run on a GPU node (sbatch --gpus 1 ...), "
                                "or use --model tiny --device cpu for a smoke run")
        return torch.cuda.get_device_name(0)
    return "cpu"


def bench_notes(opts: BenchOptions) -> list[str]:
    """What a reader of the results file needs to know of how each column was measured."""
    notes = [
        "Throughput counts only non-pad tokens; MFU = achieved model FLOP/s / the device's dense peak, the FLOPs "
        "per token from the configuration's dry run (workshop.training.dryrun: FlopCounterMode on the job's own "
        "code at its batch and mean width, recomputation not counted); `mfu_formula` is the training script's "
        "6N + 12*L*h*s per token (workshop/training/metrics.py), kept beside it.",
        "dry_run_peak_mb: the configuration's dry run (workshop.training.dryrun) at the prediction's width, its "
        "tensor peak on a fake CPU device (one block gathered at a time, no CUDA context), beside the measured peak.",
        "Peak memory is torch.cuda.max_memory_allocated over training (its counters reset at train start, not at "
        "process start; the warm-up included); the memory "
        "model excludes the CUDA context and allocator slack, so reserved is shown but the error is vs allocated.",
        "A 'none' run is a plain single process (no DDP wrapper, no gradient buckets), read back from the model.",
        "Prediction width: the longest example trained on (dynamic padding; every example is seen at least once) "
        "or the fixed pad width (seed recipe).",
        "seed-recipe: pad_to_max_length=True with max_length 512 (every batch 512 tokens wide, as the seed did).",
        f"Each configuration is a separate process ({opts.launcher}; workshop.training.train --config), eval_generate off; "
        "evaluation time is excluded from throughput by the training script's metrics callback.",
        f"{PEER}: workshop/bench/plain_loop.py in its own process, none of the course's code; 'x loop' is each "
        "row's samples/s over the loop's, on the same device in the same run. Its tracker and model columns are "
        "empty or informational: it counts in no target but the one that compares with it.",
    ]
    if opts.device == "cpu":
        notes.insert(0, "CPU smoke run: precision forced to fp32, memory is peak RSS (not comparable with the "
                        "model), MFU n/a, targets not evaluated. Not a benchmark figure.")
    return notes


def run_bench(opts: BenchOptions) -> dict[str, Any]:
    """Every configuration in turn; writes <date>-<device>.json/.md/.png; returns the result."""
    from workshop.training import run_record

    gpu_figures = opts.device == "cuda" and opts.model.startswith("bloom-560m")
    out_dir = opts.output or (RESULTS_DIR if gpu_figures else SMOKE_DIR)
    check_output(out_dir, opts.device, opts.model)
    unknown = [c for c in opts.configs if c not in CONFIGS]
    if unknown:
        raise ValueError(f"unknown configuration(s) {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")
    versions = run_record.versions()
    device_name = visible_device_name(opts.device)
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    stem = unique_stem(out_dir, f"{date}-{device_slug(device_name)}")
    runs_dir = opts.runs_dir or REPO / "runs" / "bench" / stem
    lengths = length_distribution(opts.model, SEQ_LEN)

    notes = bench_notes(opts)
    result: dict[str, Any] = {
        "date": date, "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": opts.device, "device_name": device_name, "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "model": opts.model, "versions": versions,
        "git_sha": run_record.git_sha(), "command": "workshop bench " + " ".join(sys.argv[1:]),
        "launcher": opts.launcher, "batch_size": opts.batch_size, "warmup_steps": opts.warmup_steps, "measure_steps": opts.measure_steps,
        "omp_num_threads": child_env(opts.device).get("OMP_NUM_THREADS"),
        "lengths": lengths, "configs": [], "not_run": list(opts.configs), "not_configured": [], "targets": [],
        "notes": notes,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path, png_path = (out_dir / f"{stem}.{ext}" for ext in ("json", "md", "png"))

    def write() -> None:
        """The files as far as the bench got: a bench stopped by its time limit keeps what it measured."""
        measured_devices = {r.get("device_name") for r in result["configs"] if r.get("device_name")}
        if opts.device == "cuda" and measured_devices - {device_name}:
            raise RefusedOutput(f"asked for {device_name}, runs reported {sorted(measured_devices)}: not writing")
        add_peer_ratios(result["configs"])
        result["targets"] = evaluate_targets(result["configs"], opts.device, opts.model)
        json_path.write_text(json.dumps(result, indent=1, default=str) + "\n")
        md_path.write_text(markdown(result))

    for name in opts.configs:
        bc = CONFIGS[name]
        try:
            cfg = run_config(bc, opts.model, opts.device, opts.batch_size, opts.warmup_steps, opts.measure_steps,
                             runs_dir / name)
        except ValueError as e:   # one configuration this card or model cannot build costs its row, not the bench
            result["not_run"].remove(name)
            result["not_configured"].append({"name": name, "error": str(e)})
            print(f"[bench] {name}: not configured | {e}", flush=True)
            write()
            continue
        print(f"[bench] {name}: {bc.why} ...", flush=True)
        row = measure(bc, cfg, opts.warmup_steps, opts.timeout, opts.device, lengths["lengths"], opts.launcher)
        result["configs"].append(row)
        result["not_run"].remove(name)
        print(f"[bench] {name}: {row['status']} | {_fmt(row.get('samples_per_s'), '.2f')} samples/s | "
              f"mfu {_fmt(row.get('mfu'), '.1%')} | peak {_fmt(row.get('peak_mem_mb'), ',.0f')} MB "
              f"({row.get('mem_kind')}) | predicted {row['prediction']['total_mb']:,.0f} MB"
              + (f" | {row['error']}" if row.get("error") else ""), flush=True)
        write()
    write()   # a bench of no configuration still says so
    if opts.plot:
        plot(result, png_path)
    result["paths"] = {"json": str(json_path), "md": str(md_path), "png": str(png_path) if opts.plot else None}
    return result


# ---------------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="workshop bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="bloom-560m-random", help="bloom-560m-random (the benchmark) or tiny (smoke)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated subset of {', '.join(CONFIGS)}")
    p.add_argument("--batch-size", type=int, default=None,
                   help="per-device batch of every configuration except seed-recipe (default 32 on cuda, 4 on cpu)")
    p.add_argument("--warmup-steps", type=int, default=None, help="records dropped (default 3 on cuda, 1 on cpu)")
    p.add_argument("--measure-steps", type=int, default=None, help="records measured (default 10 on cuda, 2 on cpu)")
    p.add_argument("--output", type=Path, default=None,
                   help=f"folder for <date>-<device>.json/.md/.png (default: {RESULTS_DIR.relative_to(REPO)} on "
                        f"cuda, {SMOKE_DIR.relative_to(REPO)} on cpu; CPU numbers are refused in benchmarks/results)")
    p.add_argument("--runs-dir", type=Path, default=None, help="where each configuration's run folder goes "
                   "(default: runs/bench/<date>-<device>/)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per configuration")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--launcher", choices=("torchrun", "direct"), default=None,
                   help="torchrun (default on cuda: the course's launch) or direct (default on cpu: the same "
                        "environment torchrun sets for one process, faster to start)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    cuda = args.device == "cuda"
    opts = BenchOptions(
        model=args.model, device=args.device, configs=[c.strip() for c in args.configs.split(",") if c.strip()],
        batch_size=args.batch_size or (32 if cuda else 4),
        warmup_steps=args.warmup_steps if args.warmup_steps is not None else (3 if cuda else 1),
        measure_steps=args.measure_steps if args.measure_steps is not None else (10 if cuda else 2),
        output=args.output, runs_dir=args.runs_dir, timeout=args.timeout, plot=not args.no_plot,
        launcher=args.launcher or ("torchrun" if cuda else "direct"))
    if opts.measure_steps < 1 or opts.warmup_steps < 0 or opts.batch_size < 1:
        print("workshop bench: --measure-steps and --batch-size must be >= 1, --warmup-steps >= 0", file=sys.stderr)
        return 2
    try:
        result = run_bench(opts)
    except (RefusedOutput, ValueError) as e:
        print(f"workshop bench: {e}", file=sys.stderr)
        return 2
    print(markdown(result), end="")
    print(f"[bench] wrote {result['paths']['json']}, {result['paths']['md']}"
          + (f", {result['paths']['png']}" if result["paths"]["png"] else ""))
    return 0 if all(r["status"] == "completed" for r in result["configs"]) and not result["not_configured"] else 1


if __name__ == "__main__":
    sys.exit(main())
