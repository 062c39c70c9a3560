"""Per-user limits against the class's bursts: does each notebook's cell fit what Slurm lets one student queue?

A cell of notebook 03 submits its five or six jobs together (`lab.run_all`), while the student's JupyterLab
session is itself a job. A site's association (`MaxSubmit`, `MaxJobs`, `MaxTRES`, `GrpTRES`) or QOS
(`MaxSubmitJobsPerUser`, `MaxJobsPerUser`, `MaxTRESPerUser`, `MaxTRES`) then rejects the jobs over a submit
limit at sbatch, holds those over a running limit (QOSMaxJobsPerUserLimit) and never starts a job larger than a
per-job limit. `workshop preflight` reads the user's limits with sacctmgr and prints one line per notebook:
fits, or the fix (`[slurm] jobs_per_user`, which `lab.run_all` honours, or a class QOS from the admins).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from workshop.site.checklist import FIX, INFO, OK, Line
from workshop.slurm.profiles import Profile

ASSOC_FORMAT = "Account,Partition,QOS,DefaultQOS,MaxSubmit,MaxJobs,MaxTRES,GrpTRES"
QOS_FORMAT = "Name,MaxSubmitPU,MaxJobsPU,MaxTRESPU,MaxTRES"
_GPU = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")


@dataclass(frozen=True)
class Limits:
    """One source's limits on a user (None: none set). GPUs are read from the TRES strings (gres/gpu=N)."""

    source: str                          # "association workshop" or "QOS class3"
    max_submit: int | None = None        # jobs a user may have queued (pending + running)
    max_jobs: int | None = None          # jobs a user may have running
    max_gpus_user: int | None = None     # GPUs all of a user's running jobs may hold
    max_gpus_job: int | None = None      # GPUs one job may ask for


@dataclass(frozen=True)
class Burst:
    """The most a notebook's student has in the queue at once: one cell's jobs, and their GPUs."""

    notebook: str
    jobs: int
    gpus: int
    largest_job_gpus: int


