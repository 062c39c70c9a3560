"""What a notebook cell calls: predict, run a job, tabulate its log, plot, and check the student's table.

The notebooks show FSDP, not glue: `lab.run("baseline")` renders the batch script, submits it (or
finds the job this exact cell already submitted), and watches it. While nbgrader executes a
submission (`NBGRADER_EXECUTION` is set), nothing is submitted and nothing waits: every job is
read back from the `jobs/` folder saved with the submission, and a missing one is an error.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from workshop.training.config import RunConfig
from workshop.slurm.profiles import Profile, load_profile


class NoSavedJob(RuntimeError):
    """Grading found no saved job for a cell: the notebook was not run before it was submitted."""


def grading() -> bool:
    """True while nbgrader autogrades or validates this notebook."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def find_saved(step: str, config: RunConfig, jobs_dir: str | Path, keys: Iterable[str]) -> Any:
    """The saved job of `step` that agrees with `config` on `keys` (the settings the notebook chose),
    read from where its folder is now: of several, the one closest to `config` on the other settings,
    then the newest.

    Grading runs in a copy of the submission (another folder, maybe another machine, maybe after
    the site profile was edited), so jobs are matched by the settings they saved, not by absolute
    paths, profile digests or defaults the student never chose.
    """
    from workshop.slurm.jobs import Job
    from workshop.slurm.records import JobRecord

    full = config.to_dict()
    want = {k: v for k, v in full.items() if k in set(keys)}
    matches = []
    for record_file in sorted(Path(jobs_dir).glob(f"{step}-*/job.json")):
        folder = record_file.parent
        try:
            saved = json.loads((folder / "config.json").read_text())
            record = JobRecord.load(folder)
        except (OSError, ValueError):
            continue
        if all(_same_setting(k, saved.get(k), v, folder) for k, v in want.items()):
            record.job_dir = str(folder.resolve())
            # among the jobs that agree on the chosen keys, the one that agrees on most of the rest
            # wins: `find(sharding="full_shard")` is the plain run, not a later challenge job that
            # also chose full_shard with another batch
            agreed = sum(saved.get(k) == v for k, v in full.items() if k not in want)
            matches.append((agreed, record.submitted_at or "", Job(record)))
    return max(matches, key=lambda m: m[:2])[2] if matches else None


def _same_setting(key: str, saved: Any, wanted: Any, folder: Path) -> bool:
    """A saved job's setting against the notebook's. The job ran its own copy of a wrap function's file
    (its config names the copy): that matches by function and content, not by path."""
    if key == "wrap_function":
        from workshop.training.wrap_function import same_function

        return saved == wanted or same_function(saved, folder, wanted)
    return saved == wanted


def saved_profile(jobs_dir: str | Path) -> str | None:
    """The profile the saved jobs ran on, when they agree on one."""
    names = set()
    for record_file in Path(jobs_dir).glob("*/job.json"):
        try:
            names.add(json.loads(record_file.read_text())["profile"])
        except (OSError, ValueError, KeyError):
            continue
    return names.pop() if len(names) == 1 else None


def _say_if_failed(job: Any, state: Any) -> None:
    if state.value != "COMPLETED":
        print(f"job {job.job_id} ended {state.value}: {job.reason or 'see the log'}\n"
              f"  log: {job.log_path}\n  diagnose: workshop diagnose {job.log_path}")


def _say_slurms_final_states(jobs: Sequence[Any]) -> None:
    """A job whose watch ended before Slurm's accounting confirmed it (its saved row said so): ask Slurm now,
    which writes its final state into job.json, and say it beside the table. Never while grading (the saved
    jobs are all there is)."""
    if grading():
        return
    for job in jobs:
        record = getattr(job, "record", None)
        if record is None or record.settled or not record.job_state.finished:
            continue
        state = job.state()
        if job.record.settled:
            print(f"job {job.job_id}: Slurm's final state {state.value}, elapsed {job.elapsed() or 0:.0f} s "
                  "(its job table above was saved before Slurm confirmed it)")
        else:
            print(f"job {job.job_id}: {state.value} by its log; Slurm's accounting has not confirmed it yet: "
                  "run this cell again later")


