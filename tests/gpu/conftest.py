"""The GPU tier: real work on a CUDA device (scripts/gpu_check.sh runs it on a lent GPU).

Every test under tests/gpu is marked `gpu` and skipped, with the reason, where torch sees no CUDA
device: CI and laptops collect the tier and skip it, and `scripts/gpu_check.sh --dry-run` counts the
skips. On a GPU the tier's training runs are made once per session (`gpu_runs`), a few at a time on
the one device (each process's allocator counters are its own, so the memory figures do not mix;
the throughput of runs that share a GPU is no benchmark figure, which is why `workshop bench` runs
alone after the tier).

Each test puts what it measured into `figures` before it asserts, so the figure and the ratio are in
the report (`$WORKSHOP_GPU_FIGURES`, merged into the results file) and printed, pass or fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROFILE = "gpu-local"
# Runs side by side on the GPU: the memory model predicts about 11 GB each at the tier's batch (TIER_RUN), and
# the CPU-side start-up (imports, building BLOOM-560M on the host) is most of a run, so 4 at a time cut the
# tier's wall time and fit an 80 GB H100.
PARALLEL = int(os.environ.get("WORKSHOP_GPU_PARALLEL", "4"))
RUN_TIMEOUT_S = float(os.environ.get("WORKSHOP_GPU_RUN_TIMEOUT", "300"))

# The training runs of the tier: every configuration the issue names, in bf16 and in fp16 (the gradient
# scaler's path). One place, so the strategy, consistency, memory and MFU tests read the same runs.
STRATEGIES: dict[str, dict[str, Any]] = {
    "none": dict(step="baseline"),
    "full_shard": dict(step="fsdp_1gpu"),
    "offload": dict(step="fsdp_1gpu", offload=True),
    "activation_checkpointing": dict(step="fsdp_1gpu", activation_checkpointing=True),
}
PRECISIONS = ("bf16", "fp16")
RUNS = [f"{s}-{p}" for p in PRECISIONS for s in STRATEGIES]
# The tier's size: gpu-local's BLOOM-560M run at a smaller micro-batch, 6 optimizer steps (a warm-up
# step, the tracker's measured step, steady steps), one evaluation, no generation.
TIER_RUN = dict(batch_size=4, train_size=24, eval_size=8, epochs=1.0, logging_steps=1, eval_generate=False,
                wandb="disabled")


def cuda_missing() -> str | None:
    """Why the tier cannot run here, or None on a CUDA machine."""
    import torch

    if torch.cuda.is_available():
        return None
    return (f"no CUDA: torch {torch.__version__} sees no GPU here; the GPU tier runs on a lent GPU "
            "(scripts/gpu_check.sh, benchmarks/README.md)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if HERE in Path(str(item.path)).parents]
    if not mine:
        return
    reason = cuda_missing()
    for item in mine:
        item.add_marker(pytest.mark.gpu)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


@dataclass
class GpuRun:
    """One finished training process: its folder, exit code and log."""

    name: str
    out_dir: Path
    returncode: int
    log: str
    wall_s: float

    def _json(self, name: str) -> dict[str, Any]:
        path = self.out_dir / name
        assert path.is_file(), (f"{self.name}: no {name} (exit {self.returncode}, {self.wall_s:.0f} s); "
                                f"log tail:\n{self.log[-4000:]}")
        return json.loads(path.read_text())

    @property
    def summary(self) -> dict[str, Any]:
        return self._json("summary.json")

    @property
    def config(self) -> dict[str, Any]:
        return self._json("run_args.json")["config"]

    @property
    def records(self) -> list[dict[str, Any]]:
        path = self.out_dir / "metrics.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def tier_config(name: str, out_dir: Path) -> Any:
    """The RunConfig of one tier run: the gpu-local profile's step, at the tier's size."""
    from workshop.slurm.profiles import load_profile
    from workshop.slurm.steps import step_config

    strategy, precision = name.rsplit("-", 1)
    spec = dict(STRATEGIES[strategy])
    step = spec.pop("step")
    return step_config(step, load_profile(PROFILE), {**TIER_RUN, **spec, "precision": precision,
                                                     "output_dir": str(out_dir)})


def launch(name: str, root: Path, threads: int) -> GpuRun:
    """`python -m workshop.training.train --config CONFIG.json`, as a one-process job runs it."""
    from workshop.bench.harness import child_env

    out_dir = root / name
    out_dir.mkdir(parents=True, exist_ok=True)
    config = tier_config(name, out_dir).to_json(out_dir / "config.json")
    env = {**child_env("cuda"), "OMP_NUM_THREADS": str(threads)}
    started = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "workshop.training.train", "--config", str(config)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        code, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        code, log = 124, f"timed out after {RUN_TIMEOUT_S:.0f} s\n{e.stdout or ''}{e.stderr or ''}"
    (out_dir / "job.log").write_text(log)
    return GpuRun(name, out_dir, code, log, time.perf_counter() - started)


def runs_needed(items: list[pytest.Item]) -> list[str]:
    """The tier runs the selected tests read: a test parametrized by `name` reads that run, by `precision`
    the two it compares, and the MFU test the bf16 run without FSDP. A rerun of a few tests (`-k`) then
    trains only what they read."""
    want: set[str] = set()
    for item in items:
        if "gpu_runs" not in getattr(item, "fixturenames", ()):
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("name") in RUNS:
            want.add(params["name"])
        elif params.get("precision") in PRECISIONS:
            want |= {f"none-{params['precision']}", f"full_shard-{params['precision']}"}
        else:
            want.add("none-bf16")
    return [name for name in RUNS if name in want]


@pytest.fixture(scope="session")
def gpu_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, GpuRun]:
    """The tier runs the session's tests read, made once, PARALLEL at a time on the one GPU."""
    root = Path(os.environ.get("WORKSHOP_GPU_RUNS") or tmp_path_factory.mktemp("gpu-runs"))
    names = runs_needed(request.session.items)
    threads = max(1, (os.cpu_count() or 1) // min(PARALLEL, len(names) or 1))
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        runs = dict(zip(names, pool.map(lambda n: launch(n, root, threads), names)))
    for run in runs.values():
        print(f"[gpu tier] {run.name}: exit {run.returncode} in {run.wall_s:.0f} s ({run.out_dir})")
    return runs


class Figures(dict):
    """What each test measured, by test id: printed at once, and written to $WORKSHOP_GPU_FIGURES at each
    addition (a tier stopped by its time cap still leaves what it measured)."""

    def put(self, key: str, **values: Any) -> None:
        self[key] = values
        print(f"[gpu figures] {key}: {json.dumps(values, default=str)}", flush=True)
        path = os.environ.get("WORKSHOP_GPU_FIGURES")
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(json.dumps(self, indent=1, default=str) + "\n")


@pytest.fixture(scope="session")
def figures() -> Figures:
    return Figures()