def _int(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def _gpus(tres: str) -> int | None:
    found = _GPU.search(tres)
    return int(found.group(1)) if found else None


def parse_assoc(text: str, account: str = "") -> tuple[Limits | None, str]:
    """`sacctmgr -n -P show assoc where user=U format=ASSOC_FORMAT`: the association's limits and its default QOS
    (of `account` where given, else the first row; a row with a partition is skipped for the user-wide one)."""
    rows = [r.split("|") for r in text.splitlines() if r.count("|") >= 7]
    rows = [r for r in rows if not account or r[0] == account]
    rows.sort(key=lambda r: bool(r[1]))                 # the association without a partition first
    if not rows:
        return None, ""
    acc, _part, qos, default_qos, submit, jobs, max_tres, grp_tres = rows[0][:8]
    if not default_qos and qos and "," not in qos:
        default_qos = qos                               # the only QOS the association may use is the one jobs get
    return Limits(f"association {acc}", _int(submit), _int(jobs), _gpus(grp_tres), _gpus(max_tres)), default_qos


def parse_qos(text: str, name: str) -> Limits | None:
    """`sacctmgr -n -P show qos format=QOS_FORMAT`: the named QOS's per-user limits, None when it is not there."""
    for row in text.splitlines():
        cells = row.split("|")
        if len(cells) >= 5 and cells[0] == name:
            return Limits(f"QOS {name}", _int(cells[1]), _int(cells[2]), _gpus(cells[3]), _gpus(cells[4]))
    return None


def bursts(profile: Profile) -> list[Burst]:
    """Each notebook's largest cell, as a student submits it on this site (in instructor-run mode the costly
    jobs are the instructor's, linked, not queued)."""
    from workshop.site.budget import job_cost, notebook_runs
    from workshop.site.schedule import WAVES

    out = []
    for nb, runs in notebook_runs(profile).items():
        best = Burst(nb, 0, 0, 0)
        for wave in WAVES.get(nb, [list(runs)]):
            costs = [job_cost(nb, name, runs[name], profile) for name in wave]
            costs = [c for c in costs if not (profile.instructor_jobs and c.costly)]
            gpus = sum(c.gpus for c in costs)
            if (len(costs), gpus) > (best.jobs, best.gpus):
                best = Burst(nb, len(costs), gpus, max(c.gpus for c in costs))
        out.append(best)
    return out


def _least(limits: list[Limits], attr: str) -> tuple[int, str] | None:
    found = [(getattr(x, attr), x.source) for x in limits if getattr(x, attr) is not None]
    return min(found) if found else None


def burst_line(burst: Burst, limits: list[Limits], profile: Profile) -> Line:
    """Whether one notebook's cell fits the user's limits; the fix where it does not."""
    session = 1 if profile.session_partition else 0        # the JupyterLab session is one of the user's jobs
    cap = profile.jobs_per_user
    queued = (min(burst.jobs, cap) if cap else burst.jobs) + session
    label = f"limits: {burst.notebook}"
    per_job = _least(limits, "max_gpus_job")
    if per_job and burst.largest_job_gpus > per_job[0]:
        return Line(label, FIX, f"a job of {burst.largest_job_gpus} GPUs, {per_job[1]} allows {per_job[0]} a job: it "
                    "never starts. Fix: ask your admins for a class QOS without that MaxTRES (or a larger one)")
    submit = _least(limits, "max_submit")
    if submit and queued > submit[0]:
        keep = submit[0] - session
        return Line(label, FIX, f"a cell submits {burst.jobs} jobs at once{' beside the session job' if session else ''}, "
                    f"{submit[1]} lets a user queue {submit[0]}: sbatch would reject the rest. Fix: set [slurm] "
                    f"jobs_per_user = {keep} (lab.run_all then keeps {keep} queued at once), or ask your admins for a "
                    f"class QOS with MaxSubmitJobsPerUser >= {burst.jobs + session}")
    held = []
    for what, got, lim in (("jobs", queued, _least(limits, "max_jobs")), ("GPUs", burst.gpus, _least(limits, "max_gpus_user"))):
        if lim and got > lim[0]:
            held.append(f"{what} ({lim[1]}: {lim[0]})")
    fits = f"{burst.jobs} job(s), {burst.gpus} GPU(s) at once" + (f", at most {cap} queued (jobs_per_user)" if cap else "")
    if held:
        return Line(label, INFO, f"{fits}: more {' and '.join(held)} than may run at once, the rest wait their turn "
                    "(the schedule does not count it); a class QOS would lift it")
    return Line(label, OK, fits)


def enforced(config: str) -> bool:
    """Whether slurmctld applies association and QOS limits (`scontrol show config`'s AccountingStorageEnforce holds
    limits or safe); without, the limits are accounting's words only and a burst over them still runs."""
    found = re.search(r"AccountingStorageEnforce\s*=\s*(\S+)", config)
    return bool(found) and bool({"limits", "safe"} & set(found.group(1).lower().split(",")))


def unenforced(line: Line) -> Line:
    """A FIX that the cluster would not act on today: said as a fact, with the fix for when it does."""
    if line.status != FIX:
        return line
    return Line(line.check, INFO, f"not enforced here (AccountingStorageEnforce has no limits), else: {line.text}")


def limit_lines(profile: Profile, user: str, sacctmgr: Callable[[list[str]], str]) -> list[Line]:
    """The user's association and QOS limits (sacctmgr), then one line per notebook (facts, not fixes, where
    slurmctld does not enforce limits)."""
    try:
        assoc, default_qos = parse_assoc(sacctmgr(["sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={user}",
                                                   f"format={ASSOC_FORMAT}"]), profile.account)
        qos_name = profile.qos or default_qos
        qos = parse_qos(sacctmgr(["sacctmgr", "-n", "-P", "show", "qos", f"format={QOS_FORMAT}"]), qos_name) \
            if qos_name else None
    except RuntimeError as e:
        return [Line("limits", INFO, f"not read: sacctmgr does not answer ({str(e)[:160]})")]
    limits = [x for x in (assoc, qos) if x is not None]
    said = [f"{x.source}: " + ", ".join(f"{k} {v}" for k, v in (("MaxSubmit", x.max_submit), ("MaxJobs", x.max_jobs),
            ("GPUs a user", x.max_gpus_user), ("GPUs a job", x.max_gpus_job)) if v is not None) for x in limits]
    head = Line("limits", INFO, "; ".join(s if not s.endswith(": ") else s + "no limits" for s in said) or
                f"no association or QOS found for {user}")
    lines = [burst_line(b, limits, profile) for b in bursts(profile)]
    try:
        applied = enforced(sacctmgr(["scontrol", "show", "config"]))
    except RuntimeError:
        applied = True              # not known: judged as a site that enforces them
    return [head] + (lines if applied else [unenforced(ln) for ln in lines])