class Lab:
    """One assignment's jobs, on one site profile, with the notebook's parameter overrides."""

    def __init__(self, profile: str | Path | Profile | None = None, jobs_dir: str | Path = "jobs",
                 overrides: Mapping[str, Any] | None = None, quiet: bool = False) -> None:
        self.jobs_dir = Path(jobs_dir)
        if profile is None and grading():
            profile = saved_profile(self.jobs_dir)   # grade on the site the student's jobs ran on
        self.profile = load_profile(profile)
        self.overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        Path("tables").mkdir(exist_ok=True)
        Path("plots").mkdir(exist_ok=True)
        if not quiet:
            mode = "grading: reading saved jobs only" if grading() else f"backend {self.profile.backend}"
            print(f"profile {self.profile.name!r} ({self.profile.description}); {mode}; jobs in {self.jobs_dir}/")

    @property
    def scratch(self) -> Path:
        """This site's scratch folder for large, passing files (a merged checkpoint): the profile's
        `[env] scratch`, else the system's temporary folder. Never the notebook's folder, which is collected."""
        import tempfile

        from workshop.slurm.profiles import scratch_folder

        folder = scratch_folder(self.profile) or Path(tempfile.gettempdir())
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    # ------------------------------------------------------------------ configs and predictions
    def config(self, step: str, **changes: Any) -> RunConfig:
        """The config `run(step, **changes)` would submit (step < profile < notebook < this call).

        A setting given as None is a blank the student has not filled in: it stops here, naming the
        setting, rather than running the site's default in its place."""
        from workshop.slurm.steps import step_config
        from workshop.training.config import ConfigError

        for name, value in changes.items():
            if value is None:
                raise ConfigError(name, "is None, a blank not filled in yet",
                                  f"write the value you choose for {name} (leave a setting out to get the "
                                  f"site's default: `lab.config({step!r})` shows it)")
        return step_config(step, self.profile, {**self.overrides, **changes})

    def predict(self, step: str, **changes: Any) -> pd.Series:
        """The memory model's per-GPU prediction for that run, in MB per component."""
        from workshop.results.memory import estimate_config

        bd = estimate_config(self.config(step, **changes))
        return pd.Series(bd.as_mb(), name="predicted MB per GPU").round(1)

    def paper(self, step: str, **changes: Any) -> pd.DataFrame:
        """That run at its full size on paper: its dry run (workshop.training.dryrun: the job's own code on fake
        tensors, in a fake process group of its world size) beside the memory model, rank 0's MB by category,
        its FLOPs and the MB it sends per optimizer step by collective. For a case no job of the course runs
        (an 8-GPU node, 2 nodes x 8): notebooks show it with `checks.reveal(lambda: lab.paper(...))`, so it is
        computed only while grading, after the student's own prediction. Cached by the config's hash in
        jobs/.dryrun and in the grader's own cache (one dry run serves every student graded)."""
        import subprocess

        from workshop.results.memory import estimate_config
        from workshop.slurm.fit import CACHE

        cfg = self.config(step, **changes)
        same_rank = {**cfg.to_dict(), "device": "cpu"}   # the model asked for what the dry run runs: a CPU rank
        try:
            result = cached_dry_run(cfg, [self.jobs_dir / CACHE, shared_dry_run_cache()],
                                    PAPER_GRADING_S if grading() else None)
        except subprocess.TimeoutExpired:   # a reveal must never fail a graded notebook (nbgrader's cell timeout)
            sets = " ".join(f"--set {k}={v}" for k, v in {**self.overrides, **changes}.items())
            return pd.DataFrame({"dry run": [f"still running after {PAPER_GRADING_S} s while grading (the next "
                                             f"notebook graded shows it); this computes it too: workshop dryrun "
                                             f"{step} --profile {self.profile.name} {sets}"]})
        return paper_table(result, estimate_config(same_rank).as_mb())

    def memory(self, jobs: Sequence[Any], names: Sequence[str] | None = None) -> pd.DataFrame:
        """Predicted vs measured tensor memory per category (MB) for each job, on its busiest rank.

        Rows: (run, category) for params, grads, optimizer, activations, other, peak (and host_* under
        offload); columns predicted_mb, measured_mb, rel_error. `lab.plot("memory_categories", table)`
        draws it as stacked bars."""
        from workshop.results.memory_compare import device_notes, memory_table

        sources = [self._source(j) for j in jobs]
        table = memory_table(sources, names)
        for note in device_notes(sources, names):     # a prediction for the site's GPUs beside a CPU run: why
            print(f"note: {note}")
        return table

    def comm(self, jobs: Sequence[Any], names: Sequence[str] | None = None, predicted: Mapping[str, Any] | None = None,
             measure: str = "sent_elements") -> pd.DataFrame:
        """The collectives of each job's recorded step beside the communication model (and `predicted`,
        {name: {kind: value}}, a prediction of your own), per rank and step, by kind; "not measured" and
        why for a job that recorded none (workshop.comm.compare.comm_table).
        `lab.plot("comm", table)` draws it."""
        from workshop.comm.compare import comm_table

        return comm_table([self._source(j) for j in jobs], names, predicted, measure)

    def network(self, jobs: Sequence[Any], names: Sequence[str] | None = None, by: str = "rank",
                split_kinds: bool = False) -> pd.DataFrame:
        """What crosses between nodes per rank or per node, measured beside the model, and per node by kind
        with `split_kinds` (workshop.comm.compare.network_table)."""
        from workshop.comm.compare import network_table

        return network_table([self._source(j) for j in jobs], names, by, split_kinds)

    def timeline(self, job: Any) -> pd.DataFrame:
        """One job's recorded step per rank: compute, collective, overlapped and exposed milliseconds;
        "not measured" and why (NaN, never 0) where it recorded none (comm_compare.timeline_table).
        `lab.plot("timeline", job)` draws the same step."""
        from workshop.comm.compare import timeline_table

        return timeline_table(self._source(job))

    def gpu_counts(self, step: str = "multi_gpu") -> list[int]:
        """1, 2, 4, ... up to the GPUs of one node of the step's partition (CPU profiles: up to 4)."""
        from workshop.slurm.steps import gpu_counts

        return gpu_counts(self.profile, step)

    def scaling_plan(self, counts: Sequence[int] | None = None) -> Any:
        """Notebook 04's plan on this site: GPU counts, micro-batch per GPU, the global batch to keep
        (`workshop.slurm.steps.ScalingPlan`, the one the class budget also reads)."""
        from workshop.slurm.steps import scaling_plan

        return scaling_plan(self.profile, self.overrides, counts)

    # ------------------------------------------------------------------ jobs
    def run(self, step: str, wait: bool = True, resubmit: bool = False, **changes: Any) -> Any:
        """Submit `step` with `changes` (once: a re-run cell finds its job), then watch it finish."""
        from workshop.slurm import submit

        if grading():
            return self.find(step, **changes)
        job = submit(step, self.config(step, **changes), self.profile, resubmit=resubmit, jobs_dir=self.jobs_dir)
        if wait:
            _say_if_failed(job, job.wait())
        return job

    def find(self, step: str, **changes: Any) -> Any:
        """The newest job in jobs/ that ran `step` with these settings, matched on them alone (and the
        notebook's overrides), whatever else it chose; submits nothing. A test cell reads through it
        the job the student's own settings ran (`lab.find("multi_gpu", procs_per_node=4)`)."""
        job = find_saved(step, self.config(step, **changes), self.jobs_dir, keys=[*self.overrides, *changes])
        if job is None:
            raise NoSavedJob(f"no saved job for step {step!r} with {changes or 'the default settings'} in "
                             f"{self.jobs_dir}/: run every cell (so its job runs) before you submit")
        return job

    def run_all(self, runs: Mapping[Any, Mapping[str, Any]], wait: bool = True, resubmit: bool = False) -> Any:
        """Submit every run of a cell at once, `{name: dict(step=..., **changes)}`, and watch them in one
        display; a `JobGroup` (a mapping name -> job, with `.wait()` and `.cancel()` for all of them).

        Every config is checked before the first job is submitted; the jobs then queue side by side. A
        re-run cell finds its jobs; while grading, each is read back from the saved jobs as `run` does.
        """
        from workshop.slurm.group import JobGroup, submit_all

        if grading():
            return JobGroup({name: self.run(**spec) for name, spec in runs.items()})
        specs = {name: (spec["step"], self.config(**spec)) for name, spec in runs.items()}
        group = submit_all(specs, self.profile, jobs_dir=self.jobs_dir, resubmit=resubmit)
        if wait:
            for name, state in group.wait().items():
                _say_if_failed(group[name], state)
        return group

    @staticmethod
    def script(job: Any) -> None:
        """Print the batch script the job ran: what you would `sbatch` by hand."""
        print(job.script)

    # ------------------------------------------------------------------ tables and plots
    def table(self, kind: str, jobs: Sequence[Any], bandwidth: Sequence[Any] = (), names: Sequence[str] | None = None,
              index: str | None = None, save: str | None = None) -> pd.DataFrame:
        """The exercise table of `kind` (baseline, fsdp, strategies, scaling, multinode), from the logs.

        `names` labels the rows (one per job, in order); `index` uses a column instead."""
        from workshop.results.tables import build

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            df = build(kind, [self._source(j) for j in jobs], [self._source(b) for b in bandwidth])
        notes, speed = df.attrs.get("notes", []), df.attrs.get("speed_notes", [])
        if names is not None:
            if len(names) != len(df):
                raise ValueError(f"{len(names)} names for {len(df)} rows")
            df.index = pd.Index(list(names), name="run")
        elif index is not None:
            df = df.set_index(index)
        df.attrs["notes"], df.attrs["speed_notes"] = notes, speed
        for note in speed:       # a figure the log shows otherwise, or a difference within the noise: why
            print(f"note: {note}")
        if save:
            df.to_csv(Path("tables") / f"{save}.csv")
        self._say_the_gpu_figures(kind, jobs)
        _say_slurms_final_states(jobs)
        return df

    def _say_the_gpu_figures(self, kind: str, jobs: Sequence[Any]) -> None:
        """Beside a table of CPU runs, one line: the same configuration on a real GPU, from the newest committed
        bench result (workshop.bench.gpu_reference); nothing when none exists or a run was on a GPU."""
        from workshop.bench.gpu_reference import line
        from workshop.results.logs import load

        try:
            devices = {(load(self._source(j)).summary or {}).get("device") for j in jobs}
        except (OSError, ValueError):   # the table was built from these: an extra line never breaks it
            return
        if devices == {"cpu"} and (said := line(kind)):
            print(said)

    @staticmethod
    def _source(job: Any) -> Any:
        """A job's log file (the record of what ran); a path or parsed log is passed through."""
        return job.log_path if hasattr(job, "log_path") else job

    def plot(self, kind: str, jobs: Sequence[Any], save: str | None = None, **kw: Any) -> Any:
        """loss | scaling | bandwidth | memory | memory_categories | comm | timeline plots, saved as PNG under
        plots/ when `save` is given. memory_categories takes jobs (or the table `memory(jobs)` returned):
        predicted and measured tensor memory per category, stacked, one pair of bars per job; comm takes
        jobs (or `comm(jobs)`'s table): the collectives by kind, prediction beside measurement; timeline
        takes one job: its recorded step, one row per rank, compute and each collective."""
        from workshop.results import plots

        path = Path("plots") / f"{save}.png" if save else None
        if kind == "timeline":  # one job's recorded step (its run folder holds the trace)
            from workshop.comm import plots as comm_plots
            from workshop.comm.compare import run_status

            job = jobs[0] if isinstance(jobs, (list, tuple)) else jobs
            status = run_status(self._source(job))
            return comm_plots.step_timeline(job, path=path, why_missing=None if status == "measured" else status)
        sources = [self._source(j) for j in jobs] if not isinstance(jobs, pd.DataFrame) else []
        if kind == "loss":
            return plots.loss_curves(sources, path)
        if kind == "scaling":
            return plots.scaling_plot(sources, path, efficiency_labels=kw.get("efficiency_labels", True))
        if kind == "bandwidth":
            return plots.bandwidth_plot(sources, path)
        if kind == "memory":
            return plots.memory_bars(kw["labels"], kw["predicted"], kw["measured"], path=path)
        if kind == "memory_categories":
            table = jobs if isinstance(jobs, pd.DataFrame) else self.memory(jobs, kw.get("names"))
            return plots.memory_category_bars(table, path=path)
        if kind == "comm":
            from workshop.comm import plots as comm_plots

            table = jobs if isinstance(jobs, pd.DataFrame) else self.comm(jobs, kw.get("names"), kw.get("predicted"))
            return comm_plots.comm_bars(table, path=path)
        raise ValueError(f"unknown plot kind {kind!r}: use loss, scaling, bandwidth, memory, memory_categories, "
                         "comm or timeline")


