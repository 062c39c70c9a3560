"""Local backend: the same `job.sh`, run with bash on this machine as a detached process.

It sets the variables a Slurm job sees, so the script cannot tell the difference, and leaves its
state in the job folder (`.exit-<id>`, `.cancelled-<id>`): a restarted kernel still knows whether
the job completed, failed or was cancelled. A job of N nodes simulates them on this machine: the
`srun` and `scontrol` of `local_bin/` start the launcher once per node (named local-node1..N by
SLURMD_NODENAME) and point the rendezvous at localhost, so the multi-node script runs unchanged.

Jobs queue for this machine's cores as they would for a partition's (`local_queue`): a job of N
processes starts when N cores are free (all of them, for a job bigger than the machine), in the
order submitted; until then it is PENDING.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from workshop.slurm.profiles import Profile
from workshop.slurm import local_queue
from workshop.slurm.ports import rendezvous_port
from workshop.slurm.records import CHECKPOINT_EXIT, CHECKPOINT_REASON, JobRecord, JobState
from workshop.slurm.slurm_backend import LOCAL_RDZV_PORT, scrubbed_env

# bash -c runner: run the job, then leave its exit status where any later process can read it.
_RUNNER = 'bash "$1"; rc=$?; printf "%s\\n" "$rc" > "$2.tmp" && mv -f "$2.tmp" "$2"; exit "$rc"'
_children: dict[str, subprocess.Popen] = {}


def next_id(jobs_dir: Path) -> str:
    """`local-<n>`, counted per jobs folder under a file lock (two kernels never share an id)."""
    jobs_dir.mkdir(parents=True, exist_ok=True)
    with open(jobs_dir / ".local-ids", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        n = int(f.read().strip() or 0) + 1
        f.seek(0)
        f.truncate()
        f.write(f"{n}\n")
    return f"local-{n}"


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":        # a zombie has finished
        return None
    return int(fields[19])


def _alive(record: JobRecord) -> bool:
    child = _children.get(record.job_id)
    if child is not None:
        child.poll()            # reap it, so a finished child is not a zombie
    return record.pid is not None and _start_time(record.pid) == record.pid_start


LOCAL_BIN = Path(__file__).resolve().parent / "local_bin"
QUEUE = Path(local_queue.__file__).resolve()


def started_marker(record: JobRecord) -> Path:
    """Written by the queue when the job leaves it and starts running; its time is the start time."""
    return record.dir / f".started-{record.job_id}"


def submit(record: JobRecord, profile: Profile, cpus_per_task: int, jobs_dir: Path, nodes: int = 1) -> str:
    job_id = next_id(jobs_dir)
    host = socket.gethostname()
    nodelist = host if nodes == 1 else ",".join(["localhost"] * nodes)
    env = scrubbed_env()
    # Slurm job ids are numbers, and scripts do arithmetic with them (the rendezvous port)
    number = job_id.removeprefix("local-")
    env.update(SLURM_JOB_ID=number, SLURM_JOBID=number, SLURM_JOB_NAME=record.name,
               PATH=f"{LOCAL_BIN}{os.pathsep}{env.get('PATH', '')}",
               SLURM_JOB_NODELIST=nodelist, SLURM_NODELIST=nodelist, SLURM_NNODES=str(nodes),
               SLURM_JOB_NUM_NODES=str(nodes), SLURM_NTASKS=str(nodes), SLURM_NTASKS_PER_NODE="1",
               SLURM_CPUS_PER_TASK=str(cpus_per_task), SLURMD_NODENAME=host if nodes == 1 else "local-node1",
               SLURM_NODEID="0", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_SUBMIT_DIR=os.getcwd(),
               SLURM_SUBMIT_HOST=host, SLURM_CLUSTER_NAME="local", SLURM_JOB_PARTITION="local")
    if nodes > 1:
        # the rendezvous port: rendezvous.sh derives it from the job id, unique on a Slurm cluster but counted
        # per jobs folder here, so notebook 05's job 5 and another folder's job 5 at once met on one port
        env[LOCAL_RDZV_PORT] = str(rendezvous_port())
    record.job_id = job_id
    ticket, ticket_fd = local_queue.enqueue()
    log = open(record.dir / f"slurm-{job_id}.out", "ab")
    try:
        queue = [sys.executable, "-S", str(QUEUE), str(cpus_per_task * nodes), ticket, str(ticket_fd),
                 str(started_marker(record)), "--"]
        child = subprocess.Popen([*queue, "bash", "-c", _RUNNER, "workshop-local-job", str(record.script),
                                  str(record.dir / f".exit-{job_id}")],
                                 cwd=record.dir, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(ticket_fd,))
    finally:
        log.close()
        os.close(ticket_fd)        # the queue process holds the ticket now
    _children[job_id] = child
    record.pid, record.pid_start, record.host = child.pid, _start_time(child.pid), host
    record.nodes = host if nodes == 1 else ",".join(f"local-node{i + 1}" for i in range(nodes))
    return job_id


def status(record: JobRecord) -> tuple[JobState, str, int | None, str]:
    if (record.dir / f".cancelled-{record.job_id}").exists():
        return JobState.CANCELLED, "cancelled by the user", None, record.nodes
    if record.host and record.host != socket.gethostname():
        return record.job_state, f"runs on {record.host}; ask there", record.exit_code, record.nodes
    for _ in range(2):  # exit file, then liveness, then the exit file again (it may land in between)
        exit_file = record.dir / f".exit-{record.job_id}"
        if exit_file.exists():
            rc = int(exit_file.read_text().strip() or 1)
            if rc == 0:
                return JobState.COMPLETED, "", 0, record.nodes
            if rc == CHECKPOINT_EXIT:
                return JobState.CHECKPOINTED, CHECKPOINT_REASON, rc, record.nodes
            why = f"exit code {rc}" if rc < 128 else f"killed by signal {rc - 128}"
            return JobState.FAILED, why, rc, record.nodes
        if _alive(record):
            if not started_marker(record).exists():
                return JobState.PENDING, "queued: waiting for free cores on this machine", None, record.nodes
            return JobState.RUNNING, "", None, record.nodes
    return JobState.FAILED, "the job's process is gone and left no exit status (machine restarted?)", None, record.nodes


def cancel(record: JobRecord, grace_s: float = 5.0) -> None:
    """SIGTERM the job's process group (bash, torchrun, its workers), SIGKILL after `grace_s`."""
    (record.dir / f".cancelled-{record.job_id}").write_text(f"{time.time()}\n")
    if record.pid is None or not _alive(record):
        return
    try:
        os.killpg(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not _alive(record):
                break
            time.sleep(0.1)
        os.killpg(record.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _alive(record)
