"""Can a job submit a job? What a JupyterLab session does, checked the week before: `workshop preflight` submits a
tiny job to the session partition that itself runs `sbatch --wait` of a second tiny job.

The course's design is that a student's JupyterLab session (a Slurm job on a CPU node) calls sbatch, squeue and
sacct. Many sites do not allow that: no Slurm client or slurm.conf on the compute nodes, a partition whose
`AllocNodes` leaves them out, a firewall between the nodes and slurmctld's port. A login node's preflight never
meets any of these; this check does, from where the sessions run, with the session's own scrubbed environment
(workshop.slurm.slurm_backend.scrubbed_env: no SLURM_* option of the surrounding job reaches the inner sbatch).
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

from workshop.site.checklist import FIX, INFO, OK, Line
from workshop.slurm.profiles import Profile

MARK = "WORKSHOP-SUBMIT"
OUTER_TIME = "00:05:00"
INNER_TIME = "00:01:00"
LABEL = "sessions can submit"
# What the inner sbatch says, and what to fix for it (first match wins).
CAUSES: list[tuple[str, str]] = [
    (r"command not found|No such file or directory.*sbatch", "the session nodes have no Slurm client: install "
     "slurm-client there (or put it on PATH in the profile's [env] setup)"),
    (r"Could not establish a configuration source|slurm\.conf|configuration file",
     "the session nodes have no slurm.conf (or no configless `SlurmctldHost`): install the cluster's client config "
     "there, or run slurmctld configless and slurmd with --conf-server"),
    (r"Unable to contact slurm controller|Socket timed out|Connection refused|connect failure",
     "the session nodes cannot reach slurmctld (its SlurmctldPort): open the port from the compute nodes to the "
     "controller"),
    (r"AllocNodes|not allowed|Access/permission denied|Invalid account or account/partition",
     "Slurm refuses submission from the session nodes: add them to the partitions' AllocNodes (or allow the account)"),
    (r"[Mm]unge|Authentication|credential", "munge on the session nodes does not authenticate to slurmctld: the same "
     "munge key and a running munged on every compute node"),
]


def outer_script(profile: Profile, partition: str, folder: Path) -> str:
    """The outer job: the session's environment (the profile's variables, SLURM_* options scrubbed as a notebook
    scrubs them), then `sbatch --wait` of an inner job that prints its host."""
    heads = [f"--job-name=workshop-preflight-submit", f"--partition={partition}", f"--time={OUTER_TIME}",
             "--ntasks=1", "--cpus-per-task=1", f"--output={folder / 'outer.log'}"]
    heads += [f"--{k}={v}" for k, v in (("account", profile.account), ("qos", profile.qos),
                                         ("reservation", profile.session_reservation)) if v]
    inner = [f"--partition={partition}", f"--time={INNER_TIME}", "--ntasks=1", "--cpus-per-task=1",
             f"--output={folder / 'inner.log'}", "--job-name=workshop-preflight-inner"]
    inner += [f"--{k}={v}" for k, v in (("account", profile.account), ("qos", profile.qos)) if v]
    lines = ["#!/bin/bash", *(f"#SBATCH {h}" for h in heads), *profile.setup]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in profile.env.items()]
    lines += [
        "for v in $(compgen -e); do case $v in SLURM_CONF) ;; SLURM_*|SBATCH_*|SRUN_*|SALLOC_*) unset \"$v\";; esac; done",
        f'echo "{MARK} host=$(hostname)"',
        f"out=$(sbatch --wait --parsable {' '.join(inner)} --wrap 'echo inner on $(hostname)' 2>&1); rc=$?",
        f'printf "%s\\n" "$out" | sed "s/^/{MARK} out: /"',
        f'echo "{MARK} rc=$rc"',
    ]
    return "\n".join(lines) + "\n"


def verdict(log: str, outer_id: str, inner_log: str) -> Line:
    """The line for the outer job's log: ok with both hosts, or the cause and its fix."""
    host = re.search(rf"^{MARK} host=(\S+)", log, re.M)
    rc = re.search(rf"^{MARK} rc=(\d+)", log, re.M)
    said = " ".join(re.findall(rf"^{MARK} out: (.*)$", log, re.M)).strip()
    where = f"job {outer_id} on {host.group(1) if host else '?'}"
    if rc and rc.group(1) == "0":
        inner_id = said.split(";")[0].split()[-1] if said else "?"
        ran = re.search(r"inner on (\S+)", inner_log)
        return Line(LABEL, OK, f"{where} submitted job {inner_id} with sbatch --wait; it ran on "
                    f"{ran.group(1) if ran else '?'} and ended 0")
    for pattern, fix in CAUSES:
        if re.search(pattern, said + log):
            return Line(LABEL, FIX, f"{where}: sbatch inside the job failed (exit {rc.group(1) if rc else '?'}): "
                        f"{said[:200] or 'no output'}. Fix: {fix}")
    return Line(LABEL, FIX, f"{where}: sbatch inside the job failed (exit {rc.group(1) if rc else '?'}): "
                f"{said[:200] or 'no output'}. Fix: ask your admins whether jobs may submit jobs (AllocNodes, the "
                "client config, a firewall to slurmctld)")


def submit_from_job_line(profile: Profile, jobs_dir: Path, timeout: float) -> Line:
    """Submit the outer job to the session partition, wait for its last line, and judge it."""
    from workshop.slurm.slurm_backend import SlurmError, run

    if not profile.session_partition:
        return Line(LABEL, INFO, "no [ood] partition: where sessions run is not named, so not checked")
    partition = profile.partitions[profile.session_partition].name
    folder = (jobs_dir / f"submit-check-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o1777)            # the job writes here as the user who runs preflight
    script = folder / "outer.sh"
    script.write_text(outer_script(profile, partition, folder))
    try:
        outer_id = run(["sbatch", "--parsable", str(script)], cwd=str(folder)).strip().split(";")[0]
    except SlurmError as e:
        return Line(LABEL, FIX, f"the outer job was not submitted: {e}")
    log = folder / "outer.log"
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        text = log.read_text(errors="replace") if log.exists() else ""
        if re.search(rf"^{MARK} rc=", text, re.M):
            inner = folder / "inner.log"
            return verdict(text, outer_id, inner.read_text(errors="replace") if inner.exists() else "")
        time.sleep(1.0)
    try:
        run(["scancel", outer_id])
    except SlurmError:
        pass                        # it may have ended meanwhile; the line below says what was seen
    return Line(LABEL, FIX, f"job {outer_id} gave no answer in {timeout:.0f} s (still queued, or its sbatch --wait "
                f"still waits); cancelled. Fix: run preflight when {partition} has room (or with --timeout); read "
                f"{log}")
