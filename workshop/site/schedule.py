"""The class's day as a queue: does each notebook's GPU work fit its slot in the agenda?

The budget (workshop.site.budget) counts GPU-hours; a day fails for another reason: twenty students
reach a notebook at the same moment and their jobs queue for the same few nodes. This module plays that
queue out, a discrete-event simulation of the site's partitions (nodes x GPUs per node, from the profile,
checked against `sinfo` where Slurm answers), so that the instructor sees, before the day, each
notebook's makespan (first submission to the class's last job ending), the longest wait a student sees,
and the hours each partition is held, with and without instructor-run mode.

The model of the day, stated so a reader can judge it:
- every student starts a notebook at the same moment (t = 0 for each notebook);
- a student's cell submits its jobs together (`lab.run_all`, or one `lab.run`) and waits for them;
  the next cell's jobs are submitted when the last of those ends (reading time is not counted);
- the queue is one FIFO per partition in submission order (students in order within a moment), with
  Slurm's backfill (EASY: a later job may start now if it fits now and its *time limit* ends before the
  time the blocked first job is guaranteed to start) or without it (strict FIFO);
- a job holds `procs_per_node` GPUs on each of its nodes, the whole node when it takes every GPU
  (the bandwidth gate always does); it runs its predicted duration, at most its time limit;
- in instructor-run mode the costly jobs ([course]) were run by the instructor before the class.

Durations come from a GPU result under benchmarks/results/ (`workshop bench --device cuda`) where one
matches the partition's GPU, else from the model: 6 x parameters x tokens trained at PLANNING_MFU of the
GPU's data-sheet peak, plus START_UP_S. The model's figures are labelled "predicted": no GPU run of the
course has measured them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from workshop.slurm.profiles import Partition, Profile, ProfileError, time_seconds

# Planning assumptions of the model (not measurements; a GPU result under benchmarks/results/ replaces them).
PLANNING_MFU = 0.10          # a tenth of the data-sheet peak: BLOOM-560M at these batch sizes, start-up aside
START_UP_S = 180.0           # imports, loading the model from the shared cache, evaluation on 200 examples
GATE_S = 60.0                # the bandwidth gate's all_reduce sweep, after its start-up
RECOMPUTE = 8 / 6            # activation checkpointing: one more forward per step
OFFLOAD = 2.0                # CPU offload: optimizer step on the host, parameters over PCIe
RESULTS_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "results"

# How each notebook submits: the cells' groups of runs, in order (a group is submitted together and waited
# for). The names are budget.STATIC_RUNS's; notebook 04's one group is every GPU count.
WAVES: dict[str, list[list[str]]] = {
    "01_baseline": [["baseline"]],
    "02_fsdp_single_gpu": [["baseline", "full_shard", "full_shard+offload"], ["your shard_model"],
                           ["answer_only loss"]],
    "03_sharding_strategies": [["ddp", "full_shard", "shard_grad_op", "offload", "activation_checkpointing"],
                               ["budget challenge"]],
    "05_multi_node": [["bandwidth gate"], ["failed rendezvous (to diagnose)"],
                      ["1 node x 2, full_shard", "2 nodes x 1, full_shard", "2 nodes x 2, full_shard",
                       "2 nodes x 2, hybrid_shard"]],
}


# ------------------------------------------------------------------------------------------ the simulation
@dataclass(frozen=True)
class SimJob:
    """One job as the scheduler sees it: where, how big, how long it runs and what it asked for."""

    name: str
    partition: str
    nodes: int
    gpus_per_node: int          # GPUs held on each node (all of the node's when it is exclusive)
    duration_s: float           # how long it runs (capped at limit_s: Slurm ends it there)
    limit_s: float              # its time limit: what backfill plans with
    student: int = 0
    wave: int = 0               # submitted when the student's previous wave has ended
    notebook: str = ""
    release_s: float = 0.0      # when the student submits the first wave (their slot's start plus reading time)


@dataclass(frozen=True)
class Placed:
    job: SimJob
    submit_s: float
    start_s: float
    end_s: float
    nodes: tuple[int, ...]      # node indices of its partition

    @property
    def wait_s(self) -> float:
        return self.start_s - self.submit_s


def _fit(free: list[int], nodes: int, per_node: int) -> tuple[int, ...] | None:
    """First-fit: the first `nodes` nodes with `per_node` GPUs free, or None."""
    chosen = tuple(i for i, f in enumerate(free) if f >= per_node)[:nodes]
    return chosen if len(chosen) == nodes else None


def simulate(jobs: Iterable[SimJob], partitions: Mapping[str, tuple[int, int]], backfill: bool = True,
             cap: int = 0) -> list[Placed]:
    """Play the queue out. `partitions`: name -> (nodes, GPUs per node). Jobs are given in priority order
    within a moment; a student's first wave is submitted at its `release_s`, wave w + 1 when the last job of
    wave w ends; with `cap` (`[slurm] jobs_per_user`, as lab.run_all), a student has at most `cap` jobs
    submitted and unfinished, the next one submitted as one ends."""
    jobs = list(jobs)
    _check_sizes(jobs, partitions)
    waves: dict[tuple[int, int], list[SimJob]] = {}
    for j in jobs:
        waves.setdefault((j.student, j.wave), []).append(j)
    by_student: dict[int, list[int]] = {}
    for s, w in waves:
        by_student.setdefault(s, []).append(w)
    for ws in by_student.values():
        ws.sort()
    free = {p: [gpn] * count for p, (count, gpn) in partitions.items()}
    pending: list[tuple[float, int, SimJob]] = []       # (submit time, order, job)
    running: list[tuple[Placed, int]] = []              # (placement, order)
    done: list[Placed] = []
    left = {k: len(v) for k, v in waves.items()}
    order = 0

    queued: dict[int, list[SimJob]] = {s: [] for s in by_student}     # released, held back by the cap
    out = {s: 0 for s in by_student}                                  # submitted and not ended

    def feed(student: int, t: float) -> None:
        nonlocal order
        while queued[student] and (not cap or out[student] < cap):
            pending.append((t, order, queued[student].pop(0)))
            out[student] += 1
            order += 1

    def release(student: int, wave: int, t: float) -> None:
        queued[student] += waves[(student, wave)]
        feed(student, t)

    for s in sorted(by_student, key=lambda s: (min(j.release_s for j in waves[(s, by_student[s][0])]), s)):
        first = by_student[s][0]
        release(s, first, min(j.release_s for j in waves[(s, first)]))
    t = 0.0
    while pending or running:
        pending.sort(key=lambda x: (x[0], x[1]))
        for part in partitions:
            _pass(t, part, free[part], pending, running, backfill)
        later = [e[0] for e in pending if e[0] > t + 1e-9]
        if not running and not later:
            raise ValueError("jobs are pending that nothing running will ever make room for")
        t = min([p.end_s for p, _ in running] + later)
        for p, o in [r for r in running if r[0].end_s <= t + 1e-9]:
            running.remove((p, o))
            done.append(p)
            for i in p.nodes:
                free[p.job.partition][i] += p.job.gpus_per_node
            key = (p.job.student, p.job.wave)
            left[key] -= 1
            out[p.job.student] -= 1
            nxt = [w for w in by_student[p.job.student] if w > p.job.wave]
            if left[key] == 0 and nxt:
                release(p.job.student, nxt[0], t)
            else:
                feed(p.job.student, t)
    return done


def _check_sizes(jobs: list[SimJob], partitions: Mapping[str, tuple[int, int]]) -> None:
    """A job that its partition can never hold is an error, not an endless wait."""
    for j in jobs:
        if j.partition not in partitions:
            raise ValueError(f"job {j.name!r}: no partition {j.partition!r}")
        count, gpn = partitions[j.partition]
        if j.nodes > count or j.gpus_per_node > gpn or j.nodes < 1 or j.gpus_per_node < 0:
            raise ValueError(f"job {j.name!r} asks for {j.nodes} x {j.gpus_per_node} GPUs; partition "
                             f"{j.partition!r} has {count} x {gpn}: it would never start")


def _pass(t: float, part: str, free: list[int], pending: list[tuple[float, int, SimJob]],
          running: list[tuple[Placed, int]], backfill: bool) -> None:
    """One scheduling pass at time t over one partition's submitted jobs, in submission order (FIFO, with
    EASY backfill behind the first blocked job when `backfill`)."""
    blocked_at: float | None = None       # backfill's shadow time: when the first blocked job may start
    for entry in [e for e in pending if e[2].partition == part and e[0] <= t + 1e-9]:
        submit, o, j = entry
        where = _fit(free, j.nodes, j.gpus_per_node)
        if blocked_at is not None and (where is None or t + j.limit_s > blocked_at + 1e-9):
            continue
        if where is None:
            if not backfill:
                break
            blocked_at = _shadow(free, [p for p, _ in running if p.job.partition == part], j, t)
            continue
        for i in where:
            free[i] -= j.gpus_per_node
        running.append((Placed(j, submit, t, t + min(j.duration_s, j.limit_s), where), o))
        pending.remove(entry)


def _shadow(free: list[int], running: list[Placed], head: SimJob, now: float) -> float:
    """The earliest time the blocked job is sure to fit, were every running job to use its whole limit."""
    free = list(free)
    for p in sorted(running, key=lambda p: p.start_s + p.job.limit_s):
        for i in p.nodes:
            free[i] += p.job.gpus_per_node
        if _fit(free, head.nodes, head.gpus_per_node) is not None:
            return max(now, p.start_s + p.job.limit_s)
    return math.inf


# ------------------------------------------------------------------------------------------ the site's day
@dataclass(frozen=True)
class Duration:
    seconds: float
    source: str                 # "predicted" or the benchmarks/results file it was measured in


def measured_samples_per_s(part: Partition, results_dir: Path = RESULTS_DIR) -> tuple[float, str] | None:
    """A GPU result of `workshop bench --device cuda` on this partition's GPU: the baseline configuration's
    samples per second on one GPU, and the file; None where benchmarks/results/ holds none (so far: none)."""
    if not results_dir.is_dir():
        return None
    names = [n.lower() for n in (part.gpu_name, part.gpu_type) if n]
    for path in sorted(results_dir.glob("*.json"), reverse=True):
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        device = str(result.get("device_name") or "").lower()
        if result.get("device") != "cuda" or not names or not any(n in device for n in names):
            continue
        for row in result.get("configs") or []:
            if row.get("name") == "baseline" and row.get("samples_per_s"):
                return float(row["samples_per_s"]), path.name
    return None


def job_duration(step: str, cfg: Any, part: Partition, limit_s: float, results_dir: Path = RESULTS_DIR) -> Duration:
    """How long one of the course's jobs runs on this partition (capped at its limit)."""
    from workshop.slurm.steps import get_step

    if get_step(step).program != "train":
        return Duration(min(limit_s, START_UP_S + GATE_S), "predicted")
    if cfg.rdzv_endpoint and cfg.rdzv_timeout_s:          # notebook 05's rendezvous that is meant to fail
        return Duration(min(limit_s, START_UP_S / 3 + cfg.rdzv_timeout_s), "predicted")
    gpus = cfg.nodes * cfg.procs_per_node
    samples = cfg.train_size * cfg.epochs
    slower = (RECOMPUTE if cfg.activation_checkpointing else 1.0) * (OFFLOAD if cfg.offload else 1.0)
    measured = measured_samples_per_s(part, results_dir)
    if measured is not None:
        sps, source = measured
        return Duration(min(limit_s, START_UP_S + slower * samples / (sps * gpus)), source)
    from workshop.results.memory import get_arch
    from workshop.training.metrics import peak_for_name

    peak = peak_for_name(part.gpu_name or part.gpu_type, cfg.precision)
    if not peak:
        return Duration(limit_s, "predicted (no data-sheet peak for this GPU: its time limit)")
    flops = 6.0 * get_arch(cfg.model).params * samples * cfg.max_length
    return Duration(min(limit_s, START_UP_S + slower * flops / (gpus * peak * 1e12 * PLANNING_MFU)), "predicted")


