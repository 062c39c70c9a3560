"""The day replayed on real Slurm: `workshop budget --profile <site> --students N --replay` (as root).

The schedule (workshop.site.schedule) is a model of Slurm written by hand. The replay asks Slurm itself: a
throwaway cluster on this machine shaped like the site's partitions (one slurmd per node, Slurm's MULTIPLE_SLURMD;
the nodes' cores, memory and GPUs advertised through `SlurmdParameters=config_overrides`, GPUs as GRES files that
are /dev/null), the class's jobs as `sleep`s of their predicted durations scaled in time (`scale` seconds per
minute of the day), submitted by N student users (`sbatch --uid`, each from their own account) after each one's
reading time, a wave after the student's previous wave ended, slots one after another (what has not ended carries
over). Slurm's backfill then decides who waits. Each slot's makespan and longest wait print beside the model's.

It never touches another cluster: its own state folder, its own ports (`--replay-port`), its own munge socket,
every daemon on 127.0.0.1, and it is torn down at the end (the student users stay: `wsreplayNN`, no home).

What it does not replay, said with the figures: time limits (Slurm counts whole minutes; a scaled limit under a
minute becomes one, so backfill plans with 1-minute limits), the course's real batch scripts (a job is a sleep
asking the same nodes, GPUs, cores and memory), and QOS limits and fair-share (no slurmdbd here; the example
profile states neither).
"""

from __future__ import annotations

import dataclasses
import math
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from typing import Any

from workshop.slurm.profiles import Profile, mem_mb

SimJob = Any                   # workshop.site.schedule.SimJob (not imported: the schedule imports this module)

REPLAY_PORT = 26817            # slurmctld; the nodes take REPLAY_PORT + 100 + i (the test cluster uses 16817, 17001...)
USER_PREFIX = "wsreplay"


@dataclass(frozen=True)
class Node:
    name: str
    partition: str              # the Slurm partition name
    cpus: int
    mem_mb: int
    gpus: int


def shape(profile: Profile, sizes: dict[str, tuple[int, int]]) -> list[Node]:
    """The nodes of each partition the class's jobs use: the profile's count, GPUs, cores (GPUs x cpus_per_proc) and
    memory (mem_per_node)."""
    nodes = []
    for key, (count, gpus) in sizes.items():
        part = profile.partitions[key]
        cpus = max(1, gpus) * part.cpus_per_proc
        mem = mem_mb(part.mem_per_node) if part.mem_per_node else 1024 * cpus
        nodes += [Node(f"r{key}-{i + 1}", part.name or key, cpus, mem, gpus) for i in range(count)]
    return nodes


