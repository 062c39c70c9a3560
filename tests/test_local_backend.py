"""Without Slurm, the same batch script runs on this machine and the job API behaves the same:
states, logs, cancellation, no duplicates, and a record that survives a kernel restart."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.waiting import until

from workshop.training.config import ConfigError
from workshop.slurm import Job, JobState, local_backend, submit, watch
from workshop.slurm.cli import logs_main, status_main


def site(tmp_path: Path, name: str, extra: str = "") -> Path:
    """A local profile for tests; `extra` adds TOML tables."""
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
name = "{name}"
backend = "local"
[slurm.partitions.cpu]
cpus_per_proc = 1
[env]
python_env = "current"
{extra}
[run]
model = "tiny"
device = "cpu"
""")
    return path


def live_processes_in_group(pgid: int) -> list[str]:
    """Processes of a process group that still run (a zombie leader has ended: it only awaits reaping)."""
    rows = [line.split() for line in os.popen("ps -e -o pid=,pgid=,stat=,comm=").read().splitlines()]
    return [" ".join(r) for r in rows if len(r) >= 3 and r[1] == str(pgid) and not r[2].startswith("Z")]


def forget_children() -> None:
    """What a kernel restart does: the new kernel holds no handle on the job's process."""
    local_backend._children.clear()


