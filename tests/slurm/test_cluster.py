"""The local Slurm cluster behaves like the small GPU cluster the course assumes."""

from __future__ import annotations

import time
import uuid

import pytest

pytestmark = pytest.mark.slurm


def _out(cluster, name: str) -> str:
    return str(cluster.shared / f"{name}-{uuid.uuid4().hex[:8]}-%j.out")


def _read(pattern: str, jobid: str) -> list[str]:
    with open(pattern.replace("%j", jobid)) as fh:
        return fh.read().split()


def test_two_idle_nodes_with_two_gpus(slurm_cluster):
    deadline = time.monotonic() + 120  # jobs of an earlier test may still be completing (slower on a busy machine)
    while True:
        out = slurm_cluster.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N|%t|%G|%c|%m").stdout
        rows = {r.split("|")[0]: r.split("|")[1:] for r in out.split()}
        if all(st == "idle" for st, *_ in rows.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert sorted(rows) == slurm_cluster.nodes
    for node, (state, gres, cpus, mem) in rows.items():
        assert state == "idle", f"{node}: {state}"
        assert gres.startswith("gpu:2"), f"{node}: {gres}"
        assert int(cpus) == 4
        assert int(mem) >= 4096


def test_gpu_job_sees_two_gpus(slurm_cluster):
    out = _out(slurm_cluster, "gpu")
    jobid = slurm_cluster.sbatch("--gpus=2", "--mem=4G", "-o", out,
                                 "--wrap", "hostname; echo $CUDA_VISIBLE_DEVICES")
    rec = slurm_cluster.wait(jobid)
    assert rec["State"] == "COMPLETED", rec
    host, devices = _read(out, jobid)
    assert host in slurm_cluster.nodes
    assert devices == "0,1"
    if slurm_cluster.accounting == "slurmdbd":
        assert "gres/gpu=2" in rec["AllocTRES"], rec
        assert rec["NodeList"] == host and rec["ExitCode"] == "0:0", rec


def test_two_node_srun(slurm_cluster):
    out = _out(slurm_cluster, "srun")
    jobid = slurm_cluster.sbatch("-N2", "--ntasks-per-node=1", "-o", out, "--wrap", "srun hostname")
    rec = slurm_cluster.wait(jobid)
    assert rec["State"] == "COMPLETED", rec
    assert sorted(_read(out, jobid)) == ["n1", "n2"]


def test_job_as_student(slurm_cluster):
    out = _out(slurm_cluster, "student")
    jobid = slurm_cluster.sbatch("--chdir", str(slurm_cluster.shared), "-o", out,
                                 "--wrap", "id -un", user="student")
    rec = slurm_cluster.wait(jobid)
    assert rec["State"] == "COMPLETED", rec
    assert _read(out, jobid) == ["student"]
    assert rec["User"] == "student", rec


@pytest.mark.parametrize("request_", ["--gpus=9", "--nodes=3", "--time=31", "--mem=100G"])
def test_impossible_request_rejected_at_submit(slurm_cluster, request_):
    proc = slurm_cluster.run("sbatch", "--parsable", request_, "--wrap", "true", check=False, timeout=20)
    assert proc.returncode != 0, f"{request_} was accepted as job {proc.stdout.strip()}"
    assert "error" in proc.stderr.lower()


def test_scancel_is_recorded_as_cancelled(slurm_cluster):
    jobid = slurm_cluster.sbatch("-o", "/dev/null", "--wrap", "sleep 300")
    slurm_cluster.wait_running(jobid)
    slurm_cluster.run("scancel", jobid)
    rec = slurm_cluster.wait(jobid)
    assert rec["State"].startswith("CANCELLED"), rec