def slurm_conf(folder: Path, port: int, nodes: list[Node]) -> str:
    """slurm.conf of the throwaway cluster: the test cluster's tested settings (tests/slurm/cluster.sh, FINDINGS.md),
    its own ports, folders and munge socket; accounting none, backfill scheduling on every event."""
    lines = [f"ClusterName=replay", "SlurmctldHost=localhost(127.0.0.1)", f"SlurmctldPort={port}",
             "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", f"AuthInfo=socket={folder}/munge/munge.socket",
             "CredType=cred/munge", "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny",
             f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool/%n",
             f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd-%n.pid",
             f"SlurmctldLogFile={folder}/log/slurmctld.log", f"SlurmdLogFile={folder}/log/slurmd-%n.log",
             "MailProg=/bin/true", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
             "ReturnToService=2", "MinJobAge=600", "OverTimeLimit=0", "KillWait=2", "InactiveLimit=0",
             "SchedulerType=sched/backfill",
             "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=1,bf_interval=1,"
             "bf_resolution=60,default_queue_depth=1000,bf_max_job_test=1000",
             "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory", "EnforcePartLimits=ALL",
             "GresTypes=gpu", "SlurmdParameters=config_overrides", "AccountingStorageType=accounting_storage/none",
             "JobCompType=jobcomp/none", "MaxJobCount=100000"]
    for i, n in enumerate(nodes):
        lines.append(f"NodeName={n.name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port + 100 + i} "
                     f"CPUs={n.cpus} RealMemory={n.mem_mb}" + (f" Gres=gpu:{n.gpus}" if n.gpus else "") + " State=UNKNOWN")
    for part in dict.fromkeys(n.partition for n in nodes):
        names = ",".join(n.name for n in nodes if n.partition == part)
        lines.append(f"PartitionName={part} Nodes={names} MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def gres_conf(folder: Path, nodes: list[Node]) -> str:
    """Fake GPUs: each a symlink to /dev/null (a character device, which is all slurmd checks)."""
    out = ["AutoDetect=off"]
    for n in nodes:
        if n.gpus:
            (folder / "gpu" / n.name).mkdir(parents=True, exist_ok=True)
            for i in range(n.gpus):
                link = folder / "gpu" / n.name / f"nvidia{i}"
                if not link.is_symlink():
                    link.symlink_to("/dev/null")
            out.append(f"NodeName={n.name} Name=gpu File={folder}/gpu/{n.name}/nvidia[0-{n.gpus - 1}]")
    return "\n".join(out) + "\n"


class Cluster:
    """The throwaway cluster's daemons, started by this process and stopped by it (by their own pids)."""

    def __init__(self, folder: Path, port: int, nodes: list[Node]) -> None:
        self.folder, self.port, self.nodes = folder, port, nodes
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}

    def start_daemon(self, argv: list[str], log: str) -> None:
        """A daemon that dies with this process (setpriv's parent-death signal): a replay killed before its `down()`
        leaves no daemon holding its ports."""
        out = open(self.folder / "log" / log, "ab")
        argv = ["setpriv", "--pdeathsig", "KILL", *(argv[1:] if argv[0] == "setpriv" else argv)]
        self.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=self.env,
                                           cwd="/", start_new_session=True))

    def up(self, wait_s: float = 60) -> None:
        f = self.folder
        sweep_stale(f.parent, keep=f)
        (f / OWNER).write_text(f"{os.getpid()} {start_ticks(os.getpid())}")
        for d in ("state", "spool", "log", "jobs"):
            (f / d).mkdir(parents=True, exist_ok=True)
        (f / "jobs").chmod(0o1777)
        (f / "slurm.conf").write_text(slurm_conf(f, self.port, self.nodes))
        (f / "gres.conf").write_text(gres_conf(f, self.nodes))
        m = f / "munge"                 # munged runs as munge: its key, socket, log and seed are munge's
        m.mkdir(exist_ok=True)
        shutil.chown(m, "munge", "munge")
        key = m / "munge.key"
        key.write_bytes(os.urandom(1024))
        shutil.chown(key, "munge", "munge")
        key.chmod(0o400)
        f.chmod(0o755)
        self.start_daemon(["setpriv", "--reuid=munge", "--regid=munge", "--init-groups", "munged", "--foreground",
                     f"--key-file={key}", f"--socket={m}/munge.socket", f"--pid-file={m}/munged.pid",
                     f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"], "munged.out")
        self._until(lambda: (m / "munge.socket").exists(), wait_s, "munged")
        self.start_daemon(["slurmctld", "-D", "-c"], "slurmctld.out")
        self._until(lambda: "is UP" in self.slurm("scontrol", "ping", check=False), wait_s, "slurmctld")
        for n in self.nodes:
            self.start_daemon(["slurmd", "-D", "-N", n.name], f"slurmd-{n.name}.out")
        self._until(self._nodes_idle, wait_s, "the slurmds")

    def _nodes_idle(self) -> bool:
        states = self.slurm("sinfo", "-h", "-N", "-o", "%N %t", check=False).split()
        return len(states) == 2 * len(self.nodes) and all(s == "idle" for s in states[1::2])

    def _until(self, ready, wait_s: float, what: str) -> None:
        end = time.monotonic() + wait_s
        while not ready():
            if time.monotonic() > end or any(p.poll() is not None for p in self.procs):
                self.down()
                raise RuntimeError(f"the replay cluster's {what} did not start: see {self.folder}/log")
            time.sleep(0.3)

    def slurm(self, *cmd: str, check: bool = True) -> str:
        from workshop.slurm.slurm_backend import run

        return run(list(cmd), env=self.env, timeout=30, check=check)   # its SlurmError is a RuntimeError

    def down(self) -> None:
        """Cancel every job and wait for the queue to empty, then stop what up() started (slurmds first, munged
        last), then whatever of its jobs outlived them: a slurmstepd whose slurmd is gone waits for it forever."""
        if len(self.procs) > 1 and self.procs[1].poll() is None:          # slurmctld answers: empty its queue
            for part in dict.fromkeys(n.partition for n in self.nodes):
                self.slurm("scancel", "--full", f"--partition={part}", check=False)
            end = time.monotonic() + 20
            while self.slurm("squeue", "-h", "-o", "%i", check=False).strip() and time.monotonic() < end:
                time.sleep(0.5)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        self.procs = []
        self._kill_leftovers()

    def _kill_leftovers(self) -> None:
        kill_marked(self.folder)


OWNER = "owner"     # in a replay's folder: the pid and start tick of the process that started its cluster


def start_ticks(pid: int) -> str:
    """A process's start time in clock ticks since boot (/proc/PID/stat field 22): a reused pid has another."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def kill_marked(folder: Path) -> None:
    """SIGKILL the processes whose environment names this cluster's slurm.conf (its daemons, started with it, and
    its jobs' steps and scripts: nothing else carries that path)."""
    mark = f"SLURM_CONF={folder / 'slurm.conf'}".encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if mark in (proc / "environ").read_bytes().split(b"\0") and int(proc.name) != os.getpid():
                os.kill(int(proc.name), 9)
        except (OSError, ValueError):
            continue


def sweep_stale(tmp: Path, keep: Path) -> None:
    """Replays whose starting process is gone (killed before its `down()`): what is left of them killed, their
    folders removed, so that a killed run's cluster never holds the next one's ports. A folder with no owner file is
    another replay starting now, or one from before owners were written: left alone."""
    for folder in tmp.glob("workshop-replay-*"):
        try:
            pid, ticks = (folder / OWNER).read_text().split()
        except (OSError, ValueError):
            continue
        try:
            alive = start_ticks(int(pid)) == ticks
        except (OSError, ValueError):
            alive = False
        if folder != keep and not alive:
            kill_marked(folder)
            shutil.rmtree(folder, ignore_errors=True)


def student_users(n: int, extra: tuple[str, ...] = ()) -> list[str]:
    """N local users for the replay's students, and `extra` ones (made once, no home folder: sbatch --uid needs a
    real uid)."""
    names = [f"{USER_PREFIX}{i + 1:02d}" for i in range(n)] + [f"{USER_PREFIX}{x}" for x in extra]
    for name in names:
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    return names


@dataclass(frozen=True)
class Ran:
    """One job as Slurm ran it, in the day's seconds (scaled back): submitted, started, ended."""

    job: SimJob
    submit_s: float
    start_s: float
    end_s: float


def sbatch_args(job: SimJob, profile: Profile, user: str, stem: Path, scale: float) -> list[str]:
    """What the course's job asks Slurm for (nodes, GPUs, a core per GPU's cpus_per_proc, memory), as a sleep of
    its predicted duration scaled; its limit in whole minutes (at least one: Slurm's granularity)."""
    part = profile.partitions[job.partition]
    procs = max(1, job.gpus_per_node)
    args = ["sbatch", "--parsable", f"--uid={user}", f"--partition={part.name or part.key}", f"--nodes={job.nodes}",
            f"--ntasks-per-node={procs}", f"--cpus-per-task={part.cpus_per_proc}", "--output=/dev/null",
            f"--time={max(1, math.ceil(job.limit_s / 60 * scale / 60))}", f"--job-name={job.notebook}:{job.name}"[:120]]
    if job.gpus_per_node:
        args.append(f"--gres=gpu:{job.gpus_per_node}")
    if part.mem_per_proc:
        args.append(f"--mem={mem_mb(part.mem_per_proc) * procs}M")
    sleep = job.duration_s / 60 * scale
    # the end file appears whole (mv), so a reader never meets it empty
    args.append(f"--wrap=date +%s.%N > {stem}.start; sleep {sleep:.3f}; date +%s.%N > {stem}.tmp && mv {stem}.tmp {stem}.end")
    return args


def hold_background(cluster: Cluster, profile: Profile, user: str) -> int:
    """Other users' share ([agenda] background_nodes): one job per partition holding those whole nodes all day,
    submitted before the class's first job. Returns the jobs submitted."""
    for key, nodes in profile.background_nodes.items():
        part = profile.partitions[key]
        cluster.slurm("sbatch", "--parsable", f"--uid={user}", f"--partition={part.name or key}", f"--nodes={nodes}",
                      "--exclusive", "--output=/dev/null", "--job-name=background", "--wrap=sleep 1000000")
    return len(profile.background_nodes)


def drive(cluster: Cluster, jobs: list[SimJob], users: list[str], profile: Profile, scale: float,
          timeout_s: float) -> list[Ran]:
    """Submit each student's waves as the day reaches them (the first after reading, the next when the last job of
    the one before has ended; at most `[slurm] jobs_per_user` unfinished at once, as lab.run_all), and read back
    when each job started and ended (the job's own clock)."""
    waves: dict[tuple[int, int], list[SimJob]] = {}
    for j in jobs:
        waves.setdefault((j.student, j.wave), []).append(j)
    left = {k: len(v) for k, v in waves.items()}
    next_wave = {s: sorted(w for (t, w) in waves if t == s) for s in {s for s, _ in waves}}
    due = sorted((min(j.release_s for j in waves[(s, ws[0])]), s, ws.pop(0)) for s, ws in next_wave.items())
    held: dict[int, list[SimJob]] = {s: [] for s in next_wave}
    out: dict[int, list[tuple[SimJob, Path, float]]] = {s: [] for s in next_wave}
    ran: list[Ran] = []
    t0, wall0, count = time.monotonic(), time.time(), 0
    day = lambda: (time.monotonic() - t0) / scale * 60           # noqa: E731 - the day's clock, in its seconds

    def feed(s: int) -> None:
        nonlocal count
        while held[s] and (not profile.jobs_per_user or len(out[s]) < profile.jobs_per_user):
            j = held[s].pop(0)
            count += 1
            stem = cluster.folder / "jobs" / f"{count:05d}"
            cluster.slurm(*sbatch_args(j, profile, users[s % len(users)], stem, scale))
            out[s].append((j, stem, day()))

    while due or any(out.values()) or any(held.values()):
        if time.monotonic() - t0 > timeout_s:
            raise RuntimeError(f"the replay did not end within {timeout_s:.0f} s")
        while due and due[0][0] <= day():
            _, s, w = due.pop(0)
            held[s] += waves[(s, w)]
            feed(s)
        for s, mine in out.items():
            for j, stem, submitted in [x for x in mine if Path(f"{x[1]}.end").exists()]:
                mine.remove((j, stem, submitted))
                at = [(float(Path(f"{stem}.{e}").read_text()) - wall0) / scale * 60 for e in ("start", "end")]
                ran.append(Ran(j, submitted, *at))
                left[(s, j.wave)] -= 1
                if left[(s, j.wave)] == 0 and next_wave[s]:
                    due.append((day(), s, next_wave[s].pop(0)))
                    due.sort()
            feed(s)
        time.sleep(0.05)
    return ran


def replay_days(ran: list[Ran], notebooks: list[str], starts: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Per notebook: the replay's makespan (from its slot's start) and its longest wait, in the day's seconds."""
    out = {}
    for nb in notebooks:
        mine = [r for r in ran if r.job.notebook == nb]
        out[nb] = (max((r.end_s for r in mine), default=starts[nb]) - starts[nb],
                   max((r.start_s - r.submit_s for r in mine), default=0.0))
    return out


def comparison(model: list, replayed: dict[str, tuple[float, float]]) -> str:
    """The model's makespan and longest wait beside the replay's, in minutes, and the makespan's difference."""
    lines = ["| notebook | slot (min) | jobs | makespan, model (min) | makespan, replay (min) | difference | "
             "longest wait, model (min) | longest wait, replay (min) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for nb in model:
        got, wait = replayed[nb.notebook]
        diff = f"{(nb.makespan_s - got) / got:+.0%}" if got else ""
        lines.append(f"| {nb.notebook} | {nb.slot_min or ''} | {nb.jobs} | {nb.makespan_s / 60:.1f} | {got / 60:.1f} | "
                     f"{diff} | {nb.longest_wait_s / 60:.1f} | {wait / 60:.1f} |")
    return "\n".join(lines)
