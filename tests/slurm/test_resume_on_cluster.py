"""Nothing lost on a real Slurm: a job warned of its time limit saves a checkpoint and ends at once
with exit 75 (CHECKPOINTED; sacct: FAILED 75:0), freeing its GPUs long before the limit; its
`--resume` submission continues in the same folder and ends COMPLETED.

The warning is sent with `scancel --batch --signal=USR1` (exactly what `--signal=B:USR1@LEAD`
delivers: USR1 to the batch shell only) once training is under way, rather than by a lead that
would also stop the resumed job.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from workshop.slurm.profiles import PROFILES_DIR
from workshop.slurm import JobState, submit

pytestmark = pytest.mark.slurm

# 2 processes, FULL_SHARD: 6 steps an epoch over the ci profile's 24 examples, 8 epochs = 48 steps
RUN = {"epochs": 8, "eval_generate": False}


def test_a_stopped_job_frees_its_gpus_at_once_and_resume_completes(cluster, tmp_path) -> None:
    ci_profile = PROFILES_DIR / "ci.toml"
    jobs_dir = cluster.shared / f"resume-{os.getpid()}-{int(time.time())}"
    jobs_dir.mkdir(mode=0o1777)
    t0 = time.monotonic()
    job = submit("multi_gpu", profile=ci_profile, overrides=RUN, jobs_dir=jobs_dir)
    assert "--time=00:10:00" in job.script
    deadline = time.monotonic() + 300
    while job.state() is JobState.PENDING:                # an earlier test's jobs may still be ending
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.5)
    deadline = time.monotonic() + 300
    while "[workshop] step 6/" not in job.tail(200):
        assert time.monotonic() < deadline and not job.state().finished, job.tail(40)
        time.sleep(0.5)
    t_signal = time.monotonic()
    cluster.run("scancel", "--batch", "--signal=USR1", job.job_id)
    state = job.wait(timeout=150, poll=1.0)
    first_s, stop_s = time.monotonic() - t0, time.monotonic() - t_signal
    log = job.tail(400)
    assert state is JobState.CHECKPOINTED, log
    record = cluster.job_record(job.job_id)
    assert (record["State"], record["ExitCode"]) == ("FAILED", "75:0"), record
    assert job.record.exit_code == 75 and "resume" in job.reason
    assert "[job] USR1 at" in log and "[job] stopped at a checkpoint" in log
    info = json.loads(next(x for x in log.splitlines() if x.startswith("WORKSHOP_CHECKPOINT ")).split(" ", 1)[1])
    step = info["step"]
    # ended at once, not at the 10-minute limit (Slurm's FAILED 75:0 above, not TIMEOUT): measured in steps,
    # not seconds, the run stopped at the end of the step it was in when the signal came. The batch shell writes
    # its USR1 line straight to the log; rank 0's step lines come through torchrun's pipe and can arrive after
    # it, so the log may show one step fewer than had begun (a clean-clone CI run: signalled at "6", stopped at 8
    # with steps of ~0.4 s)
    before = log.split("[job] USR1 at", 1)[0]
    signalled_at = max(int(m) for m in re.findall(r"^\[workshop\] step (\d+)/", before, flags=re.M))
    assert signalled_at <= step <= signalled_at + 2, (signalled_at, step)
    assert 6 <= step < 48 and (job.checkpoint_dir / f"checkpoint-{step}" / "trainer_state.json").is_file()
    assert not any(job.run_dir.glob("checkpoint-*"))       # in the profile's scratch, out of the student's folder
    assert job.summary() is None

    t1 = time.monotonic()
    again = submit("multi_gpu", profile=ci_profile, overrides=RUN, jobs_dir=jobs_dir, resume=True)
    assert again.job_dir == job.job_dir and again.job_id != job.job_id
    assert [h["job_id"] for h in again.record.history] == [job.job_id]
    state = again.wait(timeout=120, poll=1.0)
    second_s = time.monotonic() - t1
    assert state is JobState.COMPLETED, again.tail(60)
    summary = again.summary()
    assert summary["steps"] == 48 and summary["resumed_from_step"] == step
    assert len(summary["eval_losses"]) == 8               # one a epoch, across both jobs
    print(f"\nCHECKPOINTED job {job.job_id}: stopped at step {step}/48, ended {stop_s:.0f} s after USR1 "
          f"({first_s:.0f} s in all); "
          f"resume job {again.job_id}: COMPLETED after {second_s:.0f} s")
