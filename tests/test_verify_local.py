"""`workshop verify` on jobs the local backend really ran (the session's course run: every notebook
executed on the local backend): genuine ones pass, and a copied, edited or foreign log is flagged
with its reason. There is no Slurm accounting here: job.json and the digest are what a local job is
checked against."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from workshop.results import verify
from workshop.grading.release import assignments

pytestmark = pytest.mark.slow


def hand_in(subs: Path, student: str, assignment: str, course_run: Path) -> Path:
    """A student's assignment folder (its jobs/) as collected into submitted/."""
    dest = subs / student / assignment
    shutil.copytree(course_run / assignment / "jobs", dest / "jobs")
    return dest / "jobs"


def check(subs: Path) -> tuple[int, dict[tuple[str, str, str], verify.Verdict]]:
    rc = verify.main([str(subs)])
    return rc, {(v.student, v.assignment, v.folder.name): v for v in verify.verify(subs)}


def test_every_genuine_local_job_of_the_course_passes(course_run: Path, tmp_path: Path, capsys) -> None:
    for name in assignments():
        hand_in(tmp_path, "alice", name, course_run)
    rc, verdicts = check(tmp_path)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert len(verdicts) >= 15 and all(v.ok and v.backend == "local" for v in verdicts.values())
    assert sum(v.job == "local-1" for v in verdicts.values()) == len(assignments())   # one local-1 per notebook
    assert "local backend: no Slurm accounting" in out


def test_a_classmates_jobs_handed_in_are_flagged(course_run: Path, tmp_path: Path) -> None:
    hand_in(tmp_path, "alice", "01_baseline", course_run)
    hand_in(tmp_path, "alice", "02_fsdp_single_gpu", course_run)
    hand_in(tmp_path, "carol", "01_baseline", course_run)           # carol hands in alice's 01 as hers
    rc, v = check(tmp_path)
    assert rc == 1
    assert all(x.ok for k, x in v.items() if k[1] == "02_fsdp_single_gpu")
    carol = [x for k, x in v.items() if k[0] == "carol"]
    assert carol and all(any("the same log (job local-" in r and "(pid " in r and "alice/01_baseline" in r
                             for r in x.reasons) for x in carol), [x.reasons for x in carol]


def test_edited_numbers_are_flagged(course_run: Path, tmp_path: Path) -> None:
    jobs = hand_in(tmp_path, "alice", "01_baseline", course_run)
    job = next(p.parent.parent for p in jobs.glob("*/run/summary.json"))
    path = job / "run" / "summary.json"
    summary = json.loads(path.read_text())
    summary["final_eval_loss"] -= 0.5
    path.write_text(json.dumps(summary, indent=1))
    rc, v = check(tmp_path)
    assert rc == 1
    assert any("edited numbers" in r for r in v["alice", "01_baseline", job.name].reasons)


def test_a_foreign_log_in_a_students_own_job_folder_is_flagged(course_run: Path, tmp_path: Path) -> None:
    """A student keeps a job.json of step 03 but puts an earlier job's log and results in it, renamed
    to the job's number: the record's submission time and the digest give it away."""
    job = next(p.parent for p in hand_in(tmp_path, "alice", "03_sharding_strategies", course_run).glob("*/job.json"))
    own_id = json.loads((job / "job.json").read_text())["job_id"]
    donor = next(p.parent for p in (course_run / "01_baseline" / "jobs").glob("*/run/digest.json")).parent
    donor_id = json.loads((donor / "job.json").read_text())["job_id"]
    for old in job.glob("slurm-*.out"):
        old.unlink()
    text = (donor / f"slurm-{donor_id}.out").read_text()
    (job / f"slurm-{own_id}.out").write_text(text.replace(f"[job] id {donor_id.removeprefix('local-')} ",
                                                         f"[job] id {own_id.removeprefix('local-')} "))
    shutil.rmtree(job / "run", ignore_errors=True)
    shutil.copytree(donor / "run", job / "run")
    rc, v = check(tmp_path)
    reasons = v["alice", "03_sharding_strategies", job.name].reasons
    assert rc == 1 and any("before this job was submitted" in r for r in reasons), reasons