# ---------------------------------------------------------------------- autograded checks


# a reveal cell dry-runs at most two configurations while nbgrader grades, within its cell timeout
# (nbgrader_config.py: c.Execute.timeout = 120 s): each gets 55 s; a cached one costs nothing
PAPER_GRADING_S = 55
PAPER_CATEGORIES = ("params", "grads", "optimizer", "activations", "other", "peak")


def shared_dry_run_cache() -> Path:
    """The shared cache of dry runs ($WORKSHOP_DRYRUN_CACHE: workshop.slurm.fit.shared_cache), else the
    account's own ($XDG_CACHE_HOME, else ~/.cache): a dry run depends on the config only, so a grader's second
    student's reveal reads the first one's."""
    from workshop.slurm.fit import shared_cache

    account = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return shared_cache() or account / "fsdp-workshop" / "dryrun"


def cached_dry_run(cfg: RunConfig, caches: Sequence[Path], timeout: float | None = None) -> dict[str, Any]:
    """The dry run of `cfg` from the first cache that holds it, else run once (workshop.slurm.fit.dry_run, a
    process of its own) and written to every cache that can be written. With `timeout` (grading), the dry run
    fills the last cache in a process of its own that outlives the wait: past `timeout` it goes on, and the
    next notebook graded reads it (subprocess.TimeoutExpired here)."""
    from workshop.slurm.fit import config_hash, dry_run, read_cached, write_cached

    name = f"{config_hash(cfg)}.json"
    if (found := read_cached(list(caches), name)) is not None:
        return found
    result = dry_run(cfg, caches[0]) if timeout is None else _fill_in_background(cfg, caches[-1], name, timeout)
    for cache in caches:
        write_cached(cache, name, result)
    return result