def sinfo_nodes(name: str, timeout: float = 5.0) -> int | None:
    """The partition's node count as Slurm states it; None where no Slurm answers."""
    if not name or shutil.which("sinfo") is None:
        return None
    from workshop.slurm.slurm_backend import SlurmError, run

    try:
        counts = [int(x) for x in run(["sinfo", "-h", "-p", name, "-o", "%D"], timeout=timeout).split() if x.isdigit()]
    except SlurmError:
        return None
    return sum(counts) if counts else None


def partition_sizes(profile: Profile, keys: Iterable[str], ask_slurm: bool = True) -> tuple[dict[str, tuple[int, int]], list[str]]:
    """(nodes, GPUs per node) of each partition the jobs use, less the nodes other users hold ([agenda]
    background_nodes), and notes where Slurm says otherwise."""
    sizes, notes = {}, []
    for key in keys:
        part = profile.partitions[key]
        told = sinfo_nodes(part.name) if ask_slurm else None
        if told is not None and part.nodes and told != part.nodes:
            notes.append(f"warning: partition {part.name!r}: sinfo counts {told} nodes, the profile {part.nodes} "
                         f"(slurm.partitions.{key}.nodes): the schedule uses the profile's; correct it")
        nodes = (part.nodes or told or 0) - profile.background_nodes.get(key, 0)
        if nodes <= 0:
            raise ProfileError(profile.source, f"slurm.partitions.{key}.nodes", "is not set and Slurm does not "
                               "answer, so the schedule cannot know how many nodes the class shares",
                               f"write nodes = N, N from `sinfo -h -p {part.name or '<partition>'} -o %D`")
        sizes[key] = (nodes, part.gpus_per_node)
    return sizes, notes


