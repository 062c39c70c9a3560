"""Fixtures for tests that need a real (local, throwaway) Slurm cluster.

`slurm_cluster` runs ``tests/slurm/cluster.sh up`` once per session: two nodes n1, n2 on
127.0.0.1 with 2 fake GPUs each, partition ``debug``, accounting through slurmdbd (``sacct -P``).
The cluster is left running afterwards (the next session's ``up`` is then a ~0.1 s no-op) unless
WORKSHOP_SLURM_TEARDOWN=1. WORKSHOP_SLURM_DIR moves its state directory (default
/tmp/workshop-slurm).

Tests are skipped only when we are not root *and* Slurm is not installed; as root the cluster
must come up or the fixture fails with the script's output.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from tests.slurm.student_env import ROOT as STUDENT_ROOT, StudentView, make_view

CLUSTER_SH = Path(__file__).resolve().parent / "cluster.sh"
NODES = ["n1", "n2"]
TERMINAL_STATES = (
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL",
    "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED",
)
# set by a test for the pytest it starts inside its own session on the cluster (which holds the session lock)
NESTED_SESSION = "WORKSHOP_SLURM_SESSION_NESTED"
# A site setup line (a profile's [env] setup) after which a job's launch line trains nothing: `python` and
# `torchrun` (a one-node job of several processes, or each node's under srun: exported) are a 3 s wait. For
# tests whose promise is the job's life in Slurm and its own log lines ([job] start and end, the queue, a cap,
# overlap), not its training: each BLOOM import it spares is ~4 CPU-s (issue 51).
NO_TRAINING_SETUP = "python() { sleep 3; }; torchrun() { sleep 3; }; export -f python torchrun"
# Variables sbatch/srun/salloc read as options; a caller running inside a Slurm job (or a
# notebook under Open OnDemand) would otherwise leak them into every submission.
_SCRUB_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SACCT_", "SINFO_")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slurm: needs the local two-node Slurm cluster from tests/slurm/cluster.sh"
    )


@dataclass
class SlurmCluster:
    env: dict[str, str]
    nodes: list[str] = field(default_factory=lambda: list(NODES))

    @property
    def shared(self) -> Path:
        """Directory (mode 1777) for job output, writable by root and `student`."""
        return Path(self.env["WORKSHOP_SLURM_SHARED"])

    @property
    def accounting(self) -> str:
        return self.env.get("WORKSHOP_SLURM_ACCOUNTING", "slurmdbd")

    def run(self, *cmd: str, user: str | None = None, check: bool = True,
            timeout: float = 30) -> subprocess.CompletedProcess:
        """Run a command with the cluster's environment (as `user` via runuser if given)."""
        argv = list(cmd)
        if user is not None:
            argv = [shutil.which("runuser") or "/usr/sbin/runuser", "-u", user, "--", *argv]
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{shlex.join(argv)} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    def sbatch(self, *args: str, user: str | None = None) -> str:
        """Submit with `sbatch --parsable`; return the job id."""
        out = self.run("sbatch", "--parsable", *args, user=user).stdout.strip()
        return out.split(";")[0]

    def job_record(self, jobid: str, fields: str = "JobID,User,State,ExitCode,NodeList,Elapsed,AllocTRES") -> dict[str, str]:
        """The job's accounting record (allocation line only), {} if not (yet) recorded."""
        if self.accounting == "filetxt":
            argv = ["sacct", "-c", "-n", "-P", "-j", jobid, "-o", fields]
        else:
            argv = ["sacct", "-X", "-n", "-P", "-j", jobid, "-o", fields]
        proc = self.run(*argv, check=False)
        for line in proc.stdout.splitlines():
            values = line.split("|")
            rec = dict(zip(fields.split(","), values))
            if rec.get("JobID", jobid) == jobid:
                if "User" in rec:  # jobcomp/filetxt writes "student(1001)"
                    rec["User"] = rec["User"].split("(")[0]
                return rec
        return {}

    def wait(self, jobid: str, timeout: float = 30) -> dict[str, str]:
        """Poll accounting until the job reaches a terminal state; return its record."""
        deadline = time.monotonic() + timeout
        rec: dict[str, str] = {}
        while time.monotonic() < deadline:
            rec = self.job_record(jobid)
            if rec.get("State", "").startswith(TERMINAL_STATES):
                return rec
            time.sleep(0.2)
        raise AssertionError(f"job {jobid} not finished after {timeout}s; last record {rec}")

    def wait_running(self, jobid: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.run("squeue", "-h", "-j", jobid, "-o", "%T", check=False).stdout.strip()
            if state == "RUNNING":
                return
            time.sleep(0.2)
        raise AssertionError(f"job {jobid} not RUNNING after {timeout}s (state {state!r})")


def query_slots(calls: list[tuple[float, str]]) -> list[float]:
    """When a poller asked Slurm, one time a query: of (time, command) pairs, the sacct and squeue calls, a squeue
    right after a sacct (< 2 s) counted with it. workshop.slurm.slurm_backend asks, for a job sacct calls PENDING,
    squeue's reason for the wait (%r) in the same poll slot; a squeue alone (accounting did not answer) is a query
    of its own."""
    asked = [(t, cmd) for t, cmd in calls if cmd in ("sacct", "squeue")]
    return [t for i, (t, cmd) in enumerate(asked)
            if not (cmd == "squeue" and i and asked[i - 1][1] == "sacct" and t - asked[i - 1][0] < 2)]


def _slurm_installed() -> bool:
    return all(
        shutil.which(p) or os.path.exists(f"/usr/sbin/{p}") for p in ("sbatch", "slurmctld", "slurmd")
    )


def _script(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(CLUSTER_SH), *args], capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _empty_the_queue(cluster: SlurmCluster, timeout: float = 120) -> None:
    """Cancel every job still queued or running, and wait until both nodes are idle."""
    left = cluster.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
    if left:
        print(f"slurm_cluster: cancelling {len(left)} job(s) left by an earlier session: {' '.join(left)}")
        cluster.run("scancel", *left, check=False)
    deadline = time.monotonic() + timeout
    while True:
        states = cluster.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N %t", check=False).stdout.split()[1::2]
        busy = cluster.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
        if not busy and states and all(s == "idle" for s in states):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the test cluster is not empty after {timeout:.0f} s: jobs {busy}, node states {states}")
        time.sleep(0.5)


@pytest.fixture(scope="session")
def slurm_cluster():
    if os.geteuid() != 0 and not _slurm_installed():
        pytest.skip("Slurm is not installed and we are not root: cannot run tests/slurm/cluster.sh up "
                    "(run the tests as root, or install slurmctld slurmd slurm-client munge)")
    try:
        up = _script("up", timeout=900)  # a cold start installs packages
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"cluster.sh up timed out after {exc.timeout}s\n{exc.stderr or ''}", pytrace=False)
    if up.returncode != 0:
        pytest.fail(
            f"cluster.sh up failed (exit {up.returncode})\nstdout:\n{up.stdout}\nstderr:\n{up.stderr}",
            pytrace=False,
        )
    env_out = _script("env", timeout=30)
    assert env_out.returncode == 0, env_out.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB_PREFIXES)}
    for line in env_out.stdout.splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    if "/usr/sbin" not in env.get("PATH", "").split(":"):
        env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
    cluster = SlurmCluster(env=env)
    # One test session at a time on the cluster, and it starts empty: the tests count free slots and GPUs.
    # (A developer's clean-clone run and CI once ran on one machine and one cluster: each took the other's
    # slots and GPUs, and five tests failed. A session killed mid-way leaves jobs behind too.)
    lock = open(Path(env["WORKSHOP_SLURM_DIR"]) / ".session.lock", "w")
    # a session started by a test of a session that holds the lock (test_closed_clone) shares its turn, and leaves
    # the cluster to it
    nested = os.environ.get(NESTED_SESSION) == "1"
    if not nested:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _empty_the_queue(cluster)
    yield cluster
    lock.close()
    if os.environ.get("WORKSHOP_SLURM_TEARDOWN") == "1" and not nested:
        _script("down", timeout=120)


@pytest.fixture(scope="session")
def student_view(slurm_cluster: SlurmCluster) -> Iterator[StudentView]:
    """The code under test where the user `student` can read it (tests/slurm/student_env.py): the checkout
    itself, or links to it in the cluster's shared folder when the checkout lives in a folder closed to others."""
    try:
        view = make_view(slurm_cluster.shared)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    if view.made is not None:
        print(f"student_view: {STUDENT_ROOT} or its venv is closed to student; it reads links to the "
              f"code under test in {view.made}")
    yield view
    if view.made is not None:
        shutil.rmtree(view.made, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(slurm_cluster):
    """The cluster, this process pointed at it (SLURM_CONF...), and a poller fast enough for tests."""
    from workshop.slurm import slurm_backend

    saved = {k: os.environ.get(k) for k in slurm_cluster.env}
    os.environ.update(slurm_cluster.env)
    old = slurm_backend.MIN_POLL_INTERVAL
    slurm_backend.MIN_POLL_INTERVAL = 0.5
    yield slurm_cluster
    slurm_backend.MIN_POLL_INTERVAL = old
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
