"""A rank that hangs ends its job: the other ranks' collective times out, the job fails well within its
time limit, and `workshop diagnose` names the hung collective and the rank that never joined it.

Real processes throughout: a 2-rank training job of the local backend (the batch script Slurm would run,
torchrun, gloo), one of whose ranks is stopped with SIGSTOP, as a rank stuck in a driver call, a dead
NFS mount or a debugger looks to the others."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from workshop.results.diagnose import diagnose
from workshop.slurm import JobState, submit
from workshop.slurm.profiles import load_profile, time_seconds

pytestmark = pytest.mark.slow

TIMEOUT_S = 10


def job_processes(job: Any) -> dict[int, int]:
    """{rank: pid} of the training processes of a local job: the processes whose stop file (which the batch
    script exports, in the job's own folder) is this job's."""
    marker = f"WORKSHOP_STOP_FILE={job.job_dir.resolve()}/.usr1-{job.job_id.removeprefix('local-')}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in env and b"workshop.training.train" in cmdline:
            ranks = [v for v in env if v.startswith(b"RANK=")]
            if ranks:
                found[int(ranks[0].split(b"=")[1])] = int(entry.name)
    return found


def test_a_stopped_rank_fails_the_job_with_a_diagnosis_well_within_its_limit(tmp_path: Path) -> None:
    limit_s = time_seconds(load_profile("local").time_for("strategies"))
    job = submit("strategies", profile="local", jobs_dir=tmp_path / "jobs",
                 overrides={"procs_per_node": 2, "sharding": "full_shard", "epochs": 40,
                            "collective_timeout_s": TIMEOUT_S})
    deadline = time.monotonic() + 240
    while "[workshop] step 2/" not in (job.log_path.read_text() if job.log_path.is_file() else ""):
        assert job.state() in (JobState.PENDING, JobState.RUNNING), job.tail(40)
        assert time.monotonic() < deadline, job.tail(40)
        time.sleep(0.2)
    ranks = job_processes(job)
    assert sorted(ranks) == [0, 1], ranks
    os.kill(ranks[1], signal.SIGSTOP)            # rank 1 hangs: it never reaches its next collective
    stopped = time.monotonic()
    try:
        state = job.wait(timeout=180, poll=0.5)
    finally:
        try:
            os.kill(ranks[1], signal.SIGKILL)
        except ProcessLookupError:
            pass
    ended_after = time.monotonic() - stopped
    assert state is JobState.FAILED, job.tail(60)
    print(f"rank 1 stopped: the job failed {ended_after:.0f} s later (collective timeout {TIMEOUT_S} s, "
          f"time limit {limit_s} s)")
    assert ended_after < limit_s / 10
    findings = diagnose(job.log_path)
    first = findings[0]
    assert first.kind == "collective_timeout", [f.render() for f in findings]
    assert f"after {TIMEOUT_S} s" in first.title and "rank 1" in first.title, first.render()
    assert first.facts["waiting_ranks"] == [0] and first.facts["silent_ranks"] == [1], first.facts
