"""No job that cannot fit reaches the queue: a GPU job's dry run, before `sbatch`, against its partition's GPU memory.

Why: a job too large for its GPUs waits in the queue, starts, loads the model and dies of CUDA OOM
minutes later, holding GPUs the class shares. The dry run (workshop.training.dryrun) runs the job's own
code at full size on fake tensors in seconds; its peak, plus what a GPU process holds beside its tensors
(workshop.training.gpus: the CUDA context and the caching allocator's reserve, stated constants with their
source), is set against the partition's `gpu_mem` from the site profile. A job that would not fit is
refused with the figure, the partition's memory and the largest micro-batch that fits (the peak grows
linearly with the micro-batch at a fixed sequence length: two dry runs give the line). `force` submits
anyway. Only partitions that state `gpu_mem` are checked (a CPU or local profile pays nothing), and only
training steps. Each dry run runs in a process of its own (no torch in the notebook's kernel, no process
group left behind; the bench, which holds torch already, runs its small ones in its own: `in_process`) and is
cached under the jobs folder by the config's hash: a second Run All costs nothing.

`workshop dryrun STEP --profile P [--set key=value ...] [--json]` prints a step's dry run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from workshop.training import wrap_function
from workshop.training.config import ConfigError, RunConfig, load_config, parse_assignments
from workshop.training.gpus import ALLOCATOR_RESERVE, CUDA_CONTEXT_BYTES
from workshop.slurm.profiles import Profile, load_profile, mem_mb
from workshop.slurm.steps import STEPS, get_step, step_config

MB = 2**20
CACHE = ".dryrun"       # under the jobs folder: one JSON per config hash
# what does not change a dry run: where the job writes, whether it resumes, what it logs or evaluates
NOT_DRY_RUN = ("output_dir", "resume", "checkpoint_dir", "wrap_function", "wandb", "logging_steps", "eval_size",
               "eval_generate", "checkpoint_every", "checkpoint_at_end", "comm_record", "collective_timeout_s")


def config_hash(cfg: RunConfig) -> str:
    """What makes two dry runs the same: the config less its bookkeeping, the student's function by content,
    and the torch it runs on (read from the installed package's metadata: no torch import)."""
    from importlib.metadata import version

    payload = {k: v for k, v in cfg.to_dict().items() if k not in NOT_DRY_RUN}
    payload["wrap_function_sha256"] = wrap_function.digest(cfg) if cfg.wrap_function else None
    payload["torch"] = version("torch")
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def shared_cache() -> Path | None:
    """$WORKSHOP_DRYRUN_CACHE: a folder of dry runs read beside each jobs folder's own. A dry run depends on its
    config only (config_hash), so one folder serves many jobs folders: a class's, or a test suite's processes
    (scripts/test.sh, tests/conftest.py), where several tests dry-run the same config."""
    given = os.environ.get("WORKSHOP_DRYRUN_CACHE")
    return Path(given) if given else None


def read_cached(caches: list[Path], name: str) -> dict[str, Any] | None:
    """The dry run `name` from the first cache that holds it; a folder this user cannot read (another user's,
    e.g. a suite's, seen from a Slurm job) holds nothing."""
    for cache in caches:
        try:
            return json.loads((cache / name).read_text())
        except (OSError, ValueError):
            continue
    return None


def dry_run(cfg: RunConfig, cache_dir: Path | None, in_process: bool = False) -> dict[str, Any]:
    """The dry run of `cfg` (workshop.training.dryrun), from a cache (`cache_dir`, then shared_cache()) when this
    config ran before; a new one is written to both. It runs in a process of its own, or here with `in_process`:
    for a caller that holds torch already and runs no process group of its own (the bench), where a process
    would spend more CPU importing torch and transformers (~4.5 s) than a small dry run takes."""
    name = f"{config_hash(cfg)}.json"
    caches = [c for c in (cache_dir, shared_cache()) if c is not None]
    if (found := read_cached(caches, name)) is not None:
        return found
    result = _run_here(cfg) if in_process else _run_in_a_process(cfg)
    for cache in caches:
        write_cached(cache, name, result)
    return result


def write_cached(cache: Path, name: str, result: dict[str, Any]) -> None:
    """`result` as cache/name, whole or absent (written aside, then renamed: another process may read it at
    once); a folder this user cannot write (an instructor's, a read-only copy) is left as it is: the next
    check runs the dry run again, or reads another cache's copy."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / f"{name}.part").write_text(json.dumps(result) + "\n")
        (cache / f"{name}.part").replace(cache / name)
    except OSError:
        pass


FAILED_HINT = "run `python -m workshop.training.dryrun --config <its config.json>` to see why"


def _run_in_a_process(cfg: RunConfig) -> dict[str, Any]:
    """`python -m workshop.training.dryrun` on the config: no torch, no process group left in the caller."""
    with tempfile.TemporaryDirectory(prefix="workshop-dryrun-") as tmp:
        path = cfg.to_json(Path(tmp) / "config.json")
        done = subprocess.run([sys.executable, "-m", "workshop.training.dryrun", "--config", str(path), "--json"],
                              capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ConfigError("dry run", f"the job's dry run failed: {last}", FAILED_HINT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _run_here(cfg: RunConfig) -> dict[str, Any]:
    """The dry run in this process, as quiet as the process (whose stderr is read only when it fails: torch's and
    accelerate's warnings about fake tensors), failing as it would: ConfigError naming its last line (the
    module's `error: ...`, or the exception)."""
    import warnings

    from workshop.training.dryrun import dry_run as run

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return json.loads(json.dumps(run(cfg)))    # as the process hands it over: JSON types only
    except ConfigError as e:
        last = f"error: {e}"
    except Exception as e:  # noqa: BLE001  (the process's traceback ends in the same line)
        last = f"{type(e).__name__}: {e}"
    raise ConfigError("dry run", f"the job's dry run failed: {last}", FAILED_HINT)


def gpu_need_mb(peak_mb: float) -> float:
    """What a GPU must hold for a tensor peak: the peak, the allocator's reserve on it, the CUDA context."""
    return peak_mb * (1 + ALLOCATOR_RESERVE) + CUDA_CONTEXT_BYTES / MB


def largest_micro_batch(cfg: RunConfig, first: dict[str, Any], gpu_mb: float, cache_dir: Path | None) -> int:
    """The largest micro-batch whose need fits `gpu_mb`: a second dry run at micro-batch 1 (or 2, when the
    job's is 1) draws the line through the two peaks (0: not even one sample fits)."""
    other = 2 if cfg.batch_size == 1 else 1
    second = dry_run(load_config(base=cfg, overrides={"batch_size": other}), cache_dir)
    b1, p1 = cfg.batch_size, first["memory_mb"]["peak"]
    b2, p2 = other, second["memory_mb"]["peak"]
    per_sample = (p1 - p2) / (b1 - b2)
    fixed = p1 - per_sample * b1
    budget = (gpu_mb - CUDA_CONTEXT_BYTES / MB) / (1 + ALLOCATOR_RESERVE)
    return max(0, int((budget - fixed) // per_sample)) if per_sample > 0 else 0


def check_gpu_memory(step: str, cfg: RunConfig, profile: Profile, cache_dir: Path | None) -> dict[str, Any] | None:
    """Refuse (ConfigError on batch_size) a training job whose dry run does not fit its partition's GPU
    memory; return the dry run (None where nothing is checked: no `gpu_mem`, or not a training step)."""
    part = profile.partition_for(step)
    if not part.gpu_mem or not part.gpus_per_node or get_step(step).program != "train":
        return None
    result = dry_run(cfg, cache_dir)
    gpu_mb, need = mem_mb(part.gpu_mem), gpu_need_mb(result["memory_mb"]["peak"])
    if need <= gpu_mb:
        return result
    fits = largest_micro_batch(cfg, result, gpu_mb, cache_dir)
    where = f"partition {part.name or part.key!r} ({part.gpu_name or part.gpu_type}, {part.gpu_mem} per GPU)"
    advice = (f"use batch_size={fits} (raise grad_acc to keep the global batch)" if fits else
              "not even a micro-batch of 1 fits: shard over more GPUs, or add offload / activation_checkpointing "
              "/ loss=chunked")
    raise ConfigError("batch_size", f"the job would not fit its GPUs: its dry run's peak per GPU is "
                      f"{result['memory_mb']['peak'] / 1024:,.2f} GiB of tensors, {need / 1024:,.2f} GiB with the "
                      f"CUDA context ({CUDA_CONTEXT_BYTES / 2**30:.1f} GiB) and the allocator's reserve "
                      f"({ALLOCATOR_RESERVE:.0%}), more than the {mem_mb(part.gpu_mem) / 1024:,.0f} GiB of {where}; "
                      f"the largest micro-batch that fits is {fits}",
                      f"{advice}; or submit anyway with force=True (`workshop submit --force`)")


def main(argv: list[str] | None = None) -> int:
    """`workshop dryrun STEP --profile P [--set key=value ...] [--json]`."""
    p = argparse.ArgumentParser(prog="workshop dryrun", description="A step's job on this site at full size "
                                "on fake tensors, without a GPU (workshop.training.dryrun): rank 0's memory by "
                                "category (its peak and each phase), the FLOPs of one optimizer step and every "
                                "collective with its bytes. The fake device is the CPU: no CUDA context, "
                                "allocator reserve or NCCL buffers. Where the step's partition states gpu_mem, "
                                "says whether the job fits it (the check `workshop submit` makes).")
    p.add_argument("step", choices=[s for s, v in STEPS.items() if v.program == "train"])
    p.add_argument("--profile", default=None, help="site profile name or .toml path (default: $WORKSHOP_PROFILE, "
                   "or local where there is no Slurm)")
    p.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE",
                   help="config field override, repeatable (e.g. --set model=bigscience/bloom-560m)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--jobs-dir", default="jobs", help="the cache lives in its .dryrun/ (default: ./jobs)")
    args = p.parse_args(argv)
    from workshop.slurm.profiles import ProfileError
    from workshop.training.dryrun_report import format_report

    try:
        prof = load_profile(args.profile)
        cfg = step_config(args.step, prof, parse_assignments(args.assignments))
        result = dry_run(cfg, Path(args.jobs_dir) / CACHE)
    except (ConfigError, ProfileError) as e:
        print(f"workshop: {e}", file=sys.stderr)
        return 2
    part = prof.partition_for(args.step)
    print(json.dumps(result) if args.json else format_report(result))
    if part.gpu_mem and not args.json:
        need = gpu_need_mb(result["memory_mb"]["peak"])
        print(f"on {part.name or part.key} ({part.gpu_mem} per GPU): needs {need / 1024:,.2f} GiB with the CUDA "
              f"context and the allocator's reserve: {'fits' if need <= mem_mb(part.gpu_mem) else 'DOES NOT FIT'}")
    return 0
