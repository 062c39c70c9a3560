"""Instructor-run mode at grading time: every student hands in the job the instructor ran for the class
(a link in jobs/, or the copy `nbgrader collect` makes of it), and neither `workshop verify` nor the
integrity review calls that one run handed in twice; its seal is still checked, and the same job under
another folder name is still a copy. The instructor's folder here is the session's course run of
notebook 05 (real local-backend jobs, 2-node ones among them), named by a site profile's [course] table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from workshop.results import verify
from workshop.slurm.profiles import PROFILES_DIR

pytestmark = pytest.mark.slow
A = "05_multi_node"


@pytest.fixture
def classroom(course_run: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """(submitted/, the site profile, the instructor's 2-node job) with four students' 05 folders:
    alice kept the link her cell made, bob's was copied by collect, mallory edited her copy's numbers,
    dave handed the instructor's job in under another folder name."""
    shared = course_run / A / "jobs"
    job = next(p.parent.parent for p in sorted(shared.glob("multi_node-*/run/digest.json"))
               if json.loads((p.parent.parent / "config.json").read_text())["nodes"] == 2)
    profile = tmp_path / "classroom.toml"
    profile.write_text((PROFILES_DIR / "local.toml").read_text() + f'\n[course]\ninstructor_jobs = "{shared}"\n')
    subs = tmp_path / "course" / "submitted"
    for student in ("alice", "bob", "mallory", "dave"):
        (subs / student / A / "jobs").mkdir(parents=True)
    (subs / "alice" / A / "jobs" / job.name).symlink_to(job, target_is_directory=True)
    for student in ("bob", "mallory"):
        shutil.copytree(job, subs / student / A / "jobs" / job.name)
    summary = subs / "mallory" / A / "jobs" / job.name / "run" / "summary.json"
    summary.write_text(json.dumps(dict(json.loads(summary.read_text()), final_eval_loss=0.01)))
    shutil.copytree(job, subs / "dave" / A / "jobs" / "multi_node-0123456789")
    return subs, profile, job


def test_verify_passes_the_instructors_job_in_every_submission(classroom, monkeypatch, capsys) -> None:
    subs, profile, job = classroom
    monkeypatch.delenv("WORKSHOP_PROFILE", raising=False)
    # without the site profile the shared job looks like one log handed in by four students
    assert all(any("the same log" in r for r in v.reasons) for v in verify.verify(subs))
    rc = verify.main([str(subs), "--profile", str(profile)])
    out = capsys.readouterr().out
    v = {x.student: x for x in verify.verify(subs, profile=profile)}
    assert rc == 1, out                                                  # mallory and dave
    assert v["alice"].ok and v["bob"].ok, out
    assert v["alice"].instructor == v["bob"].instructor == job
    assert any("the instructor's job" in n for n in v["bob"].notes)
    assert v["mallory"].instructor == job and v["mallory"].reasons and all(
        "edited numbers" in r for r in v["mallory"].reasons)            # the seal, not the sharing
    assert v["dave"].instructor is None
    assert any(f"the results (digest) of the instructor's job {job}" in r for r in v["dave"].reasons)
    assert any("the same log" in r and "alice/05_multi_node" in r and "(the instructor's job)" in r
               for r in v["dave"].reasons), v["dave"].reasons


def test_the_review_calls_no_one_a_copier_for_the_instructors_job(classroom, monkeypatch) -> None:
    from nbgrader.api import Gradebook

    from workshop.grading.integrity import review_class

    subs, profile, job = classroom
    db = subs.parent / "gradebook.db"
    with Gradebook(f"sqlite:///{db}") as gb:
        gb.add_assignment(A)           # no notebooks: the review's job checks alone
    monkeypatch.delenv("WORKSHOP_PROFILE", raising=False)
    before = {r.student: r.reasons for r in review_class(subs.parent, db, [A])}
    assert all(any("one run handed in twice" in x for x in before[s]) for s in before), before
    monkeypatch.setenv("WORKSHOP_PROFILE", str(profile))      # the grader's site profile, as the kernel sets it
    after = {r.student: r.reasons for r in review_class(subs.parent, db, [A])}
    assert after["alice"] == after["bob"] == [], after
    assert after["mallory"] and all("edited numbers" in x for x in after["mallory"]), after["mallory"]
    assert len(after["dave"]) == 1 and "multi_node-0123456789" in after["dave"][0] and "one run handed in twice" in \
        after["dave"][0] and "alice" in after["dave"][0]