def class_jobs(profile: Profile, notebook: str, students: int, instructor_run: bool,
               results_dir: Path = RESULTS_DIR) -> tuple[list[SimJob], set[str]]:
    """Every student's jobs of one notebook, in waves, and the duration sources used."""
    from workshop.site.budget import job_cost, notebook_runs
    from workshop.slurm.steps import step_config

    runs = notebook_runs(profile)[notebook]
    waves = WAVES.get(notebook, [list(runs)])
    unknown = [r for w in waves for r in w if r not in runs] + [r for r in runs if not any(r in w for w in waves)]
    if unknown:
        raise ValueError(f"schedule.WAVES[{notebook!r}] and budget.STATIC_RUNS disagree on {unknown}: keep them equal")
    one: list[tuple[int, SimJob]] = []
    sources: set[str] = set()
    for w, group in enumerate(waves):
        for name in group:
            cost = job_cost(notebook, name, runs[name], profile)
            if instructor_run and cost.costly:
                continue
            spec = dict(runs[name])
            step = spec.pop("step")
            cfg = step_config(step, profile, spec)
            part = profile.partition_for(step)
            limit = time_seconds(profile.time_for(step))
            d = job_duration(step, cfg, part, limit, results_dir)
            sources.add(d.source)
            whole = step == "bandwidth" or cfg.procs_per_node >= part.gpus_per_node
            one.append((w, SimJob(name, part.key, cfg.nodes, part.gpus_per_node if whole else cfg.procs_per_node,
                                  d.seconds, limit, wave=w, notebook=notebook)))
    jobs = [SimJob(j.name, j.partition, j.nodes, j.gpus_per_node, j.duration_s, j.limit_s, s, w, notebook)
            for s in range(students) for w, j in one]
    return jobs, sources


