"""Notebook 03's budget challenge: the grid keeps the global batch, the committed sweep is this site's and
its budget binds, and a choice is ranked by the sweep's own figures (noise in a student's run cannot fail it)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from workshop.course import challenge
from workshop.course.budget import STATIC_RUNS
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


def make_sweep(rows: list[tuple[str, int, float, float]]) -> challenge.Sweep:
    full = [dict(sharding=s, offload=False, activation_checkpointing=False, batch_size=mb, grad_acc=8 // (2 * mb),
                 peak_mem_mb=peak, samples_per_s=speed) for s, mb, peak, speed in rows]
    return challenge.Sweep(8, 20.0, "2026-11-23", "here", {}, full)


def settings(sharding: str, mb: int) -> dict:
    return dict(sharding=sharding, offload=False, activation_checkpointing=False, batch_size=mb, grad_acc=8 // (2 * mb))


def test_a_choice_is_ranked_among_those_that_fit_by_the_sweeps_own_throughput() -> None:
    sweep = make_sweep([("ddp", 4, 30.0, 99.0), ("ddp", 2, 18.0, 10.0), ("ddp", 1, 12.0, 9.5),
                        ("full_shard", 2, 17.0, 8.0), ("full_shard", 1, 11.0, 7.0), ("shard_grad_op", 1, 11.5, 5.0)])
    assert sweep.near_best(settings("ddp", 2)).startswith("rank 1 of 5")     # the fastest that fits
    assert "rank 3" in sweep.near_best(settings("full_shard", 2))           # top 3
    with pytest.raises(AssertionError, match="over the 20 MB budget"):
        sweep.near_best(settings("ddp", 4))                                  # fastest, but it does not fit
    with pytest.raises(AssertionError, match="ranks this choice 5 of the 5"):
        sweep.near_best(settings("shard_grad_op", 1))
    with pytest.raises(AssertionError, match="not one of the sweep's"):
        sweep.near_best(settings("ddp", 3) | {"grad_acc": 1})
    # within 90 % of the fastest counts too, whatever the rank
    close = make_sweep([("ddp", 2, 18.0, 10.0), ("ddp", 1, 12.0, 9.9), ("full_shard", 2, 17.0, 9.8),
                        ("full_shard", 1, 11.0, 9.7), ("shard_grad_op", 1, 11.5, 9.1)])
    assert "rank 5 of 5" in close.near_best(settings("shard_grad_op", 1))


def test_the_budget_falls_in_a_gap_between_peaks() -> None:
    budget = challenge.choose_budget([10.0, 10.5, 11.0, 20.0, 21.0, 22.0])
    assert 11.0 < budget < 20.0


def test_the_class_budget_counts_the_notebooks_jobs() -> None:
    """workshop/course/budget.py's copy of notebook 03's runs: the five strategies and the solution's challenge job."""
    runs = eval(solution_cell("nb03-runs-reference").split("STRATEGY_RUNS =", 1)[1], {"dict": dict})
    written = solution_cell("nb03-05-predict").split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
    assert eval(written.split("runs =", 1)[1], {"dict": dict}) == runs    # the model answer writes what the tests read
    settings_source = solution_cell("nb03-settings").split("### BEGIN SOLUTION")[1]
    mine = next(n.value for n in ast.walk(ast.parse(settings_source))
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "my_settings")
    solution = eval(compile(ast.Expression(mine), "<settings>", "eval"), {"dict": dict})
    assert STATIC_RUNS["03_sharding_strategies"] == {**runs, "budget challenge": dict(step="strategies", **solution)}


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

    line = line_with(fenced(ROOT / "docs" / "instructor.md", "## Before the workshop"), "workshop.course.challenge")
    assert line == "python -m workshop.course.challenge --profile <site>"
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
