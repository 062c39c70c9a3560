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

from workshop.bench.configs import (CONFIGS, FIT_ANSWER_TOKENS, PEER, SEQ_LEN, BenchConfig, length_distribution,
                                    run_config)
from workshop.bench.report import add_peer_ratios, evaluate_targets, fmt, markdown, plot

REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO / "benchmarks" / "results"
SMOKE_DIR = REPO / "benchmarks" / "smoke"


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
        result = dry_run(counted, cache, in_process=True)    # the bench's process trains nothing itself
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
                         cache, in_process=True)
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


# ---------------------------------------------------------------------------------------- writing


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
        print(f"[bench] {name}: {row['status']} | {fmt(row.get('samples_per_s'), '.2f')} samples/s | "
              f"mfu {fmt(row.get('mfu'), '.1%')} | peak {fmt(row.get('peak_mem_mb'), ',.0f')} MB "
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
