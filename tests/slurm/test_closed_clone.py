"""Issue 55: the suite does not depend on where the checkout lives. A newcomer clones as root into a folder
other users cannot enter (`mktemp -d`, `/root`: mode 0700); the Slurm part's first student-side test, run from
that clone, passes: what the user `student` runs is given to it where it can read it (tests/slurm/student_env.py).
Before, `student`'s job failed with `No module named 'workshop'` after 20 minutes of suite. Where the files
themselves are closed (a clone made under umask 077), the test stops within seconds and names the fix."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.slurm.conftest import NESTED_SESSION
from tests.slurm.student_env import ROOT, can_read

pytestmark = pytest.mark.slurm
FIRST_STUDENT_TEST = "tests/slurm/test_jobs_on_cluster.py::test_student_submits_from_the_command_line"


def closed_clone() -> Path:
    """This checkout's files (what a clone of it holds, and what is not committed yet) in a new folder of mode
    0700, as `mktemp -d` makes it, with the test venv as its `.venv`."""
    closed = Path(tempfile.mkdtemp(prefix="workshop-closed-"))
    clone = closed / "fsdp-workshop"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_symlink():                    # workshop/slurm/files -> ../../slurm, as a clone has it
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            (clone / name).symlink_to(os.readlink(src))
        elif src.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, clone / name)
    (clone / ".venv").symlink_to(Path(sys.prefix))
    return clone


def test_a_clone_in_a_folder_closed_to_others_runs_the_student_side_tests(slurm_cluster, tmp_path) -> None:
    if os.geteuid() != 0:
        pytest.skip("running jobs as the user `student` needs root")
    clone = closed_clone()
    try:
        assert oct(clone.parent.stat().st_mode & 0o777) == "0o700"
        assert not can_read(clone / "workshop" / "__init__.py")       # the newcomer's case, as made
        # the same cluster (WORKSHOP_SLURM_DIR stays); not this session's part, tier or profile file
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKSHOP_TEST_", "PYTEST_"))}
        env[NESTED_SESSION] = "1"     # this session holds the cluster's turn; the inner one shares it
        inner = [str(clone / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s",
                 f"--basetemp={tmp_path / 'inner'}", FIRST_STUDENT_TEST]
        started = time.monotonic()
        proc = subprocess.run(inner, cwd=clone, env=env, capture_output=True, text=True, timeout=600)
        took = time.monotonic() - started
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0 and "1 passed" in out, out[-4000:]
        # the inner session tested the clone's own code, through links `student` can read
        assert f"student_view: {clone} or its venv is closed to student" in out, out[-4000:]

        # files closed to others too (a clone made under umask 077): the test stops at once and names the fix
        (clone / "workshop" / "__init__.py").chmod(0o600)
        started = time.monotonic()
        closed = subprocess.run(inner, cwd=clone, env=env, capture_output=True, text=True, timeout=600)
        out = closed.stdout + closed.stderr
        print(f"closed clone: the student-side test passed in {took:.0f} s; with its files closed it stopped after "
              f"{time.monotonic() - started:.0f} s")
        assert closed.returncode == 1 and time.monotonic() - started < 60, out[-4000:]
        assert f"{clone / 'workshop' / '__init__.py'} is not readable by other users (mode 0600" in out, out[-4000:]
        assert f"Fix: `chmod -R o+rX {clone}" in out, out[-4000:]
    finally:
        shutil.rmtree(clone.parent, ignore_errors=True)