@dataclass
class NotebookDay:
    notebook: str
    slot_min: int | None
    jobs: int
    makespan_s: float           # from the slot's start (reading time included) to the class's last job's end
    longest_wait_s: float
    partition_busy_s: dict[str, float] = field(default_factory=dict)
    partition_gpu_s: dict[str, float] = field(default_factory=dict)
    carried: int = 0            # of its jobs, those that end after its slot: they hold nodes in the next one


def notebook_day(placed: list[Placed], notebook: str, slot_min: int | None, start_s: float = 0.0) -> NotebookDay:
    """One notebook's figures, timed from its slot's start."""
    end = max((p.end_s for p in placed), default=start_s)
    day = NotebookDay(notebook, slot_min, len(placed), end - start_s, max((p.wait_s for p in placed), default=0.0))
    for p in placed:
        part = p.job.partition
        day.partition_busy_s[part] = max(day.partition_busy_s.get(part, 0.0), p.end_s - start_s)
        day.partition_gpu_s[part] = day.partition_gpu_s.get(part, 0.0) + \
            (p.end_s - p.start_s) * p.job.nodes * p.job.gpus_per_node
    if slot_min is not None:
        day.carried = sum(p.end_s > start_s + slot_min * 60 + 1e-9 for p in placed)
    return day


