"""The class budget: the GPU time each notebook asks a site for, and the instructor-run mode.

    workshop budget --profile example-hpc --students 20     # the tables of docs/instructor.md, then the day
    workshop budget --profile <site> --instructor-run        # submit the costly jobs once

(one command, workshop.site.schedule.main: the budget's tables here, the day's schedule there.)

Figures are *requested allocation*: GPUs x the step's time limit, as sbatch reserves them. A job
that ends early gives the rest back, so real use is lower; no GPU run has measured it yet. "Fewest
steps counted" is, over a notebook's training jobs, the fewest optimizer steps a job's summary
throughput counts (workshop.training.counted_steps: all but the warm-up and the instrumented steps):
a speed-up between two GPU counts is only as good as the steady steps behind it.

Instructor-run mode: the costly jobs (at least `[course] instructor_min_gpus` GPUs, or 2+ nodes)
run once, by the instructor, into the profile's `[course] instructor_jobs` folder. A student's
submission of the very same job (same step, config and profile: the same job folder name) then
links that folder into the student's jobs/ instead of queueing a copy, so the notebook reads, tables
and grades the instructor's log exactly as it would its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from workshop.training.counted_steps import counted_steps, expected_steps
from workshop.slurm.profiles import Profile, ProfileError, time_seconds
from workshop.slurm.shared import is_costly
from workshop.student.runs import STATIC_RUNS


def notebook_runs(profile: Profile) -> dict[str, dict[str, dict[str, Any]]]:
    """Every notebook's runs on this site (04's follow the site's nodes: `workshop.slurm.steps.scaling_plan`,
    which the notebook reads too)."""
    from workshop.slurm.steps import scaling_plan

    runs = dict(STATIC_RUNS)
    # 04: the student writes each run's micro-batch and accumulation; the right answer (the largest
    # micro-batch, the accumulation that keeps the batch) is the very job instructor-run mode hands over
    plan = scaling_plan(profile)
    runs["04_multi_gpu"] = {f"{n} GPU(s)": dict(step="multi_gpu", procs_per_node=n, batch_size=plan.micro_batch,
                                                grad_acc=plan.global_batch // (plan.micro_batch * n))
                            for n in plan.gpu_counts}
    return dict(sorted(runs.items()))


@dataclass(frozen=True)
class JobCost:
    notebook: str
    run: str
    step: str
    nodes: int
    gpus: int            # GPUs (processes) of the whole job
    hours: float         # the step's time limit
    costly: bool         # run by the instructor in instructor-run mode
    in_sweep: bool = False   # one of the challenge sweep's jobs (the student's choice): handed over, not run again
    steps: int | None = None           # optimizer steps of a training job (None: the bandwidth gate)
    counted_steps: int | None = None   # of them, those its summary's throughput counts

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.hours


CHALLENGE_RUN = "budget challenge"     # notebook 03's job of the student's own choice: one of the sweep's grid
SWEEP = "03's challenge sweep, once: `python -m workshop.student.challenge`"
DRY_RUN = "dry run, once: `python -m workshop.grading.run_all`"
# A planning allowance, not a measurement: a job in four run again (a setting changed, a failure fixed).
RERUN_ALLOWANCE = 0.25


def job_cost(notebook: str, run: str, spec: dict[str, Any], profile: Profile) -> JobCost:
    from workshop.slurm.steps import get_step, step_config

    spec = dict(spec)
    step = spec.pop("step")
    cfg = step_config(step, profile, spec)
    gpus = cfg.nodes * cfg.procs_per_node
    steps = counted = None
    if get_step(step).program == "train":
        steps = cfg.max_steps or expected_steps(cfg.train_size, cfg.epochs, cfg.batch_size, cfg.effective_grad_acc,
                                                cfg.world_size)
        counted = len(counted_steps(steps))
    return JobCost(notebook, run, step, cfg.nodes, gpus, time_seconds(profile.time_for(step)) / 3600,
                   is_costly(cfg, profile, step), in_sweep=run == CHALLENGE_RUN, steps=steps, counted_steps=counted)


def costs(profile: Profile) -> list[JobCost]:
    return [job_cost(nb, name, spec, profile) for nb, runs in notebook_runs(profile).items()
            for name, spec in runs.items()]


def sweep_costs(profile: Profile) -> list[JobCost]:
    """The instructor's challenge sweep (`workshop.student.challenge`): one job per choice of its grid, once a site."""
    from workshop.student import challenge
    from workshop.slurm.steps import step_config

    world = step_config(challenge.STEP, profile).world_size
    return [job_cost(SWEEP, f"choice {i}", dict(step=challenge.STEP, **choice), profile)
            for i, choice in enumerate(challenge.grid(world, challenge.global_batch(profile)))]


