"""`job.json`: the record of a submitted job, kept in its folder so a restarted kernel (or another
terminal) finds the job, its backend and its last known state again."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


class JobState(str, enum.Enum):
    """Slurm's job states that matter to a student; other Slurm states map onto these."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    NODE_FAIL = "NODE_FAIL"
    CHECKPOINTED = "CHECKPOINTED"   # ended on purpose at a checkpoint (exit CHECKPOINT_EXIT): resume it

    @property
    def finished(self) -> bool:
        return self not in (JobState.PENDING, JobState.RUNNING)

    def __str__(self) -> str:
        return self.value


# The batch script's exit status when the time-limit warning stopped training at a checkpoint: 75 is
# EX_TEMPFAIL of sysexits.h ("temporary failure; the user is invited to retry"). The job ends at once,
# freeing its GPUs; Slurm records FAILED with ExitCode 75:0, which every backend reads as CHECKPOINTED.
CHECKPOINT_EXIT = 75
CHECKPOINT_REASON = f"stopped at a checkpoint before the time limit (exit {CHECKPOINT_EXIT}): submit again with resume"

# Slurm's other states (squeue/sacct spellings) -> ours
SLURM_STATES: dict[str, JobState] = {s.value: s for s in JobState} | {
    "CONFIGURING": JobState.RUNNING, "COMPLETING": JobState.RUNNING, "STAGE_OUT": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING, "RESIZING": JobState.RUNNING,
    "REQUEUED": JobState.PENDING, "REQUEUE_HOLD": JobState.PENDING, "REQUEUE_FED": JobState.PENDING,
    "SUSPENDED": JobState.PENDING, "STOPPED": JobState.PENDING, "RESV_DEL_HOLD": JobState.PENDING,
    "BOOT_FAIL": JobState.NODE_FAIL, "DEADLINE": JobState.TIMEOUT, "PREEMPTED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED, "SPECIAL_EXIT": JobState.FAILED,
}


def now() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


@dataclass
class JobRecord:
    job_id: str
    backend: str                 # "slurm" | "local"
    step: str
    profile: str
    name: str
    job_dir: str
    state: str = JobState.PENDING.value
    reason: str = ""
    exit_code: int | None = None
    submitted_at: str = field(default_factory=now)
    ended_at: str | None = None
    nodes: str = ""
    host: str = ""               # local backend: the machine the processes run on
    pid: int | None = None       # local backend: the process group leader
    pid_start: int | None = None  # its start time (clock ticks), so a reused pid is not mistaken for it
    history: list[dict[str, Any]] = field(default_factory=list)  # earlier submissions of this folder
    state_from: str = ""         # who said `state`: "log" (the job's own log, ahead of Slurm), "slurm", "local"
    started_at: str | None = None  # when the job started running, by the scheduler's clock
    elapsed_s: float | None = None  # run time by the scheduler's clock (Slurm's Elapsed), once it ended
    sacct_interval_s: float = 0.0  # the site's least time between two Slurm queries of a kernel, for its class

    @property
    def dir(self) -> Path:
        return Path(self.job_dir)

    @property
    def log_path(self) -> Path:
        return self.dir / f"slurm-{self.job_id}.out"

    @property
    def script(self) -> Path:
        return self.dir / "job.sh"

    @property
    def config_path(self) -> Path:
        return self.dir / "config.json"

    @property
    def run_dir(self) -> Path:
        return self.dir / "run"

    @property
    def job_state(self) -> JobState:
        return JobState(self.state)

    @property
    def settled(self) -> bool:
        """Finished, and the scheduler itself said so: nothing about this job can change any more."""
        return self.job_state.finished and self.state_from != "log"

    def save(self) -> Path:
        """Write job.json atomically (a reader never sees half a record)."""
        path = self.dir / "job.json"
        data = dataclasses.asdict(self)
        data.update(log_path=str(self.log_path), script=str(self.script), config=str(self.config_path),
                    run_dir=str(self.run_dir))
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".job.json.")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, job_dir: str | Path) -> "JobRecord":
        data = json.loads((Path(job_dir) / "job.json").read_text())
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def find_record(job: str | Path, jobs_dir: str | Path = "jobs") -> JobRecord:
    """A record by job folder (or its job.json) or by job id, searched under `jobs_dir`."""
    path = Path(job)
    if path.name == "job.json":
        path = path.parent
    if (path / "job.json").is_file():
        return JobRecord.load(path)
    root = Path(jobs_dir)
    for rec_path in sorted(root.glob("*/job.json")):
        try:
            rec = JobRecord.load(rec_path.parent)
        except (OSError, ValueError, TypeError):
            continue
        if rec.job_id == str(job) or any(h.get("job_id") == str(job) for h in rec.history):
            return rec
    raise FileNotFoundError(f"no job {str(job)!r}: not a job folder, and no job.json under {str(root)!r} has "
                            "that id. Pass the job folder (jobs/<step>-<hash>) or run from the folder that "
                            "holds jobs/ (or give --jobs-dir)")
