"""`workshop budget --replay` (workshop.site.replay): the throwaway cluster is shaped like the profile and kept
to itself (its own ports, folder and munge socket, loopback only), a job asks Slurm for what the course's job asks,
scaled; and, as root where Slurm is installed, a small replay runs end to end beside the shared test cluster,
which it leaves as it found it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from workshop.site.replay import Node, Ran, comparison, gres_conf, replay_days, sbatch_args, shape, slurm_conf
from workshop.site.schedule import NotebookDay, SimJob
from workshop.slurm.profiles import load_profile

SITE = load_profile("example-hpc")
ROOT = Path(__file__).resolve().parent.parent


def test_the_cluster_is_the_example_sites_partitions() -> None:
    """4 V100 nodes of 4 GPUs, 32 cores (4 x cpus_per_proc 8), 180G; 8 A100 nodes of 8 GPUs, 64 cores, 1000G."""
    nodes = shape(SITE, {"v100": (4, 4), "a100": (8, 8)})
    assert len(nodes) == 12 and nodes[0] == Node("rv100-1", "gpu_v100", 32, 184320, 4)
    assert nodes[-1] == Node("ra100-8", "gpu_a100", 64, 1024000, 8)


def test_its_config_keeps_to_its_own_ports_folder_and_munge_socket(tmp_path: Path) -> None:
    nodes = shape(SITE, {"v100": (4, 4), "a100": (8, 8)})
    conf = slurm_conf(tmp_path, 26817, nodes)
    assert "SlurmctldPort=26817" in conf and f"AuthInfo=socket={tmp_path}/munge/munge.socket" in conf
    assert "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny" in conf and "ClusterName=replay" in conf
    ports = [int(p) for p in re.findall(r"NodeAddr=127\.0\.0\.1 Port=(\d+)", conf)]
    assert ports == list(range(26917, 26929))                      # every node on loopback, none on 16817/1700x
    assert all(str(tmp_path) in line for line in conf.splitlines() if "=/" in line and "MailProg" not in line)
    assert "PartitionName=gpu_v100 Nodes=rv100-1,rv100-2,rv100-3,rv100-4 " in conf
    gres = gres_conf(tmp_path, nodes)
    assert f"NodeName=ra100-8 Name=gpu File={tmp_path}/gpu/ra100-8/nvidia[0-7]" in gres
    assert os.readlink(tmp_path / "gpu" / "ra100-8" / "nvidia7") == "/dev/null"


def test_a_job_asks_what_the_course_job_asks_scaled(tmp_path: Path) -> None:
    """A 4-GPU strategies job on a V100 node, 20-minute limit, 9 minutes long, at 1 s per minute: 4 tasks of 8
    cores, 4 x 40G, a 1-minute limit (20 s is under Slurm's minute), a sleep of 9 s, as the student's user."""
    job = SimJob("ddp", "v100", 1, 4, 540, 1200, notebook="03_sharding_strategies")
    args = sbatch_args(job, SITE, "wsreplay01", tmp_path / "00001", 1.0)
    assert args[:9] == ["sbatch", "--parsable", "--uid=wsreplay01", "--partition=gpu_v100", "--nodes=1",
                        "--ntasks-per-node=4", "--cpus-per-task=8", "--output=/dev/null", "--time=1"]
    assert "--gres=gpu:4" in args and "--mem=163840M" in args
    assert args[-1] == (f"--wrap=date +%s.%N > {tmp_path}/00001.start; sleep 9.000; date +%s.%N > {tmp_path}/00001.tmp && "
                        f"mv {tmp_path}/00001.tmp {tmp_path}/00001.end")


def test_makespan_and_wait_by_hand() -> None:
    """A slot starting at 600 s: jobs submitted 610 and 620, started 610 and 700, ended 900 and 1000: makespan
    1000 - 600 = 400 s, longest wait 700 - 620 = 80 s; beside a model of 360 s: -10 %."""
    a, b = (SimJob(n, "p", 1, 1, 1, 1, notebook="X") for n in "ab")
    got = replay_days([Ran(a, 610, 610, 900), Ran(b, 620, 700, 1000)], ["X"], {"X": 600})
    assert got == {"X": (400, 80)}
    table = comparison([NotebookDay("X", 45, 2, 360, 0)], got)
    assert table.splitlines()[-1] == "| X | 45 | 2 | 6.0 | 6.7 | -10% | 0.0 | 1.3 |"


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("slurmctld"), reason="the replay runs as root, with Slurm")
def test_the_guides_replay_runs_beside_the_shared_cluster_and_leaves_nothing(tmp_path: Path) -> None:
    """docs/instructor.md's `--replay` line as written, at 0.5 s per minute (WORKSHOP_REPLAY_SCALE; about 2.5 minutes):
    every notebook's row; each replayed makespan no shorter than the model's (less 2 minutes) and at most 30 % longer
    (5 minutes for a short one): Slurm's 0.5-1 s from one job's end to the next one's start is 1-2 minutes a job here
    (at 0.3 s per minute, 02 came out 18 % longer; at 1 s per minute, the guide's table, 4 %); afterwards no daemon of
    it runs and its folder is gone."""
    from tests.test_docs_commands import fenced, line_with, sh

    line = line_with(fenced(ROOT / "docs" / "instructor.md", "## The day"), "--replay")
    assert line == "workshop budget --profile example-hpc --students 20 --replay"
    proc = sh(line, tmp_path, {"WORKSHOP_REPLAY_SCALE": "0.5"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.split("The day replayed on Slurm (12 nodes, 200 jobs of 20 student users, instructor-run mode", 1)[1]
    rows = {r.split(" | ")[0].strip("| "): r.split(" | ") for r in out.splitlines() if r.startswith("| 0")}
    assert list(rows) == ["01_baseline", "02_fsdp_single_gpu", "03_sharding_strategies", "04_multi_gpu", "05_multi_node"]
    for nb in ("01_baseline", "02_fsdp_single_gpu", "04_multi_gpu", "05_multi_node"):
        model, replayed = float(rows[nb][3]), float(rows[nb][4])
        assert model - 2 <= replayed <= model + max(5.0, 0.3 * model), rows[nb]
    left = subprocess.run(["pgrep", "-af", "workshop-replay-"], capture_output=True, text=True).stdout
    assert left == "" and not list(Path("/tmp").glob("workshop-replay-*"))


def marked(folder: Path) -> list[int]:
    """The pids whose environment names the replay cluster's slurm.conf in `folder` (its daemons and job steps)."""
    mark = f"SLURM_CONF={folder / 'slurm.conf'}".encode()
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if mark in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_a_killed_replay_leaves_no_daemon_and_the_next_one_sweeps_its_folder(tmp_path: Path) -> None:
    """A replay killed before its `down()` (a CI run stopped mid-test once left its slurmctld holding the next run's
    ports): each daemon dies with the process that started it (`Cluster.start_daemon`, setpriv's parent-death signal);
    what no signal reaches (a job's step whose slurmd is gone) dies, and its folder goes, when the next replay starts
    (`sweep_stale`). Here a daemon is a `sleep`, started as the cluster starts its daemons."""
    import signal
    import sys
    import time

    from workshop.site import replay

    killed = tmp_path / "workshop-replay-killed"
    (killed / "log").mkdir(parents=True)
    starter = "\n".join([
        "import os, sys, time", "from pathlib import Path", "from workshop.site.replay import OWNER, Cluster, start_ticks",
        "folder = Path(sys.argv[1])", "Cluster(folder, 26617, []).start_daemon(['sleep', '600'], 'd.out')",
        "(folder / OWNER).write_text(f'{os.getpid()} {start_ticks(os.getpid())}')   # as up() writes it",
        "print('up', flush=True)", "time.sleep(600)"])
    proc = subprocess.Popen([sys.executable, "-c", starter, str(killed)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    [daemon] = marked(killed)
    step = subprocess.Popen(["sleep", "600"], env={**os.environ, "SLURM_CONF": str(killed / "slurm.conf")},
                            start_new_session=True)     # a job's step: started by no replay process of ours
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        end = time.monotonic() + 10
        while daemon in marked(killed) and time.monotonic() < end:
            time.sleep(0.1)
        assert marked(killed) == [step.pid], step.poll()  # the daemon died with its starter; the step did not
        alive = tmp_path / "workshop-replay-alive"       # a replay running now (this process started it)
        alive.mkdir()
        (alive / replay.OWNER).write_text(f"{os.getpid()} {replay.start_ticks(os.getpid())}")
        starting = tmp_path / "workshop-replay-starting"     # one starting now: no owner file yet
        starting.mkdir()
        replay.sweep_stale(tmp_path, keep=tmp_path / "workshop-replay-new")
        assert step.wait(10) == -signal.SIGKILL and not killed.exists()
        assert alive.exists() and starting.exists()
    finally:                                             # a failure here leaves no sleep behind
        for pid in marked(killed):
            os.kill(pid, signal.SIGKILL)