def test_trivial_job_completes_once_and_its_record_survives_a_restart(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_JOB_ID", "999")             # as inside an Open OnDemand job
    monkeypatch.setenv("SBATCH_PARTITION", "notebooks")
    jobs = tmp_path / "jobs"
    t0 = time.monotonic()
    job = submit("bandwidth", profile="local", overrides={"procs_per_node": 1, "sharding": "none"}, jobs_dir=jobs)
    assert job.job_id.startswith("local-")
    assert job.state() in (JobState.PENDING, JobState.RUNNING, JobState.COMPLETED)   # queued for a core first
    assert job.wait(timeout=600, poll=0.2) is JobState.COMPLETED, job.tail()
    print(f"local bandwidth job: submit -> COMPLETED in {time.monotonic() - t0:.1f} s")
    log = job.tail(100)
    # Slurm job ids are numbers (scripts do arithmetic with them): local-N runs as SLURM_JOB_ID=N
    assert f"[job] id {job.job_id.removeprefix('local-')} name workshop-bandwidth nodes 1: " in log  # not 999
    assert "# Avg bus bandwidth" in log and "[job] end" in log
    files = {p.name for p in job.job_dir.iterdir()}
    assert {"job.sh", "config.json", "job.json", f"slurm-{job.job_id}.out"} <= files
    assert json.loads((job.job_dir / "config.json").read_text())["output_dir"] == str(job.run_dir)

    again = submit("bandwidth", profile="local", overrides={"procs_per_node": 1, "sharding": "none"}, jobs_dir=jobs)
    assert again.job_id == job.job_id and len(list(jobs.iterdir())) == 1 + 1   # the job folder + .local-ids

    forget_children()
    by_dir, by_id = Job.load(job.job_dir), Job.load(job.job_id, jobs)
    assert by_dir.state() is by_id.state() is JobState.COMPLETED
    assert json.loads((job.job_dir / "job.json").read_text())["state"] == "COMPLETED"

    view = watch._widget_view({"bandwidth": job})   # the notebook view builds (display() prints its repr here)
    view({"bandwidth": JobState.COMPLETED}, "")
    assert "HTML" in capsys.readouterr().out
    assert status_main([job.job_id, "--jobs-dir", str(jobs)]) == 0
    assert logs_main([str(job.job_dir), "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert "COMPLETED" in out and "[job] end" in out

    redo = submit("bandwidth", profile="local", overrides={"procs_per_node": 1, "sharding": "none"},
                  jobs_dir=jobs, resubmit=True)
    assert redo.job_id != job.job_id and redo.job_dir == job.job_dir
    assert redo.record.history[0]["job_id"] == job.job_id
    assert redo.wait(timeout=600, poll=0.2) is JobState.COMPLETED


def test_failing_job_is_failed_with_the_reason(tmp_path):
    prof = site(tmp_path, "strict", "[bandwidth]\nmin_busbw_GBps = 1000000.0")
    job = submit("bandwidth", profile=prof, overrides={"procs_per_node": 1, "sharding": "none"},
                 jobs_dir=tmp_path / "jobs")
    assert job.wait(timeout=600, poll=0.2) is JobState.FAILED
    assert job.record.exit_code == 1
    assert job.reason.startswith("exit code 1")
    assert "below the site's minimum 1e+06 GB/s" in job.tail(40)


def test_long_job_is_cancelled_with_all_its_processes(tmp_path):
    prof = site(tmp_path, "slow", "")
    text = prof.read_text().replace('python_env = "current"', 'python_env = "current"\nsetup = ["sleep 300 & wait"]')
    prof.write_text(text)
    job = submit("baseline", profile=prof, jobs_dir=tmp_path / "jobs")
    try:
        # it may queue for a core first (the part's other jobs hold them): wait until its sleep runs
        until(lambda: any("sleep" in p for p in live_processes_in_group(job.record.pid)), "the job's sleep to run",
              timeout=300)
        assert job.state() is JobState.RUNNING
        forget_children()                                     # cancel from a "restarted kernel"
        reloaded = Job.load(job.job_dir)
        assert reloaded.state() is JobState.RUNNING
        assert reloaded.cancel() is JobState.CANCELLED
        # bash, and the sleep it started, are gone (the kernel reaps them in its own time: wait for it)
        until(lambda: live_processes_in_group(job.record.pid) == [], "the job's processes to end", timeout=60)
        assert Job.load(job.job_dir).state() is JobState.CANCELLED
    finally:
        # a failed assertion must not leave a 300 s job holding a core of the machine's shared queue
        Job.load(job.job_dir).cancel()


def test_bad_config_is_refused_before_anything_is_written(tmp_path):
    jobs = tmp_path / "jobs"
    with pytest.raises(ConfigError, match="batch_size"):
        submit("baseline", profile="local", overrides={"batch_size": 0}, jobs_dir=jobs)
    with pytest.raises(ConfigError, match="hybrid_shard"):
        submit("multi_node", profile="local", jobs_dir=jobs, overrides={"sharding": "hybrid_shard", "nodes": 3})
    assert not jobs.exists()


def test_local_backend_simulates_two_nodes_with_the_multi_node_script(tmp_path, monkeypatch):
    """The same srun + c10d script runs on one machine: one torchrun per simulated node. Two such jobs at once,
    from two jobs folders, are both job local-1 (ids are counted per folder, and every notebook has a job 1):
    they must not meet at one rendezvous port (a CI run lost notebook 05's 2 x 2 job to EADDRINUSE on
    20000 + its id). Each queues for its own slots folder, as the test suite's parts do, so they run together."""
    from workshop.results.logs import parse_log
    from workshop.slurm import submit

    jobs = []
    for folder in ("jobs", "other-jobs"):
        monkeypatch.setenv("WORKSHOP_LOCAL_SLOTS", str(tmp_path / f"slots-{folder}"))
        jobs.append(submit("bandwidth", profile="local", jobs_dir=tmp_path / folder,
                           overrides={"nodes": 2, "procs_per_node": 1}))
    assert [j.job_id for j in jobs] == ["local-1", "local-1"]
    for job in jobs:
        assert job.wait(timeout=600).value == "COMPLETED", job.tail(40)
    job = jobs[0]
    assert "srun --nodes" in job.script and "rdzv-backend=c10d" in job.script
    bw = parse_log(job.log_path).bandwidth
    assert bw is not None and bw.n_nodes == 2 and bw.n_ranks == 2
    assert "local-node1" in job.tail(60) and "local-node2" in job.tail(60)
    endpoints = [next(line for line in j.log_path.read_text().splitlines() if line.startswith("[job] rendezvous"))
                 for j in jobs]
    assert endpoints[0] != endpoints[1], endpoints
