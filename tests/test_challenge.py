"""Notebook 03's budget challenge: the grid keeps the global batch, the committed sweep is this site's and
its budget binds, and a choice is judged by rules no clock decides (noise in anyone's run cannot fail it)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from workshop.student import challenge
from workshop.student.runs import STATIC_RUNS
from workshop.results.memory import estimate_config
from workshop.slurm.profiles import load_profile

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "solutions/03_sharding_strategies/03_sharding_strategies.ipynb"
LOCAL = load_profile("local")


def solution_cell(cell_id: str) -> str:
    cells = {c["id"]: c for c in json.loads(NOTEBOOK.read_text())["cells"]}
    return "".join(cells[cell_id]["source"])


def test_every_choice_of_the_grid_makes_the_global_batch() -> None:
    batch = challenge.global_batch(LOCAL)
    choices = challenge.grid(2, batch)
    assert batch == 8 and len(choices) == 30       # 5 strategy variants x 2 (checkpointing) x 3 micro-batches
    assert all(c["batch_size"] * c["grad_acc"] * 2 == batch for c in choices)
    assert not any(c["offload"] for c in choices if c["sharding"] == "ddp")


def test_the_committed_sweep_is_this_sites_and_its_budget_binds() -> None:
    sweep = challenge.load_sweep(LOCAL)
    assert sweep.signature == challenge.signature(LOCAL) and sweep.measured_at
    assert sorted(map(challenge.key, sweep.rows)) == sorted(map(challenge.key, challenge.grid(2, sweep.global_batch)))
    peaks = [r["peak_mem_mb"] for r in sweep.rows]
    assert min(peaks) < sweep.budget_mb < max(peaks)                      # some choices exceed it
    assert all(abs(p - sweep.budget_mb) > 0.03 * sweep.budget_mb for p in peaks)   # none on its edge
    # the test cluster runs the same step config: it finds the same sweep, and runs none of its own
    assert challenge.load_sweep(load_profile("ci")).rows == sweep.rows


def test_the_sweeps_peaks_are_what_the_memory_model_predicts() -> None:
    sweep = challenge.load_sweep(LOCAL)
    base = challenge.signature(LOCAL)
    for row in sweep.rows:
        cfg = {**base, **{k: row[k] for k in challenge.CHOICES}}
        predicted = estimate_config(cfg, row["batch_shape"]).total_mb
        assert predicted == pytest.approx(row["peak_mem_mb"], rel=0.15), row


def make_sweep(rows: list[tuple[str, bool, bool, int, float, float]]) -> challenge.Sweep:
    full = [dict(sharding=s, offload=off, activation_checkpointing=ac, batch_size=mb, grad_acc=8 // (2 * mb),
                 peak_mem_mb=peak, samples_per_s=speed) for s, off, ac, mb, peak, speed in rows]
    return challenge.Sweep(8, 20.0, "2026-11-23", "here", {}, full)


def settings(sharding: str, mb: int, offload: bool = False, ac: bool = False) -> dict:
    return dict(sharding=sharding, offload=offload, activation_checkpointing=ac, batch_size=mb, grad_acc=8 // (2 * mb))


def test_a_choice_that_pays_for_nothing_it_needs_is_never_ranked_by_a_clock() -> None:
    """Dominance, not throughput: the sweep's speeds (here deliberately upside down, as one noisy run can
    make them) play no part; a choice fails only when a choice of its strategy that fits does less work."""
    sweep = make_sweep([("ddp", False, False, 2, 18.0, 1.0), ("ddp", False, False, 4, 30.0, 99.0),
                        ("ddp", False, True, 2, 12.0, 50.0), ("ddp", False, True, 4, 19.0, 60.0),
                        ("full_shard", False, False, 2, 17.0, 2.0), ("full_shard", True, False, 2, 15.0, 90.0),
                        ("full_shard", False, False, 4, 25.0, 3.0)])
    model = {challenge.key(r): r["peak_mem_mb"] for r in sweep.rows}
    predicted = lambda c: model[challenge.key(c)]   # noqa: E731 - the memory model agrees with the sweep here
    assert sweep.dominated_by(settings("ddp", 2), predicted) == []            # the slowest in the sweep: fine
    assert sweep.dominated_by(settings("ddp", 4, ac=True), predicted) == []   # does not fit: the budget check's job
    assert sweep.dominated_by(settings("ddp", 2, ac=True), predicted) == [settings("ddp", 2), settings("ddp", 4, ac=True)]
    assert sweep.dominated_by(settings("full_shard", 2, offload=True), predicted) == [settings("full_shard", 2)]
    # a choice that fits by measurement but not by the memory model the student asks is no alternative to it
    pessimistic = lambda c: 21.0 if c == settings("ddp", 2) else model[challenge.key(c)]   # noqa: E731
    assert sweep.dominated_by(settings("ddp", 2, ac=True), pessimistic) == [settings("ddp", 4, ac=True)]
    with pytest.raises(AssertionError, match="not one of the sweep's"):
        sweep.dominated_by(settings("ddp", 3) | {"grad_acc": 1}, predicted)


def test_on_this_site_every_strategy_has_a_reasoned_choice_that_passes() -> None:
    """The committed sweep with the course's own memory model: DDP at micro-batch 1 (the issue's student, who
    followed 'when a replica fits, DDP is usually faster') passes, and so do full_shard and shard_grad_op
    done right; offload or checkpointing where a plain run fits does not."""
    from workshop.student.lab import Lab

    lab = Lab("local", jobs_dir="/nonexistent", quiet=True)
    sweep = challenge.load_sweep(LOCAL)
    predicted = lambda c: float(lab.predict(challenge.STEP, **c)["peak"])   # noqa: E731
    choices = [{k: r[k] for k in challenge.CHOICES} for r in sweep.rows]
    passing = [c for c in choices if sweep.fits(c) and not sweep.dominated_by(c, predicted)]
    assert {c["sharding"] for c in passing} == set(challenge.STRATEGIES)
    assert settings("ddp", 1) in passing and settings("full_shard", 1) in passing
    assert settings("full_shard", 1, offload=True) not in passing and settings("ddp", 1, ac=True) not in passing


def test_the_budget_falls_in_a_gap_between_peaks() -> None:
    budget = challenge.choose_budget([10.0, 10.5, 11.0, 20.0, 21.0, 22.0])
    assert 11.0 < budget < 20.0


def test_the_class_budget_counts_the_notebooks_jobs() -> None:
    """workshop/student/runs.py's copy of notebook 03's runs: the five strategies and the solution's challenge job;
    the notebook's checks read what each run's name means from there."""
    written = solution_cell("nb03-05-predict").split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
    runs = eval(written.split("runs =", 1)[1], {"dict": dict})
    settings_source = solution_cell("nb03-settings").split("### BEGIN SOLUTION")[1]
    mine = next(n.value for n in ast.walk(ast.parse(settings_source))
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "my_settings")
    solution = eval(compile(ast.Expression(mine), "<settings>", "eval"), {"dict": dict})
    assert STATIC_RUNS["03_sharding_strategies"] == {**runs, "budget challenge": dict(step="strategies", **solution)}
    assert 'STATIC_RUNS["03_sharding_strategies"]' in solution_cell("nb03-runs-reference")


def test_the_guides_sweep_command_runs_the_grid_into_instructor_jobs_and_hands_a_students_choice_over(
        tmp_path: Path) -> None:
    """docs/instructor.md's step 6 as written, <site> a copy of the local profile whose instructor-run mode covers
    notebook 03 (`instructor_steps = ["strategies"]`): the command submits every choice of the grid into
    instructor_jobs, and a student's challenge job (the model answer's settings) is handed the sweep's job.
    The jobs are cancelled once all are submitted: the sweep's figures are the committed sweep's tests'."""
    import os
    import signal
    import subprocess
    import time

    from tests.test_budget import local_site
    from tests.test_docs_commands import fenced, line_with
    from workshop.slurm import Job, submit

    line = line_with(fenced(ROOT / "docs" / "instructor.md", "## Before the workshop"), "workshop.student.challenge")
    assert line == "python -m workshop.student.challenge --profile <site>"
    shared = tmp_path / "instructor-jobs"
    site = local_site(tmp_path / "site.toml", instructor_jobs=shared, instructor_steps=["strategies"])
    profile = load_profile(site)
    grid = challenge.grid(2, challenge.global_batch(profile))
    mine = STATIC_RUNS["03_sharding_strategies"]["budget challenge"]
    assert {k: v for k, v in mine.items() if k != "step"} in grid
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKSHOP_", "SLURM_"))}
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"
    log = open(tmp_path / "sweep.log", "w")
    sweep = subprocess.Popen(["bash", "-c", line.replace("<site>", str(site))], cwd=tmp_path, env=env,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while len(list(shared.glob("strategies-*/job.json"))) < len(grid):
            assert sweep.poll() is None, (tmp_path / "sweep.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the sweep did not submit its grid in 240 s"
            time.sleep(0.5)
        assert not (tmp_path / "sweep-jobs").exists()
        student = submit("strategies", profile=profile, overrides={k: v for k, v in mine.items() if k != "step"},
                         jobs_dir=tmp_path / "student" / "jobs")
        assert student.job_dir.parent == shared and (tmp_path / "student" / "jobs" / student.job_dir.name).is_symlink()
    finally:
        os.killpg(sweep.pid, signal.SIGTERM)
        sweep.wait(timeout=60)
        log.close()
        for record in shared.glob("*/job.json"):
            Job.load(record.parent).cancel()
