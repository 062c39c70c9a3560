"""The class at a glance, on the workshop day: every student's jobs per course step, from Slurm's
accounting for the course's account or reservation.

    workshop class --profile <site>                 # account and reservation from the site profile
    workshop class --account fsdp-class --watch     # refresh until Ctrl-C

In a notebook: `from workshop.grading.classview import class_table; class_table(profile="<site>")` gives
the same as a DataFrame (one row per student, one column per step).

A job belongs to a step by its name (`workshop-<step>`, what `workshop submit` gives it). A failed
job is explained in one line by `workshop.results.diagnose` from its log (`slurm-<id>.out` in the job's
working directory, which the instructor must be able to read). Slurm is asked at most once per
MIN_POLL_INTERVAL (10 s, the helper's polling budget): a second call within it returns the last answer.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workshop.training.config import ConfigError
from workshop.slurm.pending import pending_words
from workshop.slurm.records import SLURM_STATES, JobState
from workshop.slurm import slurm_backend
from workshop.slurm.slurm_backend import SlurmError, run
from workshop.slurm.steps import STEPS

JOB_PREFIX = "workshop-"
FIELDS = ["JobIDRaw", "User", "JobName", "State", "ExitCode", "WorkDir", "Account", "Reservation", "ReservationId",
          "Reason"]
# a short word per job, so a student's row stays readable; capitals for the ones that need a look
MARKS = {JobState.COMPLETED: "ok", JobState.RUNNING: "run", JobState.PENDING: "wait", JobState.FAILED: "FAIL",
         JobState.CANCELLED: "cancel", JobState.TIMEOUT: "TIME", JobState.OUT_OF_MEMORY: "OOM",
         JobState.NODE_FAIL: "NODE"}


@dataclass
class ClassJob:
    job_id: str
    user: str
    step: str
    state: JobState
    raw_state: str
    exit_code: str
    workdir: str
    diagnosis: str = ""
    reason: str = ""              # a pending job's: why it waits (Slurm's word), see workshop.slurm.pending

    @property
    def log_path(self) -> Path:
        return Path(self.workdir) / f"slurm-{self.job_id}.out"


@dataclass
class ClassView:
    jobs: list[ClassJob] = field(default_factory=list)
    asked_at: float = 0.0           # time.time() of the sacct query behind this view
    selection: str = ""             # what was asked for, in words

    @property
    def students(self) -> list[str]:
        return sorted({j.user for j in self.jobs})

    @property
    def failed(self) -> list[ClassJob]:
        return [j for j in self.jobs if j.state in FAILED_STATES]

    @property
    def waiting(self) -> list[ClassJob]:
        return [j for j in self.jobs if j.state is JobState.PENDING]

    def table(self) -> "Any":
        """A DataFrame: one row per student, one column per step, each cell that student's jobs in order."""
        import pandas as pd

        steps = [s for s in STEPS if any(j.step == s for j in self.jobs)]
        steps += sorted({j.step for j in self.jobs} - set(steps))
        rows = {u: {s: " ".join(MARKS.get(j.state, j.raw_state) for j in self.jobs if j.user == u and j.step == s)
                    for s in steps} for u in self.students}
        df = pd.DataFrame.from_dict(rows, orient="index", columns=steps).rename_axis("student")
        df.attrs["notes"] = [f"{j.user} {j.step} job {j.job_id} {j.state.value}: {j.diagnosis}" for j in self.failed]
        df.attrs["waiting"] = [f"{j.user} {j.step} job {j.job_id} PENDING: {pending_words(j.reason) or 'no reason yet'}"
                               for j in self.waiting]
        return df

    def text(self) -> str:
        df = self.table()
        when = time.strftime("%H:%M:%S", time.localtime(self.asked_at))
        head = f"class at {when} ({self.selection}): {len(self.students)} student(s), {len(self.jobs)} job(s), " \
               f"{len(self.failed)} failed"
        if df.empty:
            return head
        body = df.fillna("").to_string()
        fails = "\n".join(f"  {n}" for n in df.attrs["notes"])
        waits = "\n".join(f"  {n}" for n in df.attrs["waiting"])
        return (f"{head}\n{body}" + (f"\n\nfailed jobs:\n{fails}" if fails else "")
                + (f"\n\nwaiting jobs:\n{waits}" if waits else ""))


FAILED_STATES = {JobState.FAILED, JobState.TIMEOUT, JobState.OUT_OF_MEMORY, JobState.NODE_FAIL}


def one_line_diagnosis(job: ClassJob) -> str:
    """workshop.results.diagnose's first finding for the job's log, in one line; what is in the way otherwise."""
    from workshop.results.diagnose import diagnose

    try:
        if not job.log_path.is_file():
            return f"no log at {job.log_path}"
        findings = diagnose(job.log_path)
    except OSError as e:
        return f"log not readable ({job.log_path}: {e.strerror})"
    if not findings:
        return f"Slurm state {job.raw_state}, exit code {job.exit_code}; the log names no cause"
    first = findings[0]
    return f"{first.title} -> {first.fix}".replace("\n", " ")


