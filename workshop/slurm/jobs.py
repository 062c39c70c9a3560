"""`submit(step, config, profile) -> Job`: one call from a notebook cell to a running batch job.

The config is validated (and checked against the site's partitions) before anything is written or
submitted. A job's folder is named by a hash of step, config and profile, so running the same
cell twice finds the job already submitted instead of queueing a duplicate.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections import deque
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping

from workshop.training import wrap_function
from workshop.training.accelerate_yaml import FILE as ACCELERATE_FILE, to_yaml
from workshop.training.config import ConfigError, RunConfig, load_config
from workshop.slurm.profiles import Profile, load_profile, scratch_folder
from workshop.slurm import local_backend, slurm_backend
from workshop.slurm.fit import CACHE as DRY_RUN_CACHE, check_gpu_memory
from workshop.slurm.records import JobRecord, JobState, find_record, now
from workshop.slurm.render import render, uses_accelerate
from workshop.slurm.shared import link_shared, shared_job
from workshop.slurm.steps import check_fits, get_step, step_config

# A job needs room for its log, run records and (with checkpointing) more; below this, refuse to submit
# rather than have a job die on its first write, or lose the log that says why.
MIN_FREE_MB = 64

STEP_LINE = re.compile(r"\[workshop\] step (\d+)/(\d+)")
# "[rank0]: workshop.training.sharding.ShardingMismatch: asked for ..." / "ValueError: ..."
ERROR_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?(error: .+)")   # workshop.training.train's one-line ConfigError
START_LINE = re.compile(r"^\[job\] start (\S+)", re.M)
EXCEPTION_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Mismatch|Interrupt)): (.+)")


class Job:
    """A submitted job: its state, log and results, whichever backend runs it."""

    def __init__(self, record: JobRecord) -> None:
        self.record = record

    # -------------------------------------------------------------- identity and paths
    @property
    def job_id(self) -> str:
        return self.record.job_id

    @property
    def step(self) -> str:
        return self.record.step

    @property
    def job_dir(self) -> Path:
        return self.record.dir

    @property
    def log_path(self) -> Path:
        return self.record.log_path

    @property
    def run_dir(self) -> Path:
        return self.record.run_dir

    @property
    def checkpoint_dir(self) -> Path:
        """Where the job's checkpoint-N folders are: its config's checkpoint_dir (the site's scratch folder,
        or the instructor's shared one), else its run/ folder."""
        return checkpoint_root(self.job_dir)

    @property
    def script(self) -> str:
        """The rendered batch script, to show in a notebook."""
        return self.record.script.read_text()

    @property
    def reason(self) -> str:
        return self.record.reason

    def __repr__(self) -> str:
        return (f"Job({self.job_id!r}, step={self.step!r}, state={self.record.state}, "
                f"backend={self.record.backend!r}, dir={str(self.job_dir)!r})")

    @classmethod
    def load(cls, job: str | Path, jobs_dir: str | Path = "jobs") -> "Job":
        """A job by folder or id, e.g. after a kernel restart."""
        return cls(find_record(job, jobs_dir))

    # -------------------------------------------------------------- state
    def state(self) -> JobState:
        """The job's state, as soon as anyone knows it.

        Its own log says first when it starts (`[job] start`) and ends well (`[job] end`, the script's
        last line); Slurm is asked through the shared, rate-limited poller and has the last word
        (a failure, a cancellation, the exit code, the elapsed time). Settled states are kept.
        """
        rec = self.record
        if rec.settled:
            return rec.job_state
        if rec.backend == "local":
            result, source = local_backend.status(rec), "local"
            self._local_times()
        else:
            started, ended = self.log_marks()
            if ended:
                slurm_backend.POLLER.hurry()
            result, source = slurm_backend.status(rec), "slurm"
            slurm_says = result[0] if result else None
            self._slurm_times(slurm_says)
            if slurm_says is None or not slurm_says.finished:
                nodes = result[3] if result else rec.nodes
                if ended:
                    result, source = (JobState.COMPLETED, "", 0, nodes), "log"
                elif started and slurm_says in (None, JobState.PENDING):
                    result, source = (JobState.RUNNING, "", None, nodes), "log"
        if result is None:      # Slurm does not know it yet (accounting lags a second behind sbatch)
            return rec.job_state
        state, reason, rc, nodes = result
        if state is JobState.FAILED and reason:
            reason = "; ".join(x for x in (reason, self._error_line()) if x)
        changed = ((state.value, reason, rc, nodes or rec.nodes, source) !=
                   (rec.state, rec.reason, rec.exit_code, rec.nodes, rec.state_from))
        rec.state, rec.reason, rec.exit_code, rec.nodes, rec.state_from = state.value, reason, rc, nodes or rec.nodes, source
        if state.finished and rec.ended_at is None:
            rec.ended_at = now()
        if changed:
            try:
                rec.save()
            except OSError:
                pass             # someone else's job folder, read-only to us: state is still right
        return state

    def log_marks(self) -> tuple[bool, bool]:
        """(started, ended well) from the job's own log: `[job] start` near its top, `[job] end` last."""
        head = self._log_head()
        started = "\n[job] start " in f"\n{head}"
        return started, started and self.tail(2).rstrip().rsplit("\n", 1)[-1].startswith("[job] end ")

    def _log_head(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read(16384)
        except FileNotFoundError:
            return ""

    def log_times(self) -> tuple[datetime | None, datetime | None]:
        """The stamps of the log's `[job] start` (near its top) and `[job] end` (its last line, so a job
        that ended well); None where the log does not say it (yet)."""
        m = START_LINE.search(self._log_head())
        if m is None:
            return None, None
        last = self.tail(2).rstrip().rsplit("\n", 1)[-1]
        words = last.split()
        return _stamp(m.group(1)), (_stamp(words[2]) if len(words) > 2 and last.startswith("[job] end ") else None)

    def elapsed(self) -> float | None:
        """Run time: Slurm's Elapsed once it ended; until then the job's own stamps, one clock (its log's
        `[job] start` to its `[job] end`, or to now while it runs), so that a job of a few seconds shows its
        time while the poller waits for its next slot. Slurm's Start stands in for a log without a stamp."""
        rec = self.record
        if rec.elapsed_s is not None:
            return rec.elapsed_s
        start, end = self.log_times()
        if start is None and rec.started_at is not None:
            start = datetime.fromisoformat(rec.started_at).astimezone()   # sacct's Start is local time
        if start is None:
            return None
        return max(0.0, ((end or datetime.now(start.tzinfo)) - start).total_seconds())

    def _slurm_times(self, state: JobState | None) -> None:
        start, elapsed = slurm_backend.POLLER.times(self.job_id)
        if start:
            self.record.started_at = start
        if state is not None and state.finished and elapsed is not None:
            self.record.elapsed_s = elapsed

    def _local_times(self) -> None:
        rec = self.record
        marker = local_backend.started_marker(rec)
        if rec.started_at is None and marker.exists():
            rec.started_at = datetime.fromtimestamp(marker.stat().st_mtime).astimezone().isoformat()
        exit_file = rec.dir / f".exit-{rec.job_id}"
        if rec.elapsed_s is None and marker.exists() and exit_file.exists():
            rec.elapsed_s = round(exit_file.stat().st_mtime - marker.stat().st_mtime, 1)

    def wait(self, timeout: float | None = None, poll: float | None = None) -> JobState:
        """Block until the job finishes (or `timeout` s pass), showing progress; the last state."""
        from workshop.slurm.watch import wait
        return wait(self, timeout=timeout, poll=poll)

    def cancel(self) -> JobState:
        if not self.state().finished:
            if self.record.backend == "local":
                local_backend.cancel(self.record)
            else:
                slurm_backend.cancel(self.record)      # the next poll sees CANCELLED
        return self.state()

    # -------------------------------------------------------------- outputs
    def tail(self, n: int = 20) -> str:
        """The last `n` lines of the job's log ('' before the job starts writing)."""
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(deque(f, maxlen=n))
        except FileNotFoundError:
            return ""

    def progress(self) -> tuple[int, int] | None:
        """(k, N) from the last `[workshop] step k/N` line of the log."""
        found = None
        for m in STEP_LINE.finditer(self.tail(200)):
            found = (int(m.group(1)), int(m.group(2)))
        return found

    def summary(self) -> dict[str, Any] | None:
        """`run/summary.json`, once the training run has written it."""
        path = self.run_dir / "summary.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def _error_line(self) -> str:
        """The exception (or slurmstepd error) a student needs to read first, from the log."""
        lines = self.tail(400).splitlines()
        for line in reversed(lines):
            m = EXCEPTION_LINE.match(line.strip())
            if m and "ChildFailedError" not in m.group(1):
                return f"{m.group(1)}: {m.group(2)}"[:300]
            m = ERROR_LINE.match(line.strip())
            if m:
                return m.group(1)[:300]
        for line in reversed(lines):
            if "slurmstepd: error:" in line or "oom-kill" in line.lower():
                return line.strip()[:300]
        return ""


def _stamp(text: str) -> datetime | None:
    """A log's stamp (`date -Is` or to the millisecond), as an aware time; None if it is not one."""
    try:
        return datetime.fromisoformat(text).astimezone()
    except ValueError:
        return None


def job_key(step: str, config: RunConfig, profile: Profile, name: str) -> str:
    """Short hash of what makes two submissions the same job."""
    # output_dir is the job folder itself; resume continues the same job, it is not another one
    payload = {"step": step, "config": {k: v for k, v in config.to_dict().items()
                                        if k not in ("output_dir", "resume", "checkpoint_dir")},
               "profile": [profile.name, profile.digest], "name": name}
    if config.wrap_function:     # the file's content, not its name: an edited function is another job
        payload["wrap_function_sha256"] = wrap_function.digest(config)
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:10]


def submit(step: str, config: RunConfig | None = None, profile: str | Path | Profile | None = None, *,
           overrides: Mapping[str, Any] | None = None, resubmit: bool = False, resume: bool = False,
           jobs_dir: str | Path = "jobs", name: str | None = None, force: bool = False) -> Job:
    """Render and submit a course step; returns the existing Job when this exact one was submitted.

    `config=None` takes the step's config on this site (step defaults < profile < `overrides`).
    `resubmit` starts the job over (the old run/ is kept as run-<old id>/); `resume` submits it again
    into the same folder, keeping run/, to continue from its latest checkpoint (after a TIMEOUT).
    `force` submits a job whose dry run does not fit its partition's GPU memory (workshop.slurm.fit).
    """
    return prepare(step, config, profile, overrides=overrides, resubmit=resubmit, resume=resume,
                   jobs_dir=jobs_dir, name=name, force=force).submit()


class Submission:
    """A job ready to go: validated, rendered and placed, nothing written yet (see `prepare`)."""

    def __init__(self, step: str, cfg: RunConfig, prof: Profile, job_dir: Path, job_name: str, script: str,
                 resubmit: bool, shared: Path | None = None, force: bool = False) -> None:
        self.step, self.cfg, self.prof, self.job_dir = step, cfg, prof, job_dir
        self.job_name, self.script, self.resubmit = job_name, script, resubmit
        self.shared = shared    # instructor-run mode: the instructor's job folder this job stands for
        self.force = force      # submit even if the job's dry run does not fit its GPUs

    @property
    def queues_a_job(self) -> bool:
        """Will `submit` hand a job to the backend (not the instructor's, not one already there)?"""
        return self.shared is None and (self.resubmit or self.cfg.resume or not (self.job_dir / "job.json").is_file())

    def check_fit(self) -> None:
        """Before the job reaches the queue: its dry run must fit its partition's GPU memory, unless `force`
        (workshop.slurm.fit; a partition without `gpu_mem` checks nothing, a job already queued is not
        checked again). Raises ConfigError on batch_size with the largest micro-batch that fits."""
        if self.queues_a_job and not self.force:
            check_gpu_memory(self.step, self.cfg, self.prof, self.job_dir.parent / DRY_RUN_CACHE)

    def submit(self) -> Job:
        """Write the job's folder and hand it to the backend (or find the job already there)."""
        cfg, prof, job_dir = self.cfg, self.prof, self.job_dir
        if self.shared is not None:     # this costly job is the instructor's, read here
            link_shared(job_dir, self.shared)
            return Job(JobRecord.load(self.shared))
        self.check_fit()
        if self.resubmit or cfg.resume or not (job_dir / "job.json").is_file():   # re-running a cell needs no room
            check_writable(job_dir.parent)
        job_dir.mkdir(parents=True, exist_ok=True)
        with open(job_dir / ".submit.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)      # two cells (or kernels) submitting at once: one job
            history: list[dict[str, Any]] = []
            if cfg.resume:
                _check_resumable(job_dir)
            if (job_dir / "job.json").is_file():
                old = JobRecord.load(job_dir)
                if not (self.resubmit or cfg.resume):
                    return Job(old)
                if not Job(old).state().finished:
                    raise RuntimeError(f"job {old.job_id} in {job_dir} is still {old.state}: cancel it first "
                                       "(job.cancel() or `workshop cancel`), or wait for it, then resubmit")
                history = old.history + [{"job_id": old.job_id, "state": old.state, "submitted_at": old.submitted_at}]
                if old.run_dir.exists() and not cfg.resume:
                    shutil.move(str(old.run_dir), str(job_dir / f"run-{old.job_id}"))
                if not cfg.resume:
                    drop_outside_checkpoints(job_dir)     # starting over: a resume must not find the old ones
            (job_dir / "job.sh").write_text(self.script)
            (job_dir / "job.sh").chmod(0o755)
            cfg = wrap_function.carry(cfg, job_dir)     # the job runs its own copy of the student's file
            cfg.to_json(job_dir / "config.json")
            if uses_accelerate(self.step, cfg):   # the accelerate config its launch reads, written from config.json
                (job_dir / ACCELERATE_FILE).write_text(f"# {ACCELERATE_FILE} of job folder {job_dir.name}: written from "
                                                       f"its config.json\n{to_yaml(cfg)}")
            rec = JobRecord(job_id="", backend=prof.backend, step=self.step, profile=prof.name, name=self.job_name,
                            job_dir=str(job_dir), history=history, sacct_interval_s=prof.sacct_interval_s)
            if prof.backend == "local":
                cpus = cfg.procs_per_node * prof.partition_for(self.step).cpus_per_proc
                rec.job_id = local_backend.submit(rec, prof, cpus, job_dir.parent, nodes=cfg.nodes)
            else:
                rec.job_id = slurm_backend.submit(rec)
                slurm_backend.POLLER.watch(rec.job_id, rec.sacct_interval_s)
            rec.save()
        return Job(rec)


def prepare(step: str, config: RunConfig | None = None, profile: str | Path | Profile | None = None, *,
            overrides: Mapping[str, Any] | None = None, resubmit: bool = False, resume: bool = False,
            jobs_dir: str | Path = "jobs", name: str | None = None, force: bool = False) -> Submission:
    """Everything `submit` checks and renders, without writing or submitting: a bad config raises here,
    so a cell's jobs can all be checked before the first one goes (`workshop.slurm.group.submit_all`).
    `force` is kept for `Submission.submit`, which checks the job's fit (workshop.slurm.fit)."""
    get_step(step)
    prof = load_profile(profile)
    if config is None:
        cfg = step_config(step, prof, overrides)
    else:
        cfg = load_config(base=config, overrides=overrides) if overrides else config.validate()
    check_fits(step, cfg, prof)
    job_name = name or f"workshop-{step}"
    jobs_root = Path(jobs_dir).resolve()
    job_dir = jobs_root / f"{step}-{job_key(step, cfg, prof, job_name)}"
    cfg = load_config(base=cfg, overrides={"output_dir": str(job_dir / "run"), "resume": resume or cfg.resume,
                                           "checkpoint_dir": checkpoint_folder(prof, jobs_root, job_dir)})
    linked = job_dir.is_symlink() or not job_dir.exists()
    shared = shared_job(prof, cfg, jobs_root, job_dir.name, step) if linked else None
    script = render(step, cfg, prof, job_dir, job_name)   # raises before any file is written
    return Submission(step, cfg, prof, job_dir, job_name, script, resubmit, shared, force)


def checkpoint_folder(profile: Profile, jobs_root: Path, job_dir: Path) -> str:
    """Where a job's checkpoints go, so that none lands in a student's folder (collected, copied at grading):
    a job run into the instructor's shared folder keeps them in its `checkpoints/` (every student reads
    notebook 05's from there), any other under the profile's scratch folder, one folder per job folder
    (resume finds it again); "" (the job's run/) only for a profile that names no scratch."""
    if profile.instructor_jobs and jobs_root == Path(profile.instructor_jobs).expanduser().resolve():
        return str(jobs_root / "checkpoints" / job_dir.name)
    scratch = scratch_folder(profile)
    if scratch is None:
        return ""
    where = hashlib.sha256(str(job_dir).encode()).hexdigest()[:8]     # two course folders, two checkpoint folders
    return str(scratch / "checkpoints" / f"{job_dir.name}-{where}")


def checkpoint_root(job_dir: Path) -> Path:
    """The checkpoint folder a job's config.json names (its run/ without one)."""
    try:
        named = json.loads((Path(job_dir) / "config.json").read_text()).get("checkpoint_dir") or ""
    except (OSError, ValueError):
        named = ""
    return Path(named) if named else Path(job_dir) / "run"


def drop_outside_checkpoints(job_dir: Path) -> None:
    """Remove a job's checkpoints kept outside its folder (scratch), before the job starts over."""
    folder = checkpoint_root(job_dir)
    if folder != Path(job_dir) / "run" and folder.is_dir():
        shutil.rmtree(folder, ignore_errors=True)


class JobsDirError(OSError):
    """The jobs folder cannot take a job's files; the message names the folder and the fix."""


def check_writable(jobs_root: Path, min_free_mb: int = MIN_FREE_MB) -> None:
    """Refuse to submit into a folder the job could not write its log to: read-only, not ours, or full.

    Writing is tried for real (a temporary file), because permission bits do not tell the whole
    story: root may write anywhere by mode, yet not on a read-only or full filesystem.
    """
    folder = jobs_root
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    fix = (f"choose a jobs folder you can write to (jobs_dir=... / --jobs-dir), e.g. under $HOME or your "
           f"scratch space, or fix this one (`ls -ld {folder}`, `df -h {folder}`)")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".workshop-write-test-")
        try:
            os.write(fd, b"x" * 4096)
        finally:
            os.close(fd)
            os.unlink(tmp)
    except OSError as e:
        why = {errno.EACCES: "is not writable by you", errno.EPERM: "is not writable by you",
               errno.EROFS: "is on a read-only filesystem", errno.ENOSPC: "is on a full disk",
               errno.EDQUOT: "is over your disk quota"}.get(e.errno, f"cannot be written ({e.strerror})")
        raise JobsDirError(e.errno, f"jobs folder {str(folder)!r} {why}: nothing was submitted. Fix: {fix}") from None
    free_mb = shutil.disk_usage(folder).free / 2**20
    if free_mb < min_free_mb:
        raise JobsDirError(errno.ENOSPC, f"jobs folder {str(folder)!r} has {free_mb:.1f} MB free, less than the "
                           f"{min_free_mb} MB a job's log and results need: nothing was submitted. Fix: free "
                           f"space there (old jobs: `du -sh {folder}/*`), or {fix}")


def _check_resumable(job_dir: Path) -> None:
    """Refuse a resume that could only start over: no earlier job here, or no checkpoint in its run/."""
    from workshop.training.checkpoints import latest_checkpoint

    if not (job_dir / "job.json").is_file():
        raise ConfigError("resume", f"there is no earlier job of this step and config in {str(job_dir)!r}",
                          "submit it without resume first (the same step, config and profile)")
    if latest_checkpoint(checkpoint_root(job_dir)) is None:
        raise ConfigError("resume", f"the earlier job in {str(job_dir)!r} saved no checkpoint in "
                          f"{str(checkpoint_root(job_dir))!r}",
                          "resubmit it to start over (resubmit=True / --resubmit), with checkpoint_every=N, "
                          "or on a profile with signal_lead_s, so that the next time limit leaves a checkpoint")


__all__ = ["ConfigError", "Job", "JobState", "submit"]
