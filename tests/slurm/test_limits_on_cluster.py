"""The admin's checks that a login node cannot make, on the repo's test cluster (issue 53): a QOS with
MaxSubmitJobsPerUser=3 for a user of its own (never `student` or root, whom other tests use: only added, never
removed), named by preflight with its fix; and a job that submits a job (`sbatch --wait` inside a job on the
session partition), which passes, and fails where the job's Slurm client cannot reach slurmctld."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.slurm.conftest import NO_TRAINING_SETUP
from tests.slurm.test_preflight_on_cluster import here  # noqa: F401 - the fixture: a fresh folder every user writes
from workshop.site.limits import limit_lines
from workshop.site.preflight import slurm
from workshop.site.submit_check import submit_from_job_line
from workshop.slurm.profiles import load_profile

pytestmark = pytest.mark.slurm
QOS, USER = "workshop-test-max3", "qos3student"
CI = load_profile("ci")


@pytest.fixture(scope="module")
def limited(cluster) -> str:
    """The QOS and its user, made once (idempotent: a second session finds them)."""
    if QOS not in cluster.run("sacctmgr", "-n", "-P", "show", "qos", "format=Name").stdout.split():
        cluster.run("sacctmgr", "-i", "add", "qos", QOS, "MaxSubmitJobsPerUser=3")
    if not cluster.run("sacctmgr", "-n", "-P", "show", "assoc", f"where", f"user={USER}", "format=User").stdout.strip():
        cluster.run("sacctmgr", "-i", "add", "user", USER, "account=workshop", f"qos=normal,{QOS}", f"defaultqos={QOS}")
    return USER


def test_preflight_names_a_submit_limit_that_notebook_03s_cell_exceeds(limited: str) -> None:
    lines = {ln.check: ln for ln in limit_lines(CI, limited, slurm)}
    assert lines["limits"].text == f"association workshop: no limits; QOS {QOS}: MaxSubmit 3"
    line = lines["limits: 03_sharding_strategies"]        # the shared cluster enforces none (others' tests rely on it)
    assert line.status == "-" and line.text.startswith("not enforced here (AccountingStorageEnforce has no limits)"), line
    assert f"QOS {QOS} lets a user queue 3" in line.text and "jobs_per_user = 2" in line.text
    assert lines["limits: 01_baseline"].status == "ok"
    capped = {ln.check: ln for ln in limit_lines(dataclasses.replace(CI, jobs_per_user=2), limited, slurm)}
    assert capped["limits: 03_sharding_strategies"].status == "ok"
    assert not [ln for ln in capped.values() if ln.status != "ok" and ln.check != "limits"]


def test_a_job_on_the_session_partition_submits_a_job(cluster, here: Path) -> None:
    line = submit_from_job_line(CI, here, timeout=120)
    assert line.status == "ok", line
    assert re.fullmatch(r"job \d+ on n[12] submitted job \d+ with sbatch --wait; it ran on n[12] and ended 0", line.text)


def test_a_job_whose_slurm_client_cannot_reach_slurmctld_fails_with_the_fix(cluster, here: Path) -> None:
    """The session's environment points its client at a controller port nothing listens on (a firewalled
    slurmctld, as seen from the node): the outer job runs, its sbatch fails, the line names the port to open."""
    conf = Path(cluster.env["SLURM_CONF"]).read_text()
    (here / "slurm.conf").write_text(re.sub(r"(?m)^SlurmctldPort=\d+", "SlurmctldPort=16999", conf))
    profile = dataclasses.replace(CI, env={**CI.env, "SLURM_CONF": str(here / "slurm.conf")})
    line = submit_from_job_line(profile, here, timeout=180)
    assert line.status == "FIX", line
    assert "sbatch inside the job failed" in line.text and "cannot reach slurmctld" in line.text, line.text


def test_run_all_keeps_a_cell_within_the_profiles_cap(cluster, here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """jobs_per_user = 2 and a cell of three jobs: the third is submitted only once one of the first two has
    ended (sacct's Submit and End, to the second), and all three complete.

    The cap is the notebook's (Lab.run_all) and Slurm's: the jobs are real batch scripts on the cluster, whose
    site setup makes the launch line train nothing (NO_TRAINING_SETUP; issue 51: three BLOOM
    imports, ~11 CPU-s, that this test never read; the baseline's training on the cluster is
    test_jobs_on_cluster's)."""
    from workshop.student.lab import Lab

    monkeypatch.chdir(here)
    stand_in = dataclasses.replace(CI, jobs_per_user=2, setup=(*CI.setup, NO_TRAINING_SETUP))
    lab = Lab(stand_in, jobs_dir=here / "jobs", quiet=True)
    group = lab.run_all({f"{n} steps": dict(step="baseline", max_steps=n, eval_generate=False) for n in (1, 2, 3)})
    records = {name: cluster.wait(job.job_id, timeout=120) for name, job in group.items()}
    assert {r["State"] for r in records.values()} == {"COMPLETED"}
    times = {name: cluster.job_record(job.job_id, "JobID,Submit,End") for name, job in group.items()}
    first_end = min(times["1 steps"]["End"], times["2 steps"]["End"])
    assert times["3 steps"]["Submit"] >= first_end > max(times["1 steps"]["Submit"], times["2 steps"]["Submit"]), times
