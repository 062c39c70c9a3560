"""Slurm backend: sbatch, one shared poller for all of this kernel's jobs, scancel.

A notebook on Open OnDemand runs inside a Slurm job, and sbatch/srun read inherited `SLURM_*`
variables as options (a job would inherit the notebook's node list, memory, time...): every
command here runs with those scrubbed. So is the Jupyter session itself: sbatch hands the
submitting environment to the job, and a kernel's (its server's session, its parent, ipykernel's
matplotlib backend, pager and terminal colours, the OOD app's config file) would reach every
training process. Commands take argument lists, never a shell.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from typing import Mapping

from workshop.slurm.records import CHECKPOINT_EXIT, CHECKPOINT_REASON, SLURM_STATES, JobRecord, JobState

# The poller asks Slurm at most once per MIN_POLL_INTERVAL seconds per kernel, however many jobs
# are watched, and backs off towards MAX_POLL_INTERVAL while nothing changes. A site profile raises
# the floor with its class ([slurm.watch]: kernels / sacct_per_s, kept in each job's job.json); so
# does WORKSHOP_SLURM_MIN_POLL_S; the test cluster lowers it.
MIN_POLL_INTERVAL = float(os.environ.get("WORKSHOP_SLURM_MIN_POLL_S", "10"))
MAX_POLL_INTERVAL = 30.0
COMMAND_TIMEOUT = 30.0

_SCRUB_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SACCT_", "SCANCEL_", "SINFO_",
                   # the Jupyter session: its server (JPY_SESSION_NAME), its kernel launcher (JPY_PARENT_PID,
                   # JPY_INTERRUPT_EVENT, IPY_INTERRUPT_EVENT), its configuration (JUPYTER_CONFIG_PATH, ...)
                   "JPY_", "IPY_", "JUPYTER_", "PYDEVD_")
# What ipykernel sets for its own process (zmqshell's init_environment, kernelapp's matplotlib backend),
# and the OOD app's config file of the session's server and its terminals' PATH
_SESSION_NAMES = {"MPLBACKEND", "TERM", "CLICOLOR", "CLICOLOR_FORCE", "FORCE_COLOR", "PAGER", "GIT_PAGER",
                  "CONFIG_FILE", "WORKSHOP_COURSE_PATH"}
_KEEP = {"SLURM_CONF"}   # which cluster to talk to, not an option of the surrounding job
# A local multi-node job's own rendezvous port (set by local_backend, read by slurm/templates/rendezvous.sh):
# never handed on to a job submitted from inside it
LOCAL_RDZV_PORT = "WORKSHOP_RDZV_PORT"
# The session's shell: a virtualenv's activation (its prompt and its marker; the job's own setup activates
# what the site's profile names), the prompts, and what the shell keeps of its own session: the folder it
# was in before (OLDPWD: the student's session folder reached every job), its working folder (a job's is
# Slurm's --chdir), its depth, last argument, history file and window size. PYTHONPATH stays: sites and
# engineers' checkouts use it.
_SHELL_NAMES = {"VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT", "PS1", "PS2", "PS4", "PROMPT_COMMAND", "_OLD_VIRTUAL_PATH",
                "_OLD_VIRTUAL_PS1", "OLDPWD", "PWD", "SHLVL", "_", "HISTFILE", "COLUMNS", "LINES"}
# The PATH the session had before its own setup ran: the OOD app's script exports it (slurm/ood/template)
SITE_PATH = "WORKSHOP_SITE_PATH"


class SlurmError(RuntimeError):
    """A Slurm command failed; the message carries its stderr."""


def scrubbed_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment without the surrounding job's options (SLURM_*, SBATCH_*, ...), output formats
    (SQUEUE_FORMAT, SACCT_FORMAT would change what we parse) or the Jupyter session the notebook runs in:
    what a job inherits from the kernel that submits it."""
    env = os.environ if env is None else env
    out = {k: v for k, v in env.items()
           if k in _KEEP or not (k.startswith(_SCRUB_PREFIXES) or k in _SESSION_NAMES or k in _SHELL_NAMES
                                 or k == LOCAL_RDZV_PORT)}
    if "PATH" in out:
        out["PATH"] = site_path(env)
    return out


def site_path(env: Mapping[str, str]) -> str:
    """The session's PATH without what the session added to it: the job's setup adds what the site's profile
    names, once (a session's `.venv/bin`, added again by the job, appeared twice). Where the OOD app recorded
    the PATH it started with (WORKSHOP_SITE_PATH), only those folders stay; elsewhere an activated
    virtualenv's bin folder goes. A folder named twice stays once, in its first place."""
    entries = env.get("PATH", "").split(os.pathsep)
    if SITE_PATH in env:
        site = set(env[SITE_PATH].split(os.pathsep))
        entries = [e for e in entries if e in site]
    if env.get("VIRTUAL_ENV"):
        venv_bin = os.path.join(env["VIRTUAL_ENV"], "bin")
        entries = [e for e in entries if os.path.normpath(e) != os.path.normpath(venv_bin)]
    return os.pathsep.join(dict.fromkeys(e for e in entries if e))


