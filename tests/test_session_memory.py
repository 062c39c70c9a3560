"""A student's JupyterLab session survives notebook 05: the kernel reads the checkpoint's index, never its
weights, so its peak memory does not grow with the model, and the site's session ([ood] mem, the OOD form's
default) holds it with room to spare."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from workshop.slurm.profiles import PROFILES_DIR, load_profile, mem_mb

MB = 2**20
# The kernel's peak (ru_maxrss) through notebook 05 on the embedded default: 462 MB in the course run of
# 2026-11-28 (2 cores, torch 2.13 CPU, local profile). The bound leaves twice that for other builds and pandas'
# or matplotlib's versions; BLOOM-560M adds no weight to the kernel (its index is < 1 MB), so the bound is its too.
KERNEL_BOUND_MB = 1024
# The session ([ood] mem) holds the JupyterLab server and up to three kernels at that bound (a student keeps
# earlier notebooks open): 4 x the bound.
SESSION_KERNELS = 4


def kernel_peak_mb(course_run: Path) -> float:
    import nbformat

    nb = nbformat.read(course_run / "05_multi_node" / "05_multi_node.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.id == "nb05-kernel-rss")
    text = "".join(o.get("text", "") for o in cell.outputs)
    found = re.search(r"kernel peak RSS: (\d+) MB", text)
    assert found, text
    return float(found.group(1))


def test_notebook_05s_kernel_stays_within_the_session(course_run: Path) -> None:
    """The executed notebook 05 (local profile, the embedded tiny model): its kernel's peak RSS, through every
    cell, is under KERNEL_BOUND_MB; the kernel holds no weight of any model (the checkpoint cell reads the DCP
    index, tests/test_session_memory.py::test_reading_a_checkpoints_index_loads_no_weight), so BLOOM-560M's
    bound is the same figure plus its index (a few hundred tensor entries, well under 1 MB): the class's session
    size (example-hpc's [ood] mem, the OOD form's memory) is SESSION_KERNELS times it."""
    if not (course_run / "05_multi_node").is_dir():
        pytest.skip("notebook 05 was not part of this course run (WORKSHOP_TEST_ONLY)")
    peak = kernel_peak_mb(course_run)
    print(f"notebook 05 kernel peak RSS: {peak:.0f} MB")
    assert 100 < peak < KERNEL_BOUND_MB
    assert mem_mb(load_profile("example-hpc").session_mem) == SESSION_KERNELS * KERNEL_BOUND_MB


READ_INDEX = r'''
import resource, sys
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
index = FileSystemReader(sys.argv[1]).read_metadata().state_dict_metadata
sizes = {k: tuple(v.size) for k, v in index.items() if isinstance(v, TensorStorageMetadata)}
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(sizes), sizes["big"], (after - before) / 1024)
'''


def test_reading_a_checkpoints_index_loads_no_weight(tmp_path: Path) -> None:
    """A real DCP checkpoint of 256 MB (one 8192 x 8192 fp32 tensor and a small one, saved by
    torch.distributed.checkpoint without a process group): a fresh process that reads its index, as notebook 05's
    cell does, gets the names and shapes and grows by far less than the weights (under 32 MB)."""
    import torch
    import torch.distributed.checkpoint as dcp

    folder = tmp_path / "pytorch_model_fsdp_0"
    dcp.save({"big": torch.zeros(8192, 8192), "small": torch.ones(3)}, storage_writer=dcp.FileSystemWriter(str(folder)))
    assert sum(p.stat().st_size for p in folder.glob("*.distcp")) >= 256 * MB
    out = subprocess.run([sys.executable, "-c", READ_INDEX, str(folder)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    count, shape, grew = out.stdout.split(" ", 1)[0], out.stdout.split("(", 1)[1].split(")")[0], float(out.stdout.split()[-1])
    assert count == "2" and shape == "8192, 8192"
    assert grew < 32, f"reading the index grew the process by {grew:.0f} MB"

