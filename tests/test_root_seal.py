"""workshop verify's reading of the root seal (workshop.results.root_seal), without a cluster: a folder the Epilog's
way (root, 0755; files 0644, sha256sum's format) against a job folder edited in each way a student can. The
Epilog itself, on the test cluster: tests/slurm/test_root_seal_on_cluster.py."""

from __future__ import annotations

import hashlib
import os
import pwd
from pathlib import Path

import pytest

from workshop.results.root_seal import read_seal, root_seal_problems

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a seal is root's: making one needs root")

JOB = "4242"


def sealed(tmp_path: Path) -> tuple[Path, Path]:
    """(a job folder, the seal folder that recorded it), as the Epilog leaves them."""
    job = tmp_path / "job"
    (job / "run").mkdir(parents=True)
    (job / f"slurm-{JOB}.out").write_text("[job] id 4242\nWORKSHOP_SUMMARY {}\n")
    (job / "run" / "summary.json").write_text('{"final_eval_loss": 2.5}\n')
    seal_dir = tmp_path / "seal"
    seal_dir.mkdir(mode=0o755)
    seal_dir.chmod(0o755)
    names = (f"slurm-{JOB}.out", "run/summary.json")
    lines = [f"{hashlib.sha256((job / n).read_bytes()).hexdigest()}  {n}" for n in names]
    (seal_dir / f"{JOB}.sha256").write_text("\n".join(lines) + "\n")
    (seal_dir / f"{JOB}.sha256").chmod(0o644)
    return job, seal_dir


def test_an_untouched_job_holds_its_seal(tmp_path: Path) -> None:
    job, seal_dir = sealed(tmp_path)
    assert sorted(read_seal(seal_dir / f"{JOB}.sha256")) == ["run/summary.json", f"slurm-{JOB}.out"]
    assert root_seal_problems(job, JOB, seal_dir) == []


def test_each_edit_after_the_job_is_named(tmp_path: Path) -> None:
    job, seal_dir = sealed(tmp_path)
    log = job / f"slurm-{JOB}.out"
    log.write_text(log.read_text() + "one line more\n")
    (job / "run" / "summary.json").unlink()
    problems = root_seal_problems(job, JOB, seal_dir)
    assert [p.split(":")[0] for p in problems] == [
        "run/summary.json is missing", f"slurm-{JOB}.out was edited after job {JOB} ended"], problems


def test_a_job_without_a_seal_or_with_a_seal_students_could_write_is_flagged(tmp_path: Path) -> None:
    job, seal_dir = sealed(tmp_path)
    assert root_seal_problems(job, "4243", seal_dir)[0].startswith(f"no root seal of job 4243 in {seal_dir}")
    (seal_dir / f"{JOB}.sha256").chmod(0o666)
    assert "not root's alone (uid 0, mode 666)" in root_seal_problems(job, JOB, seal_dir)[0]
    (seal_dir / f"{JOB}.sha256").chmod(0o644)
    student = pwd.getpwnam("nobody").pw_uid
    os.chown(seal_dir, student, -1)
    assert f"not root's alone (uid {student}, mode 755)" in root_seal_problems(job, JOB, seal_dir)[0]
