"""Nothing faked: `workshop verify` passes the jobs students really ran and flags each forgery with
its reason, against the test cluster's real accounting (slurmdbd) and the jobs' own keyed digests.

Two genuine jobs: alice's, run as root through the Python API, and bob's, run as the Unix user
`student` through the CLI. Forgeries are built from copies of them, as a student would.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.slurm.student_env import student_venv
from workshop.results import verify
from workshop.slurm.profiles import PROFILES_DIR
from workshop.slurm import JobState, submit

pytestmark = pytest.mark.slurm

KEY = "per-site-secret-of-the-test-cluster"
TINY = {"train_size": 8, "eval_size": 4, "epochs": 1, "eval_generate": False, "batch_size": 4}
USERS = "student,unix_user\nalice,root\nbob,student\n"


@pytest.fixture(scope="module")
def genuine(cluster, student_view) -> dict[str, Path]:
    """{"alice": her job folder (ran as root), "bob": his (ran as student)}, both COMPLETED."""
    base = cluster.shared / f"verify-{os.getpid()}-{int(time.time())}"
    base.mkdir(mode=0o1777)
    base.chmod(0o1777)
    profile = base / "ci-keyed.toml"     # the key in a profile is for the test only (see workshop/results/verify.py)
    profile.write_text((PROFILES_DIR / "ci.toml").read_text().replace(
        'GLOO_SOCKET_IFNAME = "lo"', f'GLOO_SOCKET_IFNAME = "lo"\nWORKSHOP_DIGEST_KEY = "{KEY}"'))
    alice = submit("baseline", profile=profile, overrides=TINY, jobs_dir=base / "alice")
    assert alice.wait(timeout=180, poll=0.5) is JobState.COMPLETED, alice.tail(40)

    student = student_venv(student_view, base / "student-venv",     # as in test_jobs_on_cluster
                           lambda *cmd: cluster.run(*cmd, user="student", timeout=60))
    sets = [arg for k, v in TINY.items() for arg in ("--set", f"{k}={v}")]
    proc = cluster.run(str(student), "submit", "baseline", "--profile", str(profile), *sets,
                       "--jobs-dir", str(base / "bob"), "--wait", user="student", timeout=300)
    bob = Path(proc.stdout.splitlines()[0].split(" ", 1)[1])
    yield {"alice": alice.job_dir, "bob": bob}
    shutil.rmtree(base, ignore_errors=True)


def hand_in(subs: Path, student: str, assignment: str, job_dir: Path) -> Path:
    """Copy a job folder into a submission, as nbgrader collects it."""
    dest = subs / student / assignment / "jobs" / job_dir.name
    shutil.copytree(job_dir, dest, ignore=shutil.ignore_patterns(".submit.lock"))
    return dest


def run_verify(subs: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict]:
    monkeypatch.setenv(verify.KEY_ENV, KEY)
    users = subs / "users.csv"
    users.write_text(USERS)
    t0 = time.monotonic()
    rc = verify.main([str(subs), "--user-map", str(users)])
    out = capsys.readouterr().out
    print(f"{out}\n(verify took {time.monotonic() - t0:.2f} s)")
    verdicts = verify.verify(subs, verify.read_user_map(str(users)), KEY)
    return rc, {(v.student, v.assignment): v for v in verdicts}


def _log(job: Path) -> Path:
    return next(job.glob("slurm-*.out"))


def test_genuine_submissions_pass(genuine, tmp_path, capsys, monkeypatch) -> None:
    hand_in(tmp_path, "alice", "a1", genuine["alice"])
    hand_in(tmp_path, "bob", "a1", genuine["bob"])
    rc, v = run_verify(tmp_path, capsys, monkeypatch)
    assert rc == 0, {k: x.reasons for k, x in v.items()}
    assert all(x.ok and x.digest for x in v.values())


def test_edited_numbers_are_flagged(genuine, tmp_path, capsys, monkeypatch) -> None:
    job = hand_in(tmp_path, "alice", "a1", genuine["alice"])
    summary_path = job / "run" / "summary.json"
    summary = json.loads(summary_path.read_text())
    better = dict(summary, final_eval_loss=summary["final_eval_loss"] - 0.5)
    summary_path.write_text(json.dumps(better, indent=1))
    log = _log(job)
    log.write_text(log.read_text().replace("WORKSHOP_SUMMARY " + json.dumps(summary), "WORKSHOP_SUMMARY " + json.dumps(better)))
    # and a forger who re-seals by hand, without the site's key
    job2 = hand_in(tmp_path, "bob", "a1", genuine["bob"])
    s2 = json.loads((job2 / "run" / "summary.json").read_text())
    s2["final_eval_loss"] -= 0.5
    (job2 / "run" / "summary.json").write_text(json.dumps(s2))
    forged = verify.digest(json.loads((job2 / "run" / "digest.json").read_text())["job_id"], s2,
                           verify.read_metrics(job2 / "run" / "metrics.jsonl"))
    (job2 / "run" / "digest.json").write_text(json.dumps(forged))
    rc, v = run_verify(tmp_path, capsys, monkeypatch)
    assert rc == 1
    assert any("edited numbers" in r and "digest" in r for r in v["alice", "a1"].reasons)
    assert any("unkeyed digest" in r for r in v["bob", "a1"].reasons)


def test_another_students_log_is_flagged(genuine, tmp_path, capsys, monkeypatch) -> None:
    hand_in(tmp_path, "bob", "a1", genuine["alice"])
    rc, v = run_verify(tmp_path, capsys, monkeypatch)
    assert rc == 1
    assert any("ran as 'root', not as 'student'" in r for r in v["bob", "a1"].reasons)


def test_a_job_id_that_never_ran_is_flagged(genuine, tmp_path, capsys, monkeypatch) -> None:
    job = hand_in(tmp_path, "alice", "a1", genuine["alice"])
    old = json.loads((job / "job.json").read_text())["job_id"]
    fake = "987654"
    record = json.loads((job / "job.json").read_text())
    (job / "job.json").write_text(json.dumps(dict(record, job_id=fake)))
    _log(job).rename(job / f"slurm-{fake}.out")
    log = job / f"slurm-{fake}.out"
    log.write_text(log.read_text().replace(f"[job] id {old} ", f"[job] id {fake} "))
    rc, v = run_verify(tmp_path, capsys, monkeypatch)
    assert rc == 1
    assert any("never ran" in r for r in v["alice", "a1"].reasons)


def test_the_same_log_in_two_submissions_is_flagged(genuine, tmp_path, capsys, monkeypatch) -> None:
    hand_in(tmp_path, "alice", "a1", genuine["alice"])
    hand_in(tmp_path, "alice", "a2", genuine["alice"])      # one run handed in for two assignments
    rc, v = run_verify(tmp_path, capsys, monkeypatch)
    assert rc == 1
    assert any("also in alice/a2" in r for r in v["alice", "a1"].reasons)
    assert any("also in alice/a1" in r for r in v["alice", "a2"].reasons)


def test_a_log_whose_times_are_not_the_job_s_is_flagged(genuine, tmp_path, capsys, monkeypatch) -> None:
    job = hand_in(tmp_path, "alice", "a1", genuine["alice"])
    log = _log(job)
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join("[job] end 2020-01-01T00:00:00+00:00\n" if x.startswith("[job] end ") else x for x in lines))
    rc, v = run_verify(tmp_path, capsys, monkeypatch)
    assert rc == 1
    assert any("Slurm ended the job at" in r for r in v["alice", "a1"].reasons)


def test_the_instructors_job_in_every_submission_passes(genuine, tmp_path, capsys, monkeypatch) -> None:
    """Instructor-run mode: alice's job folder (run as root) stands for the instructor's, in the site profile's
    [course] instructor_jobs folder. bob (Unix user student) and carol hand it in, as collect copies it: it
    ran as root, who owns the instructor's folder, so it is neither another user's log nor one log handed in
    twice. The profile comes from WORKSHOP_PROFILE, as the course kernel sets it."""
    profile = tmp_path / "classroom.toml"
    profile.write_text((PROFILES_DIR / "ci.toml").read_text()
                       + f'\n[course]\ninstructor_jobs = "{genuine["alice"].parent}"\n')
    subs = tmp_path / "submitted"
    for student in ("bob", "carol"):
        hand_in(subs, student, "a1", genuine["alice"])
    monkeypatch.setenv("WORKSHOP_PROFILE", str(profile))
    rc, v = run_verify(subs, capsys, monkeypatch)
    assert rc == 0, {k: x.reasons for k, x in v.items()}
    assert all(x.instructor == genuine["alice"] and x.digest for x in v.values())
    # under another folder name it is no longer the instructor's job handed out, but a copy of it
    shutil.copytree(genuine["alice"], subs / "dave" / "a1" / "jobs" / "baseline-0123456789",
                    ignore=shutil.ignore_patterns(".submit.lock"))
    rc, v = run_verify(subs, capsys, monkeypatch)
    assert rc == 1 and v["bob", "a1"].ok and v["carol", "a1"].ok
    assert any("ran as 'root', not as 'dave'" in r for r in v["dave", "a1"].reasons)
    assert any("the results (digest) of the instructor's job" in r for r in v["dave", "a1"].reasons)


def test_forged_hosts_and_start_time_are_flagged_against_accounting(genuine, tmp_path, capsys, monkeypatch) -> None:
    """A forger who holds the site's key (the strongest case: the seal is valid) still cannot move a job to
    other nodes or other times: sacct's NodeList and Start say where and when it ran."""
    job = hand_in(tmp_path, "alice", "a1", genuine["alice"])
    summary_path = job / "run" / "summary.json"
    summary = json.loads(summary_path.read_text())
    moved = dict(summary, hosts=["gpu42"] * len(summary["hosts"]))
    summary_path.write_text(json.dumps(moved, indent=1))
    sealed = verify.digest(json.loads((job / "run" / "digest.json").read_text())["job_id"], moved,
                           verify.read_metrics(job / "run" / "metrics.jsonl"), KEY)
    (job / "run" / "digest.json").write_text(json.dumps(sealed))
    log = _log(job)
    lines = log.read_text().splitlines(keepends=True)
    forged = []
    for line in lines:
        if line.startswith("WORKSHOP_SUMMARY "):
            line = "WORKSHOP_SUMMARY " + json.dumps(moved) + "\n"
        elif line.startswith("WORKSHOP_DIGEST "):
            line = "WORKSHOP_DIGEST " + json.dumps(sealed) + "\n"
        elif line.startswith("[job] start "):
            line = "[job] start 2020-01-01T00:00:00+00:00 on gpu42\n"
        forged.append(line)
    log.write_text("".join(forged))
    rc, v = run_verify(tmp_path, capsys, monkeypatch)
    nodes = sorted(set(summary["hosts"]))
    record = v["alice", "a1"]
    assert rc == 1
    assert record.reasons[0] == f"the log's hosts ['gpu42'] are not the job's nodes {nodes}", record.reasons
    assert record.reasons[1].startswith("the log starts at 2020-01-01T00:00:00+00:00, Slurm started the job at "), \
        record.reasons
    assert len(record.reasons) == 2, record.reasons                  # the seal holds: nothing else is wrong
