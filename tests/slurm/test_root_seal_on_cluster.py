"""The root seal (issue 48, item 5), nothing faked: the test cluster's Epilog (slurm/admin/seal-epilog.sh, set
up by tests/slurm/cluster.sh) records, as root, the SHA-256 of a job's log and results when the job ends, in
a folder the student cannot write; `workshop verify --seal-dir` flags a log the student edited after the job
ended, even when the student re-made the job's (unkeyed) digest so that every other check passes."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path

import pytest

from tests.slurm.student_env import student_venv
from tests.test_docs_commands import ROOT, fenced, sh
from workshop.results import verify
from workshop.results.root_seal import read_seal

pytestmark = pytest.mark.slurm

TINY = {"train_size": 8, "eval_size": 4, "epochs": 1, "eval_generate": False, "batch_size": 4}


@pytest.fixture(scope="module")
def sealed_job(cluster, student_view) -> tuple[Path, str, Path]:
    """(the job folder, its id, the seal folder) of a job the Unix user `student` ran with the CLI."""
    base = cluster.shared / f"seal-{os.getpid()}-{int(time.time())}"
    base.mkdir(mode=0o1777)
    base.chmod(0o1777)
    student = student_venv(student_view, base / "student-venv", lambda *cmd: cluster.run(*cmd, user="student"))
    sets = [arg for k, v in TINY.items() for arg in ("--set", f"{k}={v}")]
    proc = cluster.run(str(student), "submit", "baseline", "--profile", "ci", *sets, "--jobs-dir", str(base / "jobs"),
                       "--wait", user="student", timeout=300)
    job = Path(proc.stdout.splitlines()[0].split(" ", 1)[1])
    job_id = str(json.loads((job / "job.json").read_text())["job_id"])
    seal_dir = Path(cluster.env["WORKSHOP_SLURM_SEAL"])
    deadline = time.monotonic() + 60                       # the Epilog runs once the job's steps have ended
    while not (seal_dir / f"{job_id}.sha256").is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    yield job, job_id, seal_dir
    shutil.rmtree(base, ignore_errors=True)


def run_verify(subs: Path, *args: str) -> tuple[int, verify.Verdict]:
    rc = verify.main([str(subs), *args])
    (verdict,) = verify.verify(subs, seal_dir=Path(args[1]) if args else None)
    return rc, verdict


def test_the_epilog_seals_the_job_where_the_student_cannot_write(cluster, sealed_job) -> None:
    job, job_id, seal_dir = sealed_job
    seal = seal_dir / f"{job_id}.sha256"
    assert seal.is_file(), f"the Epilog wrote no {seal}: {sorted(p.name for p in seal_dir.iterdir())[-5:]}"
    for path, mode in ((seal_dir, 0o755), (seal, 0o644)):
        st = path.stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, mode), path
    assert sorted(read_seal(seal)) == ["run/digest.json", "run/metrics.jsonl", "run/summary.json", f"slurm-{job_id}.out"]
    for attempt in (f"echo forged >> {seal}", f"rm -f {seal}", f"echo x > {seal_dir}/{int(job_id) + 1}.sha256"):
        assert cluster.run("sh", "-c", attempt, user="student", check=False).returncode != 0, attempt
    assert seal.is_file()


def test_a_log_edited_after_its_job_is_flagged_through_the_root_seal(cluster, sealed_job, tmp_path,
                                                                    monkeypatch) -> None:
    job, job_id, seal_dir = sealed_job
    monkeypatch.delenv(verify.KEY_ENV, raising=False)
    monkeypatch.delenv("WORKSHOP_PROFILE", raising=False)
    subs = tmp_path / "submitted"
    copy = subs / "student" / "01_baseline" / "jobs" / job.name
    shutil.copytree(job, copy, ignore=shutil.ignore_patterns(".submit.lock"))
    rc, genuine = run_verify(subs, "--seal-dir", str(seal_dir))
    assert rc == 0 and genuine.ok, genuine.reasons
    # after the job: a better loss in summary.json and the log, and the unkeyed digest re-made to match
    run, log = copy / "run", copy / f"slurm-{job_id}.out"
    summary = json.loads((run / "summary.json").read_text())
    better = dict(summary, final_eval_loss=summary["final_eval_loss"] - 0.5)
    forged = verify.digest(job_id, better, verify.read_metrics(run / "metrics.jsonl"))
    (run / "summary.json").write_text(json.dumps(better, indent=1))
    (run / "digest.json").write_text(json.dumps(forged, indent=1) + "\n")
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(
        "WORKSHOP_SUMMARY " + json.dumps(better) + "\n" if x.startswith("WORKSHOP_SUMMARY ") else
        "WORKSHOP_DIGEST " + json.dumps(forged) + "\n" if x.startswith("WORKSHOP_DIGEST ") else x for x in lines))
    rc, unsealed = run_verify(subs)
    assert rc == 0 and unsealed.ok, unsealed.reasons          # without the root seal the forgery passes
    rc, flagged = run_verify(subs, "--seal-dir", str(seal_dir))
    assert rc == 1
    edited = [f"{name} was edited after job {job_id} ended"
              for name in ("run/digest.json", "run/summary.json", f"slurm-{job_id}.out")]
    assert [r.split(":")[0] for r in flagged.reasons] == edited, flagged.reasons
    # docs/instructor.md's line, as written, in the folder that holds submitted/
    (line,) = [ln for ln in fenced(ROOT / "docs" / "instructor.md", "## The root seal") if "--seal-dir" in ln]
    typed = sh(line.replace("<seal-dir>", str(seal_dir)), tmp_path, {"SLURM_CONF": cluster.env["SLURM_CONF"]})
    assert typed.returncode == 1 and all(e in typed.stdout for e in edited), typed.stdout