def pending_reasons(jobs: list[ClassJob]) -> None:
    """The controller's reason for each waiting job (accounting writes it late, or "None"): one squeue call."""
    if not jobs:
        return
    try:
        out = run(["squeue", "-h", "--states=PENDING", "-j", ",".join(j.job_id for j in jobs), "-o", "%i|%r"])
    except SlurmError:
        return                        # the jobs still show as waiting; why comes with the next refresh
    said = dict(line.strip().split("|", 1) for line in out.splitlines() if "|" in line)
    for job in jobs:
        if said.get(job.job_id, "None") != "None":
            job.reason = said[job.job_id]


def reservation_ids(name: str) -> set[str]:
    """The accounting ids of a reservation (sacct leaves the job's Reservation name empty in Slurm 22.05;
    its ReservationId is kept). A name re-created for each day of a course has several."""
    out = run(["sacctmgr", "-n", "-P", "show", "reservation", "format=id,name"])
    return {i for i, _, n in (line.partition("|") for line in out.splitlines()) if n.strip() == name}


def query(account: str = "", reservation: str = "", since: str = "now-1days", users: list[str] | None = None) -> ClassView:
    """One sacct call for the class's jobs (every user's), filtered to the course's account and reservation."""
    if not account and not reservation:
        raise ValueError("give the course's account or reservation (or a profile that has one): without either, "
                         "the class cannot be told from the cluster's other users")
    cmd = ["sacct", "-P", "-n", "-X", "--allusers", f"--starttime={since}", "--format=" + ",".join(FIELDS)]
    if account:
        cmd.append(f"--accounts={account}")
    if users:
        cmd.append("--user=" + ",".join(users))
    out = run(cmd)
    in_reservation = reservation_ids(reservation) if reservation else set()
    view = ClassView(asked_at=time.time(),
                     selection=", ".join(x for x in (f"account {account}" * bool(account),
                                                     f"reservation {reservation}" * bool(reservation)) if x))
    for line in out.splitlines():
        rec = dict(zip(FIELDS, line.split("|")))
        if len(rec) < len(FIELDS) or not rec["JobName"].startswith(JOB_PREFIX):
            continue
        if reservation and rec["Reservation"] != reservation and rec["ReservationId"] not in in_reservation:
            continue
        word = rec["State"].split()[0] if rec["State"].split() else ""
        job = ClassJob(rec["JobIDRaw"], rec["User"], rec["JobName"].removeprefix(JOB_PREFIX),
                       SLURM_STATES.get(word, JobState.FAILED), rec["State"], rec["ExitCode"], rec["WorkDir"])
        if job.state in FAILED_STATES:
            job.diagnosis = one_line_diagnosis(job)
        if job.state is JobState.PENDING:
            job.reason = "" if rec.get("Reason", "None") == "None" else rec["Reason"]
        view.jobs.append(job)
    pending_reasons(view.waiting)
    view.jobs.sort(key=lambda j: (j.user, int(j.job_id) if j.job_id.isdigit() else 0))
    return view


_cache: dict[tuple[Any, ...], ClassView] = {}
_lock = threading.Lock()


def class_view(account: str = "", reservation: str = "", since: str = "now-1days", profile: str | None = None,
               users: list[str] | None = None) -> ClassView:
    """The class now, asking Slurm at most once per MIN_POLL_INTERVAL for the same selection."""
    if profile:
        from workshop.slurm.profiles import load_profile

        prof = load_profile(profile)
        account, reservation = account or prof.account, reservation or prof.reservation
    key = (account, reservation, since, tuple(users or ()))
    with _lock:
        last = _cache.get(key)
        if last is not None and time.time() - last.asked_at < slurm_backend.MIN_POLL_INTERVAL:
            return last
        _cache[key] = view = query(account, reservation, since, users)
        return view


def class_table(**kwargs: Any) -> "Any":
    """For a notebook cell: the class as a DataFrame (failed jobs' diagnoses in `.attrs["notes"]`)."""
    return class_view(**kwargs).table()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="workshop class", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", help="site profile whose account and reservation select the class")
    p.add_argument("--account", default="", help="the course's Slurm account")
    p.add_argument("--reservation", default="", help="the course's reservation")
    p.add_argument("--since", default="now-1days", help="sacct --starttime (default: now-1days)")
    p.add_argument("--watch", action="store_true", help="refresh every 10 s (the polling budget) until Ctrl-C")
    args = p.parse_args(argv)
    try:
        while True:
            view = class_view(args.account, args.reservation, args.since, args.profile)
            print(view.text(), flush=True)
            if not args.watch:
                return 0
            time.sleep(max(0.0, slurm_backend.MIN_POLL_INTERVAL - (time.time() - view.asked_at)))
            print()
    except (ValueError, ConfigError, SlurmError, subprocess.SubprocessError) as e:
        print(f"workshop class: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
