"""Every solution notebook, executed headless with papermill on the real test cluster (profile ci):
the course as HPC staff run it before a workshop."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

from workshop.release import assignments

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def cluster_course(slurm_cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from workshop.course import main

    saved = {k: os.environ.get(k) for k in [*slurm_cluster.env, "WORKSHOP_SLURM_MIN_POLL_S"]}
    # the kernels papermill starts inherit this: the cluster, and a poller fast enough for a test
    os.environ.update(slurm_cluster.env, WORKSHOP_SLURM_MIN_POLL_S="1")
    out = slurm_cluster.shared / f"course-{os.getpid()}"
    try:
        assert main(["--output", str(out), "--profile", "ci"]) == 0
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return out


@pytest.mark.parametrize("name", assignments())
def test_notebook_runs_on_the_cluster(cluster_course: Path, name: str) -> None:
    nb = nbformat.read(cluster_course / name / f"{name}.ipynb", as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []
    records = list((cluster_course / name / "jobs").glob("*/job.json"))
    assert records
    for record in records:
        text = record.read_text()
        assert '"backend": "slurm"' in text and '"state": "COMPLETED"' in text


def test_multi_node_jobs_ran_on_both_nodes(cluster_course: Path) -> None:
    import json

    summaries = [json.loads(p.read_text()) for p in (cluster_course / "05_multi_node" / "jobs").glob("*/run/summary.json")]
    two_node = [s for s in summaries if s["nodes"] == 2]
    assert two_node and all(set(s["hosts"]) == {"n1", "n2"} for s in two_node)