def budget_rows(profile: Profile, students: int, rerun: float = RERUN_ALLOWANCE) -> list[dict[str, Any]]:
    """Per notebook: jobs, GPU-hours per student, for the class, and for the class in instructor-run mode;
    then the rerun allowance on the students' jobs, the challenge sweep and the dry run (once each)."""
    rows = []
    everything = costs(profile)
    own = 0.0             # GPU-h a student's own jobs take in instructor-run mode
    for nb in notebook_runs(profile):
        mine = [c for c in everything if c.notebook == nb]
        each = sum(c.gpu_hours for c in mine)
        costly = sum(c.gpu_hours for c in mine if c.costly)
        once = sum(c.gpu_hours for c in mine if c.costly and not c.in_sweep)   # the sweep's jobs are its own row
        own += each - costly
        counted = [c.counted_steps for c in mine if c.counted_steps is not None]
        rows.append({"notebook": nb, "jobs": len(mine), "max_gpus": max(c.gpus for c in mine),
                     "min_counted_steps": min(counted, default=None),
                     "gpu_h_per_student": each, "gpu_h_class": each * students,
                     "gpu_h_class_instructor_run": (each - costly) * students + once})
    per_student = sum(r["gpu_h_per_student"] for r in rows)
    rows.append({"notebook": f"reruns: {rerun:.0%} of the students' jobs, an allowance", "jobs": None, "max_gpus": None,
                 "gpu_h_per_student": rerun * per_student, "gpu_h_class": rerun * per_student * students,
                 "gpu_h_class_instructor_run": rerun * own * students})
    sweep = sweep_costs(profile)
    swept = sum(c.gpu_hours for c in sweep)
    rows.append({"notebook": SWEEP, "jobs": len(sweep), "max_gpus": max(c.gpus for c in sweep),
                 "gpu_h_per_student": None, "gpu_h_class": swept, "gpu_h_class_instructor_run": swept})
    # the dry run is one student's course; in instructor-run mode it is handed the instructor's costly jobs
    rows.append({"notebook": DRY_RUN, "jobs": len(everything), "max_gpus": max(c.gpus for c in everything),
                 "gpu_h_per_student": None, "gpu_h_class": per_student, "gpu_h_class_instructor_run": own})
    return rows


def _cell(value: Any, fmt: str) -> str:
    return "" if value is None else format(value, fmt)


