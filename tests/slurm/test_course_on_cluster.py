"""The course on the real test cluster (profile ci), headless with papermill: the instructor guide's dry run,
typed as written, at the rate limit a student has (Slurm asked at most once per 10 s), where each cell's jobs
go to the queue together and run side by side.

Only what the cluster alone proves runs here (issue 51: the course runs once per suite): notebook 03, whose
cell of five strategy jobs is the one that must overlap on two nodes and be read back from accounting
(WORKSHOP_COURSE_ONLY narrows the dry run, the command stays as written). Notebook 05 runs on the cluster
inside an Open OnDemand session (tests/slurm/test_notebook05_in_session.py), which checks its jobs with the
helpers below; every notebook runs end to end on the local backend (tests/test_course.py, `course_run`), and
the jobs of 01, 02 and 04 (one GPU, two GPUs of a node, two nodes) are submitted to this cluster by
tests/slurm/test_jobs_on_cluster.py."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime
from pathlib import Path

import nbformat
import pytest

from tests.conftest import CELL_TIMEOUT_S
from workshop.grading.release import assignments

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slurm
ON_CLUSTER = "03_sharding_strategies"


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


def test_the_dry_run_runs_notebook_03_on_the_cluster(cluster_course: Path) -> None:
    assert sorted(p.name for p in cluster_course.iterdir() if p.name in assignments()) == [ON_CLUSTER]
    assert_notebook_ran_on_slurm(cluster_course / ON_CLUSTER, ON_CLUSTER)


# Notebook 03 on this test cluster before a cell's jobs were submitted together (issue 14, JupyterLab in a
# Slurm job, 10 s poll floor): 92 s of wall time for 54 s of jobs. The other 38 s were the waits between
# one job's end and the next submission (the poll floor, about 7.6 s a job), which do not grow with the
# machine's load; the jobs' own time does. So "today's" wall time on this run's machine is rebuilt from
# this run's own job times: the sum of their Slurm elapsed times plus those waits.
SERIAL_GAP_S = 38.0 / 5
POLL_FLOOR_S = 10.0      # workshop.slurm.slurm_backend.MIN_POLL_INTERVAL: a job's end is seen within one poll


def test_notebook_03_jobs_overlap_in_time_and_it_takes_at_most_60_percent_of_today(slurm_cluster, cluster_course):
    folder = cluster_course / "03_sharding_strategies"
    nb = nbformat.read(folder / "03_sharding_strategies.ipynb", as_version=4)
    run_again = nb.metadata.get("workshop", {}).get("run_again_after_a_hung_cell", False)
    # "today" is the notebook before it had the budget challenge (section 4, one more job): leave
    # that section's cells out of the time, and its job out of the overlap
    ids = [c.metadata.get("nbgrader", {}).get("grade_id", "") for c in nb.cells]
    challenge = range(ids.index("nb03-challenge-text"), ids.index("nb03-24-plot-text"))
    took = nb.metadata.papermill.duration - sum(nb.cells[i].metadata.papermill.duration or 0 for i in challenge)
    records = sorted((json.loads(r.read_text()) for r in folder.glob("jobs/*/job.json")),
                     key=lambda saved: saved["submitted_at"])
    assert len(records) == 6, [r["job_id"] for r in records]
    spans, submits, elapsed = [], [], 0.0
    for saved in records[:5]:   # the five strategy jobs; the challenge job is submitted last
        rec = slurm_cluster.job_record(saved["job_id"], "JobID,State,Submit,Start,End,ElapsedRaw")
        assert rec["State"] == "COMPLETED", rec
        spans.append((datetime.fromisoformat(rec["Start"]), datetime.fromisoformat(rec["End"])))
        submits.append(datetime.fromisoformat(rec["Submit"]))
        elapsed += float(rec["ElapsedRaw"])
    # at each job's start, the jobs running: two nodes hold two 2-GPU jobs at once, and they did
    assert max(sum(s <= start < e for s, e in spans) for start, _ in spans) == 2, spans
    overlapping = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1:] if a[0] < b[1] and b[0] < a[1]]
    assert len(overlapping) >= 2, spans
    today = elapsed + 5 * SERIAL_GAP_S
    # The time the student waits for the five jobs: from the first submission until the notebook can see the
    # last one end (Slurm's End, plus one poll). The notebook's own cells (tables, plots) are left out: they
    # do not run side by side, and on a loaded CI machine they grew (216 s for 147 s of jobs) while the
    # jobs still overlapped as they should.
    waited = (max(e for _, e in spans) - min(submits)).total_seconds() + POLL_FLOOR_S
    print(f"notebook 03 on the cluster, without its challenge section: {took:.0f} s; its five jobs, from the first "
          f"submission to the last end seen: {waited:.0f} s; one job after another they would take {today:.0f} s "
          f"({elapsed:.0f} s of jobs + the waits); {len(overlapping)} overlapping pairs")
    if run_again:
        pytest.skip("notebook 03 ran twice (a cell's reply was lost, see workshop.grading.run_all): its wall time is "
                    "the second run's, which found its jobs done, so it says nothing (the overlap passed)")
    assert waited <= 0.6 * today, f"{waited:.0f} s waited for the jobs > 60 % of {today:.0f} s"
