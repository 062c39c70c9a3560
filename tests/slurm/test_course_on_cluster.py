"""The course on the real test cluster (profile ci), headless with papermill: the instructor guide's dry run,
typed as written, at the rate limit a student has (Slurm asked at most once per 10 s).

Only what the cluster alone proves runs here (issue 51: the course runs once per suite). The guide's command runs
one notebook end to end on Slurm, notebook 01, whose one job is the cheapest (WORKSHOP_COURSE_ONLY narrows the dry
run, the command stays as written). Notebook 03's cell of five strategy jobs, the one that must queue together and
overlap on the two nodes, is submitted here as the cell submits it, its jobs training nothing: their life in Slurm
is what the cluster proves; its training, tables and plots are the local course run's (tests/test_course.py,
`course_run`). Notebook 05 runs on the cluster inside an Open OnDemand session
(tests/slurm/test_notebook05_in_session.py), which checks its jobs with the helpers below; the jobs of 01, 02 and
04 (one GPU, two GPUs of a node, two nodes) are submitted to this cluster by tests/slurm/test_jobs_on_cluster.py."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import nbformat
import pytest

from tests.conftest import CELL_TIMEOUT_S
from tests.slurm.conftest import NO_TRAINING_SETUP
from tests.slurm.test_preflight_on_cluster import here  # noqa: F401 - the fixture: a fresh folder every user writes
from workshop.grading.release import assignments
from workshop.slurm.profiles import load_profile

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slurm
ON_CLUSTER = "01_baseline"


@pytest.fixture(scope="module")
def cluster_course(slurm_cluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docs/instructor.md's dry run, typed at a shell as written, with this test cluster's profile for
    <site>; in an environment that has the cluster and the real 10 s poll floor (the kernels papermill
    starts inherit it), and a cell timeout (papermill#711: a lost kernel reply)."""
    from tests.test_docs_commands import fenced, line_with

    line = line_with(fenced(ROOT / "docs" / "instructor.md"), "workshop.grading.run_all --profile")
    assert line == "python -m workshop.grading.run_all --profile <site> --output results-<site>", line
    where = slurm_cluster.shared / f"course-{os.getpid()}"
    where.mkdir(mode=0o1777)
    env = {**os.environ, **slurm_cluster.env, "WORKSHOP_CELL_TIMEOUT": str(CELL_TIMEOUT_S), "WORKSHOP_COURSE_ONLY": ON_CLUSTER,
           "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("WORKSHOP_SLURM_MIN_POLL_S", None)
    proc = subprocess.run(["bash", "-c", line.replace("<site>", "ci")], cwd=where, env=env, text=True,
                          capture_output=True, timeout=1800)
    print(proc.stdout[-4000:], proc.stderr[-4000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return where / "results-ci"


def assert_notebook_ran_on_slurm(folder: Path, name: str) -> None:
    """The executed notebook `name` in `folder` shows no error, and each of its jobs went through Slurm and
    COMPLETED, but notebook 05's diagnosis exercise: its one job with a stray rendezvous endpoint FAILED."""
    nb = nbformat.read(folder / f"{name}.ipynb", as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []
    records = list((folder / "jobs").glob("*/job.json"))
    assert records
    ended = {}
    for record in records:
        saved = json.loads(record.read_text())
        assert saved["backend"] == "slurm", record
        stray = json.loads((record.parent / "config.json").read_text()).get("rdzv_endpoint")
        ended[record.parent.name] = (saved["state"], stray)
    broken = {n: s for n, (s, stray) in ended.items() if stray}
    assert all(state == "FAILED" for state in broken.values()), ended
    assert len(broken) == (1 if name == "05_multi_node" else 0), ended
    assert all(state == "COMPLETED" for n, (state, _) in ended.items() if n not in broken), ended


def assert_multi_node_jobs_ran_on_both_nodes(folder: Path) -> None:
    """Notebook 05's two-node jobs (in its results `folder`) ran on n1 and n2."""
    summaries = [json.loads(p.read_text()) for p in (folder / "jobs").glob("*/run/summary.json")]
    two_node = [s for s in summaries if s["nodes"] == 2]
    assert two_node and all(set(s["hosts"]) == {"n1", "n2"} for s in two_node)


def test_the_dry_run_runs_notebook_01_on_the_cluster(cluster_course: Path) -> None:
    assert sorted(p.name for p in cluster_course.iterdir() if p.name in assignments()) == [ON_CLUSTER]
    assert_notebook_ran_on_slurm(cluster_course / ON_CLUSTER, ON_CLUSTER)


def solution_runs(assignment: str, grade_id: str) -> dict[str, dict[str, Any]]:
    """The `runs` a solution's cell defines (its model answer: the last assignment of the cell wins)."""
    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    [cell] = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    names: dict[str, Any] = {}
    exec(cell.source, names)
    return names["runs"]


def test_notebook_03s_five_jobs_queue_together_and_run_two_at_a_time_on_the_two_nodes(
        cluster, here: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811 - here is the fixture
    """The cell's five jobs (Lab.run_all with the solution's `runs`, as the cell calls it): every one COMPLETED,
    and Slurm's accounting shows them side by side: the two nodes hold two 2-GPU jobs at once, never more, and
    at least two pairs overlap in time (before issue 14 a cell's jobs ran one after another)."""
    from workshop.student.lab import Lab

    monkeypatch.chdir(here)     # the Lab writes tables/ and plots/ beside its notebook
    stand_in = dataclasses.replace(load_profile("ci"), setup=(*load_profile("ci").setup, NO_TRAINING_SETUP))
    runs = solution_runs("03_sharding_strategies", "nb03-05-predict")
    group = Lab(stand_in, jobs_dir=here / "jobs", quiet=True).run_all(runs)
    assert sorted(group) == sorted(runs) and len(runs) == 5
    assert {json.loads((job.job_dir / "config.json").read_text())["procs_per_node"] for job in group.values()} == {2}
    spans = []
    for name, job in group.items():
        assert cluster.wait(job.job_id, timeout=180)["State"] == "COMPLETED", name
        rec = cluster.job_record(job.job_id, "JobID,State,Start,End")
        spans.append((datetime.fromisoformat(rec["Start"]), datetime.fromisoformat(rec["End"])))
    assert max(sum(s <= start < e for s, e in spans) for start, _ in spans) == 2, spans
    overlapping = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1:] if a[0] < b[1] and b[0] < a[1]]
    assert len(overlapping) >= 2, spans
    trained = [name for name, job in group.items() if (job.job_dir / "run" / "summary.json").exists()]
    assert trained == [], f"{trained} trained: NO_TRAINING_SETUP must stop torchrun too (~4 CPU-s a rank)"
