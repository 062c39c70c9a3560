"""The job display beside PENDING: why the job waits, in words (issue 40, item 2). squeue's %r reason lands in the
job's record (workshop.slurm.slurm_backend.Poller); the widget, the text view and the saved table read it."""

from __future__ import annotations

from pathlib import Path

from workshop.slurm import watch
from workshop.slurm.jobs import Job
from workshop.slurm.records import JobRecord, JobState


def job(tmp_path: Path, state: str, reason: str) -> Job:
    return Job(JobRecord(job_id="41", backend="slurm", step="bandwidth", profile="ci", name="workshop-bandwidth",
                         job_dir=str(tmp_path), state=state, reason=reason, state_from="slurm"))


def test_pending_says_why_and_what_to_do(tmp_path: Path) -> None:
    waiting = job(tmp_path, "PENDING", "Resources")
    assert watch._state_words(waiting, JobState.PENDING) == (
        "PENDING: waiting for free nodes: the ones it needs are busy with other jobs, it starts when they end "
        "(Resources)")
    stuck = job(tmp_path, "PENDING", "ReqNodeNotAvail, UnavailableNodes:n2")
    words = watch._state_words(stuck, JobState.PENDING)
    assert words.startswith("PENDING: a node it needs is down, drained or reserved for someone else "
                            "(ReqNodeNotAvail, UnavailableNodes:n2): ") and "instructor" in words
    assert watch._state_words(job(tmp_path, "PENDING", ""), JobState.PENDING) == "PENDING"
    assert watch._state_words(job(tmp_path, "FAILED", "exit code 1"), JobState.FAILED) == "FAILED (exit code 1)"


def test_the_saved_table_row_of_a_waiting_job(tmp_path: Path) -> None:
    waiting = job(tmp_path, "PENDING", "Priority")
    row, = watch._record({"gate": waiting}, {"gate": JobState.PENDING})
    assert row == {"run": "gate", "job": "41", "state": "PENDING: other jobs are ahead of it in the queue; it starts "
                   "in its turn (Priority)", "elapsed": "-", "exit code": "-", "last log line": ""}