def markdown(profile: Profile, students: int, rerun: float = RERUN_ALLOWANCE) -> str:
    """The class-budget table of docs/instructor.md."""
    rows = budget_rows(profile, students, rerun)
    head = ("| part | jobs | largest job (GPUs) | fewest steps counted | GPU-h per student | GPU-h, class of "
            f"{students} | GPU-h, class of {students}, instructor runs the costly jobs |")
    lines = [head, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['notebook']} | {_cell(r['jobs'], 'd')} | {_cell(r['max_gpus'], 'd')} | "
                     f"{_cell(r.get('min_counted_steps'), 'd')} | "
                     f"{_cell(r['gpu_h_per_student'], '.2f')} | {r['gpu_h_class']:.1f} | "
                     f"{r['gpu_h_class_instructor_run']:.1f} |")
    total = {k: sum(r[k] or 0 for r in rows) for k in ("gpu_h_per_student", "gpu_h_class", "gpu_h_class_instructor_run")}
    lines.append(f"| **all** | | | | {total['gpu_h_per_student']:.2f} | {total['gpu_h_class']:.1f} | "
                 f"{total['gpu_h_class_instructor_run']:.1f} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------- disk
GB = 1e9
ADAMW_STATES = 2          # exp_avg and exp_avg_sq, fp32 like the sharded master weights


def disk_rows(profile: Profile, students: int) -> list[dict[str, Any]]:
    """Bytes the course writes to the site's scratch folder (the profile's `[env] scratch`; none goes into a
    student's folder, tests/test_disk.py checks): each checkpoint a notebook's job saves (fp32 weights and
    AdamW's two states, over all shards). Notebook 05 reads its checkpoint's index only and merges nothing
    (a merge is a job of the student's choosing). Computed from the model's shapes (workshop.results.memory),
    not measured on a GPU."""
    from workshop.results.memory import get_arch
    from workshop.slurm.steps import step_config

    saving, costly = 0.0, 0.0
    for nb, runs in notebook_runs(profile).items():
        for name, spec in runs.items():
            spec = dict(spec)
            step = spec.pop("step")
            cfg = step_config(step, profile, spec)
            if not (cfg.checkpoint_at_end or cfg.checkpoint_every):
                continue
            arch = get_arch(cfg.model)
            size = arch.params * 4 * (1 + ADAMW_STATES)
            saving += size
            costly += size if is_costly(cfg, profile, step) else 0.0
    return [{"what": "checkpoints (weights + AdamW state, fp32), kept", "per_student": saving,
             "class": saving * students, "class_instructor_run": (saving - costly) * students + costly}]


def disk_markdown(profile: Profile, students: int) -> str:
    """The scratch table of docs/instructor.md, "Disk"."""
    lines = [f"| in the scratch folder | GB per student | GB, class of {students} | GB, class of {students}, "
             "instructor runs the costly jobs |", "| --- | ---: | ---: | ---: |"]
    for r in disk_rows(profile, students):
        lines.append(f"| {r['what']} | {r['per_student'] / GB:.2f} | {r['class'] / GB:.1f} | "
                     f"{r['class_instructor_run'] / GB:.1f} |")
    return "\n".join(lines)


def instructor_run(profile: Profile) -> list[Any]:
    """Submit every costly job of the course into the profile's instructor_jobs folder (once each)."""
    from workshop.slurm import submit

    if not profile.instructor_jobs:
        raise ProfileError(profile.source, "course.instructor_jobs", "is empty: there is no shared folder to run into",
                           'set instructor_jobs = "/shared/fsdp-workshop/instructor-jobs" under [course]')
    jobs = []
    for cost, spec in zip(costs(profile), [s for runs in notebook_runs(profile).values() for s in runs.values()]):
        if cost.costly and not cost.in_sweep:      # a student's challenge choice is the sweep's job to run
            overrides = {k: v for k, v in spec.items() if k != "step"}
            jobs.append(submit(cost.step, profile=profile, overrides=overrides, jobs_dir=profile.instructor_jobs))
    return jobs


def report(profile: Profile, students: int, rerun: float = RERUN_ALLOWANCE) -> str:
    """The budget's part of `workshop budget` (workshop.site.schedule.main prints the day after it)."""
    per_student = sum(c.gpu_hours for c in costs(profile))
    return "\n".join([markdown(profile, students, rerun),
                      f"\nrequested allocation (GPUs x time limit), not measured use; {math.ceil(per_student)} GPU-h"
                      " per student before reruns\n", disk_markdown(profile, students),
                      "\ncomputed from the model's shapes, not measured on a GPU"])