WARN_SHARE = 0.9                # a slot filled to 90 % leaves a late student or one rerun no room


@dataclass
class Day:
    students: int
    backfill: bool
    plain: list[NotebookDay]
    instructor: list[NotebookDay]
    partitions: dict[str, tuple[int, int]]
    sources: set[str]
    notes: list[str]
    reading_min: tuple[int, int] = (0, 0)
    background: Mapping[str, int] = field(default_factory=dict)    # [agenda] background_nodes

    def in_effect(self, profile: Profile) -> list[NotebookDay]:
        """The mode the profile runs the class in: instructor-run where it names a folder."""
        return self.instructor if profile.instructor_jobs else self.plain

    def warnings(self, profile: Profile) -> list[str]:
        """A line for each notebook whose class fills at least WARN_SHARE of its slot, naming the field to change."""
        out = []
        mode = "instructor-run mode" if profile.instructor_jobs else "without instructor-run mode"
        for nb in self.in_effect(profile):
            if nb.slot_min is None or nb.makespan_s < WARN_SHARE * nb.slot_min * 60:
                continue
            share = nb.makespan_s / (nb.slot_min * 60)
            how = "more than" if share > 1 else "at least 90 % of"
            carried = f"; {nb.carried} job(s) run on into the next slot" if nb.carried else ""
            out.append(f"warning: {nb.notebook}: the class's jobs end {nb.makespan_s / 60:.0f} min into its "
                       f"{nb.slot_min}-min slot ({share:.0%}, {how} it, {mode}{carried}). Fix: give the notebook a "
                       f"longer slot (agenda.{nb.notebook} = {math.ceil(nb.makespan_s / 60 / WARN_SHARE)} or more), or "
                       "hand its costly jobs to the instructor ([course] instructor_jobs, instructor_min_gpus, "
                       "instructor_steps)")
        return out


def reading_s(profile: Profile, student: int, students: int) -> float:
    """When student `student` of `students` submits a notebook's first job, from the slot's start: spread evenly
    over the profile's [agenda] reading_min."""
    lo, hi = profile.reading_min
    return 60.0 * (lo + (hi - lo) * (student / (students - 1) if students > 1 else 0.0))


def day_jobs(profile: Profile, notebooks: list[str], built: Mapping[str, list[SimJob]], students: int,
             sizes: Mapping[str, tuple[int, int]], backfill: bool) -> tuple[list[SimJob], dict[str, float]]:
    """The whole day's jobs and each notebook's slot start: slots follow each other (a notebook without a slot
    gets the time its jobs take), each student starts a notebook after reading (`release_s`), a student of
    notebook k is student k * students + s (one queue for the day)."""
    jobs: list[SimJob] = []
    starts: dict[str, float] = {}
    t = 0.0
    for k, nb in enumerate(notebooks):
        starts[nb] = t
        jobs += [dataclasses.replace(j, student=k * students + j.student,
                                     release_s=t + reading_s(profile, j.student, students)) for j in built[nb]]
        slot = profile.agenda.get(nb)
        if slot:
            t += slot * 60.0
        else:
            t = max([t] + [p.end_s for p in simulate(jobs, sizes, backfill, profile.jobs_per_user)
                           if p.job.notebook == nb])
    return jobs, starts


def day_timeline(profile: Profile, notebooks: list[str], built: Mapping[str, list[SimJob]], students: int,
                 sizes: Mapping[str, tuple[int, int]], backfill: bool) -> list[NotebookDay]:
    """The whole day as one queue (day_jobs): jobs still queued or running at a slot's end carry over into the next."""
    jobs, starts = day_jobs(profile, notebooks, built, students, sizes, backfill)
    placed = simulate(jobs, sizes, backfill, profile.jobs_per_user)
    return [notebook_day([p for p in placed if p.job.notebook == nb], nb, profile.agenda.get(nb), starts[nb])
            for nb in notebooks]


