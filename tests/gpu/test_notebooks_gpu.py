"""Notebooks 01 and 02 executed with papermill on the `gpu-local` profile: the local backend, this CUDA
device, BLOOM-560M's architecture with random weights, the shipped SQuAD fixture. Every cell runs,
and every job behind the exercise tables ran on CUDA."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.conftest import PROFILE

NOTEBOOKS = ("01_baseline", "02_fsdp_single_gpu")
CELL_TIMEOUT_S = 600


@pytest.fixture(scope="session")
def course_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the executed notebooks, their jobs, tables and plots go ($WORKSHOP_GPU_NOTEBOOKS: kept for the report)."""
    return Path(os.environ.get("WORKSHOP_GPU_NOTEBOOKS") or tmp_path_factory.mktemp("gpu-course"))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_every_cell_on_cuda(course_dir: Path, figures: Any, name: str) -> None:
    import nbformat
    import pandas as pd
    import torch

    from workshop.grading.run_all import run_notebook
    from workshop.slurm.jobs import Job
    from workshop.slurm.records import JobRecord

    started = time.perf_counter()
    notebook = run_notebook(name, course_dir, {"profile": PROFILE, "overrides": {}}, cell_timeout=CELL_TIMEOUT_S,
                            side_by_side=True)   # the kernel starts in the notebook's folder; pytest's cwd stays
    wall = time.perf_counter() - started
    nb = nbformat.read(notebook, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    jobs = [Job(JobRecord.load(f.parent)) for f in sorted((course_dir / name / "jobs").glob("*/job.json"))]
    summaries = {job.job_id: job.summary() or {} for job in jobs}
    tables = sorted((course_dir / name / "tables").glob("*.csv"))
    figures.put(f"notebook[{name}]", wall_s=round(wall, 1), code_cells=len(code),
                executed=sum(c.get("execution_count") is not None for c in code), errors=len(errors),
                jobs={k: {f: s.get(f) for f in ("status", "device_name", "sharding_applied", "offload_applied",
                                                "peak_mem_mb", "train_samples_per_s", "mfu", "train_runtime_s")}
                      for k, s in summaries.items()},
                tables=[t.name for t in tables])
    assert not errors and all(c.get("execution_count") is not None for c in code), "a cell did not run"
    assert jobs, f"{name} submitted no job"
    gpu = torch.cuda.get_device_name(0)
    for job, s in zip(jobs, summaries.values()):
        assert job.state().value == "COMPLETED", f"{job.job_id}: {job.state().value} {job.reason}"
        assert s.get("device") == "cuda" and s.get("device_name") == gpu, (job.job_id, s.get("device"))
        assert s.get("mem_kind") == "cuda_allocated" and s.get("model") == "bloom-560m-random"
    assert tables, f"{name} saved no exercise table"
    # the tables' memory column holds the CUDA allocator's peaks of these jobs, nothing from a CPU run
    peaks = [s["peak_mem_mb"] for s in summaries.values()]
    for table in tables:
        frame = pd.read_csv(table)
        for value in frame.get("peak_mem_mb", pd.Series(dtype=float)).dropna():
            assert any(abs(float(value) - p) <= 0.5 for p in peaks), f"{table.name}: peak_mem_mb {value} is no job's"
