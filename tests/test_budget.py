"""The class budget of docs/instructor.md is computed from the example profile (it cannot drift), and
the instructor-run mode hands students the instructor's costly jobs as if they were their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from workshop.budget import budget_rows, costs, markdown, main
from workshop.config import ConfigError
from workshop.profiles import PROFILES_DIR, load_profile

ROOT = Path(__file__).resolve().parent.parent
SITE = load_profile("example-hpc")


def test_the_instructor_guide_states_the_computed_budget() -> None:
    guide = (ROOT / "docs/instructor.md").read_text()
    assert "## Class budget" in guide
    assert markdown(SITE, 20) in guide, "docs/instructor.md's table differs: paste `python -m workshop.budget`"


def test_gpu_hours_are_gpus_times_the_time_limit() -> None:
    by_run = {(c.notebook, c.run): c for c in costs(SITE)}
    base = by_run[("01_baseline", "baseline")]
    assert (base.gpus, base.hours, base.costly) == (1, 20 / 60, False)       # 1 V100 x 00:20:00
    gate = by_run[("05_multi_node", "bandwidth gate")]
    assert (gate.nodes, gate.gpus, gate.hours, gate.costly) == (2, 16, 5 / 60, True)
    eight = by_run[("04_multi_gpu", "8 GPU(s)")]
    assert eight.gpus == 8 and eight.costly


def test_notebook_04s_runs_are_the_plan_the_notebook_reads() -> None:
    """The instructor's 04 jobs are the right answer to the notebook's settings exercise: the largest
    micro-batch and the accumulation that keeps the plan's global batch (the same jobs, so handed over)."""
    from workshop.budget import notebook_runs
    from workshop.slurm.steps import scaling_plan

    plan = scaling_plan(SITE)
    runs = notebook_runs(SITE)["04_multi_gpu"]
    assert list(runs) == [f"{n} GPU(s)" for n in plan.gpu_counts] and plan.gpu_counts[-1] == 8
    for n in plan.gpu_counts:
        spec = runs[f"{n} GPU(s)"]
        assert spec["batch_size"] == plan.micro_batch and spec["batch_size"] * spec["grad_acc"] * n == plan.global_batch
    rows = {r["notebook"]: r for r in budget_rows(SITE, 20)}
    assert rows["01_baseline"]["gpu_h_class"] == pytest.approx(20 * 20 / 60)
    nb5 = rows["05_multi_node"]
    assert nb5["gpu_h_class_instructor_run"] < nb5["gpu_h_class"] / 5          # 2-node rows run once


def test_cli_prints_the_table(capsys: pytest.CaptureFixture) -> None:
    assert main(["--profile", "example-hpc", "--students", "20"]) == 0
    out = capsys.readouterr().out
    assert markdown(SITE, 20) in out and "requested allocation" in out


def test_instructor_run_mode_gives_students_the_instructors_job(tmp_path: Path) -> None:
    from workshop.slurm import JobState, submit

    shared = tmp_path / "instructor-jobs"
    profile = tmp_path / "classroom.toml"
    profile.write_text((PROFILES_DIR / "local.toml").read_text().replace('name = "local"', 'name = "classroom"')
                       + f'\n[course]\ninstructor_jobs = "{shared}"\ninstructor_min_gpus = 2\n')
    costly = {"procs_per_node": 2}
    with pytest.raises(ConfigError, match="instructor_jobs.*--instructor-run"):    # not run yet
        submit("bandwidth", profile=profile, overrides=costly, jobs_dir=tmp_path / "student" / "jobs")
    theirs = submit("bandwidth", profile=profile, overrides=costly, jobs_dir=shared)      # the instructor, once
    assert theirs.wait(timeout=180, poll=0.2) is JobState.COMPLETED, theirs.tail(40)
    mine = submit("bandwidth", profile=profile, overrides=costly, jobs_dir=tmp_path / "student" / "jobs")
    assert mine.job_id == theirs.job_id and mine.state() is JobState.COMPLETED
    link = tmp_path / "student" / "jobs" / theirs.job_dir.name
    assert link.is_symlink() and link.resolve() == theirs.job_dir.resolve()
    assert "# PASSED" in mine.tail(20)
    cheap = submit("bandwidth", profile=profile, overrides={"procs_per_node": 1, "sharding": "none"},
                   jobs_dir=tmp_path / "student" / "jobs")
    assert cheap.job_dir.parent == tmp_path / "student" / "jobs" and not cheap.job_dir.is_symlink()  # own job
    cheap.wait(timeout=180, poll=0.2)