def run(cmd: list[str], cwd: str | None = None, *, env: Mapping[str, str] | None = None,
        timeout: float = COMMAND_TIMEOUT, check: bool = True) -> str:
    """Every Slurm client call of the package (tests/test_slurm_calls.py holds it): the surrounding job's
    options scrubbed from `env` (default: this process's), so a call from inside a job acts as from a login
    node. `check=False` returns the output of a failed command instead of raising."""
    # found on the session's PATH (a site's setup may have put Slurm's client there), run with the site's
    argv = [shutil.which(cmd[0]) or cmd[0], *cmd[1:]]
    try:
        proc = subprocess.run(argv, cwd=cwd, env=scrubbed_env(env), capture_output=True, text=True,
                              timeout=timeout, check=False)
    except FileNotFoundError:
        raise SlurmError(f"{cmd[0]} is not on PATH: this machine has no Slurm client. Use profile='local', "
                         "or run on the cluster's login node") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{' '.join(cmd)} did not answer in {timeout:.0f} s: is slurmctld up? "
                         "(`scontrol ping`)") from None
    if proc.returncode != 0 and check:
        raise SlurmError(f"{' '.join(cmd)} failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def submit(record: JobRecord) -> str:
    """sbatch the rendered script; returns the job id."""
    out = run(["sbatch", "--parsable", str(record.script)], cwd=record.job_dir)
    job_id = out.strip().splitlines()[-1].split(";")[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed {out.strip()!r}, not a job id")
    return job_id


def cancel(record: JobRecord) -> None:
    run(["scancel", record.job_id])


def _exit_reason(state: JobState, exit_code: str, slurm_reason: str) -> tuple[str, int | None]:
    code, _, sig = exit_code.partition(":")
    rc = int(code) if code.isdigit() else None
    if state is JobState.FAILED and rc:
        return f"exit code {rc}", rc
    if sig and sig != "0" and state is not JobState.COMPLETED:
        return f"killed by signal {sig}", rc
    return ("" if slurm_reason in ("None", "") else slurm_reason), rc


def _user(uid: str) -> str:
    """sacct says "CANCELLED by 1001": name the user."""
    import pwd
    try:
        return pwd.getpwuid(int(uid)).pw_name
    except (ValueError, KeyError):
        return uid


class Poller:
    """One Slurm query per interval for every job this kernel watches (thread-safe).

    sacct is asked first (it knows ended jobs, their exit codes and Slurm's own start and elapsed
    times). When accounting does not answer (slurmdbd down), squeue still gives the states of
    queued and running jobs, and `trouble` says what is missing, so a display can say it too.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_call = 0.0
        self._interval = 0.0
        self._cache: dict[str, tuple[JobState, str, int | None, str]] = {}
        self._times: dict[str, tuple[str | None, float | None]] = {}
        self._watched: set[str] = set()
        self._floors: dict[str, float] = {}   # job id -> its profile's interval for the class ([slurm.watch])
        self._sacct_ok: bool | None = None
        self.trouble = ""          # why Slurm's answer is partial or stale; "" when all is well
        self.queries = 0           # Slurm queries made (each covers every watched job)

    def watch(self, job_id: str, floor_s: float = 0.0) -> None:
        """Follow a job; `floor_s`: its site's interval for the class (the kernel's floor becomes the largest)."""
        with self._lock:
            self._watch(job_id, floor_s)

    def _watch(self, job_id: str, floor_s: float) -> None:
        self._watched.add(job_id)
        if floor_s:
            self._floors[job_id] = floor_s

    def interval(self) -> float:
        """The least time between two queries of this kernel: the helper's floor, or the class's of a job that
        Slurm has not yet said ended (a kernel's later jobs of another profile are not held to it)."""
        live = [f for i, f in self._floors.items() if i not in self._cache or not self._cache[i][0].finished]
        return max([MIN_POLL_INTERVAL, *live])

    def status(self, job_id: str, floor_s: float = 0.0) -> tuple[JobState, str, int | None, str] | None:
        """(state, reason, exit code, node list) of a job, from the cache unless it is due."""
        with self._lock:
            self._watch(job_id, floor_s)
            floor = self.interval()
            interval = max(self._interval, floor)
            if job_id in self._cache and time.monotonic() - self._last_call < interval:
                return self._cache[job_id]
            if time.monotonic() - self._last_call < floor:
                return self._cache.get(job_id)     # never seen yet: unknown until the next slot
            ids = sorted(i for i in self._watched
                         if i not in self._cache or not self._cache[i][0].finished)
            before = {i: self._cache.get(i, (None,))[0] for i in ids}
            self._last_call = time.monotonic()
            try:
                self._cache.update(self._query(ids))
                changed = any(self._cache.get(i, (None,))[0] != before[i] for i in ids)
            except SlurmError as e:
                self.trouble = f"Slurm does not answer ({str(e)[:120]})"
                changed = False
            self._interval = floor if changed else min(max(self._interval, floor) * 1.5, max(MAX_POLL_INTERVAL, floor))
            return self._cache.get(job_id)

    def times(self, job_id: str) -> tuple[str | None, float | None]:
        """Slurm's (start time, elapsed seconds) of a job, as of the last query; None where unknown."""
        with self._lock:
            return self._times.get(job_id, (None, None))

    def due_in(self) -> float:
        """Seconds until the poller may ask Slurm again."""
        with self._lock:
            return max(0.0, self._last_call + self.interval() - time.monotonic())

    def hurry(self) -> None:
        """Drop the back-off (a log just said the job ended); the minimum interval still holds."""
        with self._lock:
            self._interval = 0.0

    def _query(self, ids: list[str]) -> dict[str, tuple[JobState, str, int | None, str]]:
        if not ids:
            return {}
        self.queries += 1
        sacct_error = ""
        if self._sacct_ok is not False:
            try:
                out = run(["sacct", "-P", "-n", "-X", "-j", ",".join(ids),
                           "--format=JobIDRaw,State,ExitCode,Reason,NodeList,Start,ElapsedRaw"])
                self._sacct_ok, self.trouble = True, ""
                return self._pending_reasons(self._parse(out, sacct=True))
            except SlurmError as e:
                if "accounting storage is disabled" in str(e):
                    self._sacct_ok = False
                else:
                    sacct_error = str(e).splitlines()[0][:160]
        out = run(["squeue", "--me", "-h", "-j", ",".join(ids), "-o", "%i|%T|%r|%N"])
        found = self._parse(out, sacct=False)
        if sacct_error:      # accounting is down for now: squeue knows only the jobs still queued
            self.trouble = f"accounting does not answer ({sacct_error}): states of ended jobs come from their logs"
            return found
        self.trouble = ""
        for i in ids:   # gone from squeue and no accounting: finished, outcome unknown to Slurm
            if i not in found and i in self._cache:
                found[i] = (JobState.COMPLETED, "left the queue; accounting is off, so check the log",
                            None, self._cache[i][3])
        return found

    def _pending_reasons(self, found: dict[str, tuple[JobState, str, int | None, str]]
                         ) -> dict[str, tuple[JobState, str, int | None, str]]:
        """Accounting records a pending job's reason late or as "None" (it is written when the job starts):
        the controller's (squeue's %r, "Resources", "Priority", ...) replaces it, in the same query slot."""
        waiting = sorted(i for i, r in found.items() if r[0] is JobState.PENDING)
        if not waiting:
            return found
        try:
            out = run(["squeue", "--me", "-h", "-j", ",".join(waiting), "-o", "%i|%T|%r|%N"])
        except SlurmError:
            return found            # the state is still right; the reason waits for the next slot
        for job_id, (state, reason, _, _) in self._parse(out, sacct=False).items():
            if job_id in found and state is JobState.PENDING and reason:
                found[job_id] = (found[job_id][0], reason, found[job_id][2], found[job_id][3])
        return found

    def _parse(self, out: str, sacct: bool) -> dict[str, tuple[JobState, str, int | None, str]]:
        found = {}
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) < 4:
                continue
            if sacct:
                job_id, raw_state, exit_code, reason, nodes = parts[:5]
                start, elapsed = (parts[5:7] + ["", ""])[:2]
                self._times[job_id] = (start if start[:1].isdigit() else None,
                                       float(elapsed) if elapsed.isdigit() and start[:1].isdigit() else None)
            else:
                job_id, raw_state, reason, nodes = parts[:4]
                exit_code = ""
            word = raw_state.split()[0] if raw_state.split() else ""
            state = SLURM_STATES.get(word, JobState.FAILED)
            why, rc = _exit_reason(state, exit_code, reason)
            if state is JobState.FAILED and rc == CHECKPOINT_EXIT:
                state, why = JobState.CHECKPOINTED, CHECKPOINT_REASON
            if state is JobState.CANCELLED and " by " in raw_state:
                why = f"cancelled by {_user(raw_state.split(' by ', 1)[1].strip())}"
            if word not in SLURM_STATES:
                why = f"Slurm state {raw_state}"
            found[job_id] = (state, why, rc, "" if nodes in ("None assigned", "(null)") else nodes)
        return found


POLLER = Poller()


def status(record: JobRecord) -> tuple[JobState, str, int | None, str] | None:
    return POLLER.status(record.job_id, record.sacct_interval_s)
