"""Races and disks: two kernels submitting the same cell at once get one job; a jobs folder that
cannot take a job's log is reported, with the folder and the fix, before anything is submitted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.waiting import until

from workshop.slurm import Job, submit
from workshop.slurm.jobs import JobsDirError

TINY = {"train_size": 8, "eval_size": 4, "epochs": 1, "eval_generate": False}

# One "kernel": import everything first, then wait for the start line, so both submit together.
KERNEL = """
import json, os, sys, time
from workshop.slurm import submit
go = sys.argv[2]
open(go + f".ready-{os.getpid()}", "w").close()     # imported: on the start line
while not os.path.exists(go):
    time.sleep(0.001)
job = submit("baseline", profile="local", overrides=json.loads(sys.argv[3]), jobs_dir=sys.argv[1])
print(job.job_id, job.job_dir, flush=True)
"""


def test_two_kernels_submitting_at_once_get_one_job(tmp_path: Path) -> None:
    import json

    jobs = tmp_path / "jobs"
    go = tmp_path / "go"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "WORKSHOP_"))}
    kernels = [subprocess.Popen([sys.executable, "-c", KERNEL, str(jobs), str(go), json.dumps(TINY)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for _ in range(2)]
    # both have imported workshop and are spinning on the start line (however long a busy machine takes)
    until(lambda: len(list(tmp_path.glob("go.ready-*"))) == 2, "both kernels to import workshop", timeout=300)
    go.write_text("go\n")
    outs = [k.communicate(timeout=60) for k in kernels]
    assert all(k.returncode == 0 for k in kernels), outs
    answers = {o.strip() for o, _ in outs}
    assert len(answers) == 1, answers                       # the same job id and folder for both
    assert len(list(jobs.glob("*/job.json"))) == 1
    assert (jobs / ".local-ids").read_text().strip() == "1"  # the backend was asked once
    job = Job.load(answers.pop().split()[1])
    job.cancel()


def _mount_tmpfs(path: Path, options: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 1 MB filesystem, filled to the last block."""
    path = tmp_path / "disk"
    _mount_tmpfs(path, "size=1m")
    try:
        with open(path / "filler", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def read_only_disk(tmp_path: Path):
    path = tmp_path / "ro"
    _mount_tmpfs(path, "ro,size=64k")
    yield path
    subprocess.run(["umount", "-l", str(path)], check=False)


def _assert_refused(jobs_dir: Path, words: str) -> None:
    with pytest.raises(JobsDirError) as e:
        submit("baseline", profile="local", overrides=TINY, jobs_dir=jobs_dir)
    msg = str(e.value)
    assert words in msg and str(jobs_dir.parent) in msg and "nothing was submitted" in msg, msg
    assert "Fix:" in msg and "--jobs-dir" in msg


def test_a_full_disk_is_refused_before_submitting(small_disk: Path) -> None:
    _assert_refused(small_disk / "jobs", "full disk")


def test_a_read_only_folder_is_refused_before_submitting(read_only_disk: Path) -> None:
    _assert_refused(read_only_disk / "jobs", "read-only")
    assert not (read_only_disk / "jobs").exists()


def test_a_folder_that_is_not_yours_is_refused(tmp_path: Path) -> None:
    """As `student`, a root-owned 0555 folder (run through runuser: root may write anywhere)."""
    if os.geteuid() != 0 or subprocess.run(["id", "student"], capture_output=True).returncode != 0:
        pytest.skip("needs root and the cluster's `student` user")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    locked.chmod(0o555)
    for parent in (tmp_path, *tmp_path.parents):          # let student reach it (pytest's tmp is 0700)
        if parent == Path("/"):
            break
        parent.chmod(parent.stat().st_mode | 0o011)
    code = ("import sys; from workshop.slurm.jobs import check_writable; from pathlib import Path\n"
            "try:\n    check_writable(Path(sys.argv[1]))\nexcept OSError as e:\n    print(e); sys.exit(3)\n")
    proc = subprocess.run(["runuser", "-u", "student", "--", "/usr/bin/python3", "-c", code, str(locked / "jobs")],
                          capture_output=True, text=True, cwd="/", env={"PATH": os.environ["PATH"],
                                                                       "PYTHONPATH": str(Path(__file__).parents[1])})
    if proc.returncode not in (0, 3):
        pytest.skip(f"student cannot run this interpreter: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 3 and "is not writable by you" in proc.stdout and str(locked) in proc.stdout, proc
