"""Notebook 03's budget challenge: a global batch, a per-GPU memory budget, fast settings that fit.

The student chooses strategy, offload, activation checkpointing, micro-batch and gradient
accumulation; their job runs exactly those. The checks grade what can be graded fairly, from the
student's own job and from rules that hold on any machine, never from a throughput measured elsewhere:

- the job COMPLETED and trained the global batch asked (`global_batch_measured`);
- its tensor peak (`peak_mem_mb`) stayed within the budget (a challenge job only: another job of the step
  that happens to fit earns nothing here);
- the choice pays for nothing it did not need (`undominated`): no other choice of the same strategy
  that fits does less work, by turning offload or activation checkpointing off or by a larger
  micro-batch (fewer micro-batches per step). Offload copies, recomputation and extra micro-batches
  only ever cost time, so this rule ranks nothing by a noisy clock. "Fits" is what the student could
  know and what is true: the memory model's peak (`lab.predict`, the tool the notebook hands them) and
  the sweep's measured peak both within the budget.

Which strategy is fastest among the choices left is the student's judgement, written in the reflection
and graded by hand. The instructor's **sweep** (the same grid of choices, run once per site, with each
configuration's measured peak and throughput) supplies the measured peaks and is shown to the student
in the feedback only, after grading, with its caveat: one run of each on a shared machine, so choices
within about 2x of each other are not ordered by it.

Where the sweep comes from (`python -m workshop.student.challenge --profile SITE`, which submits the grid
as ordinary jobs, into `[course] instructor_jobs` where the site hands notebook 03's jobs to the
students (`instructor_steps = ["strategies"]`), and writes the file; its GPU-hours are a row of the class
budget, `workshop.site.budget`):
- a site with `[course] instructor_jobs` keeps it there, beside the instructor-run jobs every student
  can already read: `<instructor_jobs>/sweep-03.json`;
- otherwise `slurm/profiles/sweeps/<profile>.json`, committed with the site's profile. The course
  ships the embedded default's (CPU, tiny model, dated): CI and the test cluster, whose steps run
  the same config, find it by that config (`signature`) and run no sweep at all.
The file also fixes the challenge (`global_batch`, `budget_mb`): the budget is chosen from the
measured peaks so that it binds (some choices exceed it) with a margin on both sides.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from workshop.slurm.profiles import PROFILES_DIR, Profile, load_profile

STEP = "strategies"
FILE = "sweep-03.json"
CHOICES = ("sharding", "offload", "activation_checkpointing", "batch_size", "grad_acc")
STRATEGIES = ("ddp", "full_shard", "shard_grad_op")
# The config fields throughput depends on: a sweep is valid for every site whose step config agrees.
SIGNATURE = ("model", "dataset", "train_size", "eval_size", "max_length", "batch_size", "precision", "epochs", "max_steps",
             "nodes", "procs_per_node", "pad_to_max_length")
ACCUMULATION = 2           # the global batch asks for this many micro-batches per GPU at the step's batch size


def signature(profile: Profile, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    from workshop.slurm.steps import step_config

    cfg = step_config(STEP, profile, dict(overrides or {})).to_dict()
    return {k: cfg.get(k) for k in SIGNATURE}


def global_batch(profile: Profile, overrides: Mapping[str, Any] | None = None) -> int:
    """The challenge's global batch: the step's micro-batch x its GPUs x ACCUMULATION."""
    from workshop.slurm.steps import step_config

    cfg = step_config(STEP, profile, dict(overrides or {}))
    return cfg.batch_size * cfg.world_size * ACCUMULATION


def grid(world_size: int, batch: int) -> list[dict[str, Any]]:
    """Every choice the challenge offers: strategy x offload (FSDP only) x activation checkpointing x
    (micro-batch, accumulation) pairs that keep the global batch (micro-batches: powers of two)."""
    per_gpu = batch // world_size
    pairs = [(mb, per_gpu // mb) for mb in (1, 2, 4, 8, 16, 32) if mb <= per_gpu and per_gpu % mb == 0]
    out = []
    for sharding in STRATEGIES:
        for offload in ((False,) if sharding == "ddp" else (False, True)):
            for ac in (False, True):
                for mb, ga in pairs:
                    out.append(dict(sharding=sharding, offload=offload, activation_checkpointing=ac,
                                    batch_size=mb, grad_acc=ga))
    return out


def key(settings: Mapping[str, Any]) -> tuple:
    return tuple(settings.get(k) for k in CHOICES)


@dataclass
class Sweep:
    """The instructor's sweep for one site: the challenge's figures and one row per configuration."""

    global_batch: int
    budget_mb: float
    measured_at: str
    host: str
    signature: dict[str, Any]
    rows: list[dict[str, Any]]
    source: str = ""

    def table(self) -> pd.DataFrame:
        """The grid with the sweep's peak and throughput, whether each fits, fastest first."""
        df = pd.DataFrame(self.rows)
        df["fits"] = df["peak_mem_mb"] <= self.budget_mb
        df = df.sort_values(["fits", "samples_per_s"], ascending=[False, False]).reset_index(drop=True)
        df.index = df.index + 1
        df.index.name = "rank"
        return df

    def row(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(settings) - set(CHOICES))
        if unknown:
            raise AssertionError(f"my_settings has {unknown}: choose only {', '.join(CHOICES)}")
        want = key({**{"offload": False, "activation_checkpointing": False}, **settings})
        for r in self.rows:
            if key(r) == want:
                return r
        raise AssertionError(f"{dict(settings)} is not one of the sweep's {len(self.rows)} choices: micro-batch x "
                             f"accumulation x {self.signature.get('procs_per_node')} GPUs must make {self.global_batch}, "
                             "with a strategy of " + ", ".join(STRATEGIES))

    def fits(self, settings: Mapping[str, Any]) -> bool:
        """Within the budget by the sweep's measured peak."""
        return self.row(settings)["peak_mem_mb"] <= self.budget_mb

    def dominated_by(self, settings: Mapping[str, Any], predicted_mb: Callable[[dict[str, Any]], float]) -> list[dict[str, Any]]:
        """The choices that fit (measured by the sweep and predicted by `predicted_mb`, the memory model the
        student can ask) and do less work than `settings` with the same strategy: offload or activation
        checkpointing turned off, or a larger micro-batch, and nothing added."""
        mine = {**{"offload": False, "activation_checkpointing": False}, **settings}
        self.row(mine)
        out = []
        for r in self.rows:
            other = {k: r[k] for k in CHOICES}
            if (other == {k: mine[k] for k in CHOICES} or other["sharding"] != mine["sharding"]
                    or other["offload"] > mine["offload"]
                    or other["activation_checkpointing"] > mine["activation_checkpointing"]
                    or other["batch_size"] < mine["batch_size"]):
                continue
            if r["peak_mem_mb"] <= self.budget_mb and predicted_mb(other) <= self.budget_mb:
                out.append(other)
        return out

    def shown(self) -> pd.DataFrame:
        """The sweep as the feedback shows it: the choices that fit, fastest first, with the caveat."""
        table = self.table()
        table.attrs["note"] = (f"measured once per choice on {self.host} ({self.measured_at}): on a shared machine "
                               "throughputs within about 2x of each other are not ordered by one run")
        return table

    def to_json(self) -> str:
        return json.dumps({"global_batch": self.global_batch, "budget_mb": self.budget_mb,
                           "measured_at": self.measured_at, "host": self.host, "signature": self.signature,
                           "rows": self.rows}, indent=1)


