"""A cell's jobs go together: one call submits them all, the local backend runs as many side by side as
the machine's cores allow and queues the rest in order, one wait returns every state, a re-run cell
submits nothing new, and one call cancels them all.

The jobs here are real batch scripts on the local backend whose site setup sleeps and then ends the
script (no training needed to show queueing), each job's start and end read from the queue's own
files: when it left the queue (`.started-<id>`) and when it exited (`.exit-<id>`).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from workshop.training.config import ConfigError
from workshop.slurm import JobState, submit_all
from workshop.slurm.local_backend import started_marker
from tests.waiting import until


@pytest.fixture()
def two_cores(tmp_path, monkeypatch) -> Path:
    """This test's own core slots: two cores, whatever the machine has and whoever else runs jobs."""
    monkeypatch.setenv("WORKSHOP_LOCAL_CORES", "2")
    monkeypatch.setenv("WORKSHOP_LOCAL_SLOTS", str(tmp_path / "slots"))
    return tmp_path


def sleeper(tmp_path: Path, seconds: float) -> Path:
    """A local profile whose jobs sleep `seconds`, then end the script with exit 0."""
    path = tmp_path / "sleeper.toml"
    path.write_text(f"""
name = "sleeper"
backend = "local"
[slurm.partitions.cpu]
cpus_per_proc = 1
[env]
python_env = "current"
setup = ["sleep {seconds}; exit 0"]
[run]
model = "tiny"
device = "cpu"
""")
    return path


def span(job) -> tuple[float, float]:
    """(start, end) of a local job by the queue's files."""
    return started_marker(job.record).stat().st_mtime, (job.job_dir / f".exit-{job.job_id}").stat().st_mtime


def test_one_call_runs_the_jobs_side_by_side_as_cores_allow_and_queues_the_rest(two_cores, capsys):
    prof = sleeper(two_cores, 2)
    specs = {f"seed {s}": ("baseline", {"seed": s}) for s in (1, 2, 3)}
    t0 = time.monotonic()
    jobs = submit_all(specs, prof, jobs_dir=two_cores / "jobs")
    assert list(jobs) == list(specs)
    # the first two leave the queue (a busy machine may take a while to start them): the third stays in it
    until(lambda: all(started_marker(jobs[n].record).exists() for n in ("seed 1", "seed 2")), "two jobs to start")
    first = jobs.states()
    assert [first[n].value for n in specs] == ["RUNNING", "RUNNING", "PENDING"], first
    assert "waiting for free cores" in jobs["seed 3"].reason
    states = jobs.wait(timeout=300, poll=0.2)
    took = time.monotonic() - t0
    assert states == {name: JobState.COMPLETED for name in specs}
    (s1, e1), (s2, e2), (s3, e3) = (span(jobs[n]) for n in specs)
    assert s2 < e1 and s1 < e2                      # the first two overlap
    assert s3 >= min(e1, e2) - 0.05                 # the third waited for a free core
    assert took >= 4                                # two waves of 2 s each at least (the upper bound is the machine's)
    out = capsys.readouterr().out
    assert all(f"{jobs[n].job_id} {n}: COMPLETED" in out for n in specs)   # one display for all
    for n in specs:                                 # the scheduler's clock is the queue's files: each ran its 2 s
        start, end = span(jobs[n])
        assert jobs[n].elapsed() == round(end - start, 1) and end - start >= 1.95

    again = submit_all(specs, prof, jobs_dir=two_cores / "jobs")   # the cell run again
    assert {n: j.job_id for n, j in again.items()} == {n: j.job_id for n, j in jobs.items()}
    assert len(list((two_cores / "jobs").glob("*/job.json"))) == 3


def test_a_job_bigger_than_a_free_core_waits_for_the_one_before_it(two_cores):
    prof = sleeper(two_cores, 1.5)
    jobs = submit_all({"one": ("baseline", {}), "two": ("strategies", {"procs_per_node": 2}),
                       "after": ("baseline", {"seed": 7})}, prof, jobs_dir=two_cores / "jobs")
    assert set(jobs.wait(timeout=300, poll=0.2).values()) == {JobState.COMPLETED}
    (s1, e1), (s2, e2), (s3, _) = (span(jobs[n]) for n in ("one", "two", "after"))
    assert s2 >= e1 - 0.05       # two cores: it waits for "one", although one core was free
    assert s3 >= s2              # and "after" does not jump the queue onto that free core


def test_one_call_cancels_the_cell_s_jobs_running_or_queued(two_cores):
    prof = sleeper(two_cores, 300)
    jobs = submit_all({n: ("strategies", {"seed": n}) for n in (1, 2)}, prof, jobs_dir=two_cores / "jobs")
    until(lambda: started_marker(jobs[1].record).exists(), "the first job to start")
    assert [s.value for s in jobs.states().values()] == ["RUNNING", "PENDING"]
    assert set(jobs.cancel().values()) == {JobState.CANCELLED}
    assert jobs.wait(timeout=10, quiet=True) == {1: JobState.CANCELLED, 2: JobState.CANCELLED}


def test_a_bad_config_submits_none_of_the_cell_s_jobs(two_cores):
    with pytest.raises(ConfigError, match="batch_size"):
        submit_all({"good": ("baseline", {}), "bad": ("baseline", {"batch_size": 0})}, sleeper(two_cores, 1),
                   jobs_dir=two_cores / "jobs")
    assert not (two_cores / "jobs").exists()