def plan_day(profile: Profile, students: int, backfill: bool = True, ask_slurm: bool = True,
             results_dir: Path = RESULTS_DIR) -> Day:
    """The day on this site, with and without instructor-run mode."""
    from workshop.site.budget import notebook_runs

    notebooks = list(notebook_runs(profile))
    unknown = [k for k in profile.agenda if k not in notebooks]
    if unknown:
        raise ProfileError(profile.source, f"agenda.{unknown[0]}", "is not a notebook of the course",
                           f"use the notebooks' names: {', '.join(notebooks)}")
    sources: set[str] = set()
    used: set[str] = set()
    built: dict[bool, dict[str, list[SimJob]]] = {False: {}, True: {}}
    for nb in notebooks:
        for mode in (False, True):
            jobs, src = class_jobs(profile, nb, students, mode, results_dir)
            sources |= src
            used |= {j.partition for j in jobs}
            built[mode][nb] = jobs
    sizes, notes = partition_sizes(profile, sorted(used), ask_slurm)
    plain, instructor = (day_timeline(profile, notebooks, built[mode], students, sizes, backfill) for mode in (False, True))
    return Day(students, backfill, plain, instructor, sizes, sources, notes, profile.reading_min, profile.background_nodes)


def replay_day(profile: Profile, students: int, port: int, scale: float, backfill: bool = True) -> str:
    """`--replay`: the day in the profile's mode on a throwaway Slurm (workshop.site.replay), beside the model."""
    import tempfile
    import time

    from workshop.site import replay
    from workshop.site.budget import notebook_runs

    if os.geteuid() != 0:
        raise ValueError("--replay starts Slurm daemons and submits as student users: run it as root")
    notebooks = list(notebook_runs(profile))
    mode = bool(profile.instructor_jobs)
    built = {nb: class_jobs(profile, nb, students, mode)[0] for nb in notebooks}
    sizes, _ = partition_sizes(profile, sorted({j.partition for js in built.values() for j in js}), ask_slurm=False)
    jobs, starts = day_jobs(profile, notebooks, built, students, sizes, backfill)
    model = day_timeline(profile, notebooks, built, students, sizes, backfill)
    users = replay.student_users(students, ("bg",))
    whole = {k: (n + profile.background_nodes.get(k, 0), g) for k, (n, g) in sizes.items()}
    folder = Path(tempfile.mkdtemp(prefix="workshop-replay-"))
    cluster = replay.Cluster(folder, port, replay.shape(profile, whole))
    day_s = max(starts.values()) + max(profile.agenda.values(), default=60) * 60
    try:
        cluster.up()
        t0 = time.monotonic()
        replay.hold_background(cluster, profile, users.pop())
        ran = replay.drive(cluster, jobs, users, profile, scale, timeout_s=3 * day_s / 60 * scale + 300)
        took = time.monotonic() - t0
    finally:
        cluster.down()
    shutil.rmtree(folder, ignore_errors=True)        # kept, with its logs, where the replay failed
    how = "instructor-run mode" if mode else "without instructor-run mode"
    replayed = replay.replay_days(ran, notebooks, starts)
    seen = [dataclasses.replace(nb, makespan_s=replayed[nb.notebook][0], longest_wait_s=replayed[nb.notebook][1])
            for nb in model]          # the replay's figures, warned about as the model's are
    warned = Day(students, backfill, seen, seen, sizes, set(), []).warnings(profile)
    return (f"The day replayed on Slurm ({len(cluster.nodes)} nodes, {len(ran)} jobs of {students} student users, "
            f"{how}, {scale:g} s per minute, {took:.0f} s):\n\n" + replay.comparison(model, replayed) +
            "".join(f"\n{w.replace('warning: ', 'warning (replay): ', 1)}" for w in warned))


def _m(seconds: float) -> str:
    return f"{seconds / 60:.0f}"