FILL = ("import pathlib, sys\nfrom workshop.training.config import load_config\n"
        "from workshop.slurm.fit import dry_run\n"
        "try:\n    dry_run(load_config(sys.argv[1]), pathlib.Path(sys.argv[2]))\n"
        "finally:\n    pathlib.Path(sys.argv[3]).unlink(missing_ok=True)\n"
        "    pathlib.Path(sys.argv[1]).unlink(missing_ok=True)\n")
STALE_S = 900   # a marker older than this is a filler that died: start another


def _fill_in_background(cfg: RunConfig, cache: Path, name: str, timeout: float) -> dict[str, Any]:
    """Start (once per machine: a marker file says one runs) the dry run that writes `cache/name`, and wait
    for it up to `timeout` seconds; one another grading started is not waited for (each grading would)."""
    import subprocess
    import sys
    import time

    cache.mkdir(parents=True, exist_ok=True)
    marker, config = cache / f"{name}.running", cache / f"{name}.config.json"
    if marker.is_file() and time.time() - marker.stat().st_mtime <= STALE_S:
        timeout = 0
    else:
        cfg.to_json(config)
        marker.write_text(str(os.getpid()))
        subprocess.Popen([sys.executable, "-c", FILL, str(config), str(cache), str(marker)], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (cache / name).is_file():
            return json.loads((cache / name).read_text())
        time.sleep(0.5)
    raise subprocess.TimeoutExpired("workshop dry run", timeout)


def paper_table(result: Mapping[str, Any], model_mb: Mapping[str, float]) -> pd.DataFrame:
    """A dry run's rank 0 beside the memory model: MB by category, FLOPs per step, MB sent per collective."""
    dry, model = "dry run (fake tensors, CPU device: tensor bytes only)", "memory model (the same CPU rank)"
    rows = {f"{c} (MB)": {dry: round(result["memory_mb"][c], 1), model: round(model_mb[c], 1)}
            for c in PAPER_CATEGORIES if c in result["memory_mb"]}
    rows["TFLOP per optimizer step"] = {dry: round(result["flops_per_step"] / 1e12, 3), model: ""}
    for kind, sent in sorted(result["comm"]["by_kind"].items()):
        rows[f"{kind}: MB sent per step"] = {dry: round(sent["bytes"] / 2**20, 1), model: ""}
        rows[f"{kind}: calls per step"] = {dry: sent["calls"], model: ""}
    return pd.DataFrame(rows).T.astype(object)   # each figure at its own precision


def _value(table: Any, row: Any, column: str) -> Any:
    if row is None:
        return table[column]
    if isinstance(table, pd.DataFrame):
        return table.loc[row, column]
    return table[row][column]


def check(answers: Any, column: str, measured: pd.DataFrame | Mapping[str, Any], row: Any = None,
          rel: float = 0.02, abs_tol: float = 0.011) -> None:
    """Autograded: the student's number for (row, column) equals what their job's log says.

    The older form of `workshop.student.checks.number` (which records the answer for the independent verdict):
    `measured` is the table built from the student's own saved logs. Rounding to two decimals, or to
    2 %, is accepted; a number typed from someone else's run is not.
    """
    from workshop.student import checks

    where = f"{column}" + (f" for {row!r}" if row is not None else "")
    try:
        got = _value(answers, row, column)
    except (KeyError, IndexError, TypeError):
        raise AssertionError(f"your table has no value for {where}") from None
    checks.number(got, _value(measured, row, column), where, rel=rel, abs_tol=abs_tol)