def terms(profile: Profile, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What the student is asked: the global batch, the budget per GPU and the GPUs, from the site's
    sweep (its rows stay with the checks: they are the instructor's answer)."""
    from workshop.slurm.steps import step_config

    sweep = load_sweep(profile, overrides)
    cfg = step_config(STEP, profile, dict(overrides or {}))
    return {"global_batch": sweep.global_batch, "budget_mb": sweep.budget_mb, "gpus": cfg.world_size,
            "choices": list(CHOICES), "strategies": list(STRATEGIES), "sweep_measured_at": sweep.measured_at}


# ------------------------------------------------------------------ the checks (rules for checks.holds)
def _settings(settings: Any) -> dict[str, Any]:
    if type(settings) is not dict or set(settings) != set(CHOICES):
        raise AssertionError(f"my_settings must be a dict with exactly the keys {', '.join(CHOICES)}")
    unset = [k for k, v in settings.items() if v is None]
    if unset:   # None would run the site's defaults: a job the student never chose
        raise AssertionError(f"my_settings leaves {', '.join(unset)} unset (None): choose a value for each")
    return settings


def own_job(lab: Any, settings: Any) -> Any:
    """The saved job that ran exactly these settings (the job cell's), or AssertionError. Read through the
    module attribute, so that the independent review's sealed lookup applies."""
    from workshop.student import lab as lab_module

    settings = _settings(settings)
    try:
        config = lab.config(STEP, **settings)
    except ValueError as e:
        raise AssertionError(f"these settings cannot run: {e}") from None
    job = lab_module.find_saved(STEP, config, lab.jobs_dir, keys=[*lab.overrides, *settings])
    if job is None:
        raise AssertionError(f"no job ran {settings}: run the job cell after your settings cell")
    return job


def _summary(lab: Any, settings: Any) -> dict[str, Any]:
    job = own_job(lab, settings)
    state = job.state().value
    summary = job.summary()
    if state != "COMPLETED" or not summary:
        raise AssertionError(f"your job {job.job_id} ended {state}: {job.reason or 'see its log'} "
                             f"(workshop diagnose {job.log_path})")
    return summary


def batch_as_asked(lab: Any, settings: Any) -> bool:
    want = terms(lab.profile, lab.overrides)["global_batch"]
    got = _summary(lab, settings).get("global_batch_measured")
    if got != want:
        raise AssertionError(f"your job trained {got} samples per optimizer step, not {want}: micro-batch x "
                             "accumulation x GPUs must make the global batch")
    return True


def under_budget(lab: Any, settings: Any) -> bool:
    """Within the budget, for a challenge job: one that trained the global batch asked (another job of the
    step, such as section 2's runs, fits or not at a batch the challenge did not ask for)."""
    batch_as_asked(lab, settings)
    budget = terms(lab.profile, lab.overrides)["budget_mb"]
    peak = _summary(lab, settings).get("peak_mem_mb")
    if peak is None or peak > budget:
        raise AssertionError(f"your job's peak was {peak} MB per GPU, over the {budget:g} MB budget")
    return True


WHY = {"offload": "no offload (no host copies)", "activation_checkpointing": "no activation checkpointing "
       "(no recomputation)", "batch_size": "a larger micro-batch (fewer micro-batches per step)"}


def undominated(lab: Any, settings: Any) -> bool:
    """Your job completed, and no choice of the same strategy that fits does less work than yours."""
    _summary(lab, settings)
    sweep = load_sweep(lab.profile, lab.overrides)
    better = sweep.dominated_by(settings, lambda other: float(lab.predict(STEP, **other)["peak"]))
    if better:
        other = better[0]
        saves = [WHY[k] for k in ("offload", "activation_checkpointing") if other[k] < settings[k]]
        saves += [WHY["batch_size"]] if other["batch_size"] > settings["batch_size"] else []
        raise AssertionError(f"{other} also fits the budget (by the memory model and by measurement) and does less "
                             f"work: {', '.join(saves)}: you paid for something you did not need")
    return True


def sweep_paths(profile: Profile) -> list[Path]:
    """Where a site's sweep may be, in the order they are tried."""
    paths = []
    if profile.instructor_jobs:
        paths.append(Path(profile.instructor_jobs).expanduser() / FILE)
    paths.append(PROFILES_DIR / "sweeps" / f"{profile.name}.json")
    paths += sorted((PROFILES_DIR / "sweeps").glob("*.json"))
    return paths


def load_sweep(profile: Profile, overrides: Mapping[str, Any] | None = None) -> Sweep:
    """The sweep made for this site's step config (see the module docstring), or an error saying how to make it."""
    want = signature(profile, overrides)
    for path in sweep_paths(profile):
        if path.is_file():
            data = json.loads(path.read_text())
            if data.get("signature") == want:
                return Sweep(**data, source=str(path))
    raise FileNotFoundError(f"no budget-challenge sweep for profile {profile.name!r} with this step's config "
                            f"({want}): the instructor runs `python -m workshop.student.challenge --profile {profile.name}` "
                            f"once (it writes {sweep_paths(profile)[0]})")


def choose_budget(peaks: list[float]) -> float:
    """A budget that binds: in the widest gap between measured peaks around the median, so that
    about half the choices exceed it and none sits within a few percent of it."""
    values = sorted(set(round(p, 3) for p in peaks))
    middle = len(values) // 2
    gaps = [(values[i + 1] / values[i], i) for i in range(max(0, middle - 3), min(len(values) - 1, middle + 3))]
    _, i = max(gaps)
    return float(round(math.sqrt(values[i] * values[i + 1]), 1))


def run_sweep(profile: Profile, jobs_dir: Path, budget_mb: float | None = None,
              overrides: Mapping[str, Any] | None = None) -> Sweep:
    """Submit the grid (ordinary jobs, found again when re-run), wait, and build the sweep from their logs."""
    import socket

    from workshop.student.lab import Lab

    lab = Lab(profile, jobs_dir=jobs_dir, overrides=overrides, quiet=True)
    batch = global_batch(profile, overrides)
    world = lab.config(STEP).world_size
    choices = grid(world, batch)
    jobs = lab.run_all({i: dict(step=STEP, **c) for i, c in enumerate(choices)})
    rows = []
    for i, c in enumerate(choices):
        s = jobs[i].summary() or {}
        if s.get("global_batch_measured") != batch:
            raise RuntimeError(f"sweep job {jobs[i].job_id} ({c}) did not complete with global batch {batch}: "
                               f"{jobs[i].log_path}")
        busiest = max(s["tensor_mem_mb_per_rank"], key=lambda r: r["peak"])
        rows.append({**c, "peak_mem_mb": s["peak_mem_mb"], "samples_per_s": s["train_samples_per_s"],
                     "batch_shape": busiest["batch_shape"]})
    budget = budget_mb or choose_budget([r["peak_mem_mb"] for r in rows])
    return Sweep(batch, budget, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), socket.gethostname(),
                 signature(profile, overrides), rows)


def sweep_jobs_dir(profile: Profile) -> Path:
    """Where the sweep's jobs go: the instructor's shared folder when instructor-run mode covers this step
    (`[course] instructor_steps`), so that a student's challenge job, one of the grid, is handed the sweep's
    job; else `sweep-jobs/` here."""
    if profile.instructor_jobs and STEP in profile.instructor_steps:
        return Path(profile.instructor_jobs).expanduser()
    return Path("sweep-jobs")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workshop.student.challenge", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default=None, help="site profile (name or .toml path)")
    p.add_argument("--jobs-dir", default="", help="where the grid's jobs go (default: the profile's instructor_jobs "
                   "where its instructor_steps hand notebook 03's jobs over, so a student's choice is the sweep's own "
                   "job; else sweep-jobs)")
    p.add_argument("--budget-mb", type=float, default=None, help="the budget (default: chosen so that it binds)")
    p.add_argument("--output", default="", help="the sweep file (default: the first place the notebook looks)")
    args = p.parse_args(argv)
    profile = load_profile(args.profile)
    sweep = run_sweep(profile, Path(args.jobs_dir or sweep_jobs_dir(profile)), args.budget_mb)
    out = Path(args.output) if args.output else sweep_paths(profile)[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(sweep.to_json() + "\n")
    print(sweep.table().to_string())
    print(f"\nglobal batch {sweep.global_batch}, budget {sweep.budget_mb:g} MB per GPU; written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