def markdown(day: Day, profile: Profile) -> str:
    """The schedule's two tables: per notebook, and per partition."""
    n = day.students
    lines = [f"| notebook | slot (min) | jobs, class of {n} | makespan (min) | longest wait (min) | carried over | "
             "jobs, instructor-run | makespan, instructor-run (min) | longest wait, instructor-run (min) | "
             "carried over, instructor-run |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for a, b in zip(day.plain, day.instructor):
        slot = "" if a.slot_min is None else str(a.slot_min)
        lines.append(f"| {a.notebook} | {slot} | {a.jobs} | {_m(a.makespan_s)} | {_m(a.longest_wait_s)} | {a.carried} | "
                     f"{b.jobs} | {_m(b.makespan_s)} | {_m(b.longest_wait_s)} | {b.carried} |")
    lines += ["", "| partition | nodes x GPUs | GPU-h used | hours held | GPU-h used, instructor-run | "
              "hours held, instructor-run |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for key, (nodes, gpn) in day.partitions.items():
        def tot(days: list[NotebookDay], what: str) -> float:
            return sum(getattr(d, what).get(key, 0.0) for d in days) / 3600
        lines.append(f"| {profile.partitions[key].name or key} | {nodes} x {gpn} | {tot(day.plain, 'partition_gpu_s'):.1f} | "
                     f"{tot(day.plain, 'partition_busy_s'):.1f} | {tot(day.instructor, 'partition_gpu_s'):.1f} | "
                     f"{tot(day.instructor, 'partition_busy_s'):.1f} |")
    return "\n".join(lines)


def describe(day: Day) -> str:
    """What the figures rest on, printed under the tables."""
    measured = sorted(s for s in day.sources if not s.startswith("predicted"))
    how = (f"measured in benchmarks/results/{', '.join(measured)}" if measured else
           f"predicted from the model ({PLANNING_MFU:.0%} of the GPU's data-sheet peak, {START_UP_S:.0f} s start-up; "
           "no GPU result under benchmarks/results/)")
    lo, hi = day.reading_min
    return (f"durations {how}; {'backfill' if day.backfill else 'strict FIFO'}; slots follow each other, each student "
            f"starts a notebook after {lo}-{hi} min of reading ([agenda] reading_min), jobs not ended by a slot's end "
            "carry over into the next; makespan counts from the slot's start; instructor-run: the costly jobs were run "
            "before the class" + "".join(f"; other users hold {n} node(s) of {k} ([agenda] background_nodes)"
                                          for k, n in day.background.items()))


def main(argv: list[str] | None = None) -> int:
    """`workshop budget`: the budget's tables (workshop.site.budget), then the day's schedule and its warnings;
    with --instructor-run, the costly jobs submitted instead."""
    from workshop.site import budget
    from workshop.site.replay import REPLAY_PORT
    from workshop.training.config import ConfigError

    ap = argparse.ArgumentParser(prog="workshop budget", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default=None, help="site profile (name or .toml path)")
    ap.add_argument("--students", type=int, default=20)
    ap.add_argument("--reruns", type=float, default=budget.RERUN_ALLOWANCE,
                    help=f"share of the students' jobs run again, planned for (default {budget.RERUN_ALLOWANCE})")
    ap.add_argument("--no-backfill", action="store_true",
                    help="schedule the day as a strict FIFO queue (default: Slurm's backfill)")
    ap.add_argument("--instructor-run", action="store_true", help="submit the costly jobs into [course] instructor_jobs")
    ap.add_argument("--replay", action="store_true", help="then replay the day on a throwaway Slurm on this machine "
                    "(root; minutes) and print its makespans and waits beside the model's")
    ap.add_argument("--replay-port", type=int, default=REPLAY_PORT, help="the replay's slurmctld port; its nodes take "
                    f"the port + 100 and up (default {REPLAY_PORT})")
    ap.add_argument("--replay-scale", type=float, default=float(os.environ.get("WORKSHOP_REPLAY_SCALE", "1")),
                    help="seconds of replay per minute of the day (default $WORKSHOP_REPLAY_SCALE, else 1)")
    args = ap.parse_args(argv)
    from workshop.slurm.profiles import load_profile

    try:
        profile = load_profile(args.profile)
        if args.instructor_run:
            for job in budget.instructor_run(profile):
                print(f"{job.job_id}\t{job.job_dir}")
            return 0
        day = plan_day(profile, args.students, backfill=not args.no_backfill)
    except (ProfileError, ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(budget.report(profile, args.students, args.reruns))
    print(f"\nThe day, a class of {args.students} ([agenda] slots; `workshop.site.schedule`):\n")
    print(markdown(day, profile))
    print(f"\n{describe(day)}")
    for line in day.notes + day.warnings(profile):
        print(line)
    if args.replay:
        try:
            print("\n" + replay_day(profile, args.students, args.replay_port, args.replay_scale, not args.no_backfill))
        except (RuntimeError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
