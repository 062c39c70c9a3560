"""The class budget of docs/instructor.md is computed from the example profile (it cannot drift), and
the instructor-run mode hands students the instructor's costly jobs as if they were their own."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from workshop.cli import main
from workshop.site.budget import DRY_RUN, SWEEP, budget_rows, costs, disk_markdown, disk_rows, markdown
from workshop.training.config import ConfigError
from workshop.slurm.profiles import PROFILES_DIR, ProfileError, load_profile

ROOT = Path(__file__).resolve().parent.parent
SITE = load_profile("example-hpc")


def test_the_instructor_guide_states_the_computed_budget() -> None:
    guide = (ROOT / "docs/instructor.md").read_text()
    assert "## Class budget" in guide
    assert markdown(SITE, 20) in guide, "docs/instructor.md's table differs: paste `workshop budget`'s table"
    assert "## Disk" in guide and disk_markdown(SITE, 20) in guide.split("## Disk", 1)[1]


def test_the_budget_has_the_sweep_the_dry_run_and_reruns() -> None:
    """Nothing the class needs is missing: notebook 03's challenge sweep (its whole grid, once), the dry run
    (one student's course, once) and a rerun allowance on the students' jobs."""
    from workshop.student import challenge

    rows = {r["notebook"]: r for r in budget_rows(SITE, 20, rerun=0.25)}
    notebooks = [r for name, r in rows.items() if name[:2].isdigit() and name[2] == "_"]
    per_student = sum(r["gpu_h_per_student"] for r in notebooks)
    grid = challenge.grid(4, challenge.global_batch(SITE))                     # 4 V100s, 20 minutes a job
    assert rows[SWEEP]["jobs"] == len(grid) == 40 and rows[SWEEP]["gpu_h_class"] == pytest.approx(40 * 4 / 3)
    assert rows[DRY_RUN]["gpu_h_class"] == pytest.approx(per_student) and rows[DRY_RUN]["jobs"] == 22
    rerun = next(r for name, r in rows.items() if name.startswith("reruns"))
    assert rerun["gpu_h_class"] == pytest.approx(0.25 * 20 * per_student)
    assert "`python -m workshop.student.challenge`" in markdown(SITE, 20)


def test_a_site_can_hand_notebook_03s_jobs_to_the_instructor(tmp_path: Path) -> None:
    """instructor_steps = ["strategies"] (the example site ships it: its day fits only so, tests/test_schedule.py):
    03's five strategy runs are run once; each student's challenge job is one of the sweep's (its own row), so
    03 costs the class the five runs, once. Without the step, every student's six 4-GPU jobs stay theirs."""
    assert SITE.instructor_steps == ("strategies",)
    rows = {r["notebook"]: r for r in budget_rows(SITE, 20)}
    assert rows["03_sharding_strategies"]["gpu_h_class"] == pytest.approx(160.0)
    assert rows["03_sharding_strategies"]["gpu_h_class_instructor_run"] == pytest.approx(5 * 4 / 3)
    site = tmp_path / "site.toml"
    site.write_text((PROFILES_DIR / "example-hpc.toml").read_text().replace(
        'instructor_steps = ["strategies"]', "instructor_steps = []"))
    plain = {r["notebook"]: r for r in budget_rows(load_profile(site), 20)}
    assert plain["03_sharding_strategies"]["gpu_h_class_instructor_run"] == pytest.approx(160.0)
    bad = tmp_path / "bad.toml"
    bad.write_text(site.read_text().replace("instructor_steps = []", 'instructor_steps = ["strategy"]'))
    with pytest.raises(ProfileError, match="instructor_steps"):
        budget_rows(load_profile(bad), 20)


def test_disk_per_student_and_class_is_notebook_05s_checkpoint() -> None:
    """BLOOM-560M: 559,214,592 parameters; the checkpoint keeps fp32 weights and AdamW's two states (12 bytes a
    parameter: 6.7 GB). Notebook 05 reads the checkpoint's index and merges nothing: no merged file is written."""
    (kept,) = disk_rows(SITE, 20)
    assert kept["per_student"] == 559_214_592 * 12 and kept["class"] == 20 * kept["per_student"]
    assert kept["class_instructor_run"] == kept["per_student"]          # 05's 2-node job is the instructor's, once


def test_gpu_hours_are_gpus_times_the_time_limit() -> None:
    by_run = {(c.notebook, c.run): c for c in costs(SITE)}
    base = by_run[("01_baseline", "baseline")]
    assert (base.gpus, base.hours, base.costly) == (1, 20 / 60, False)       # 1 V100 x 00:20:00
    gate = by_run[("05_multi_node", "bandwidth gate")]
    assert (gate.nodes, gate.gpus, gate.hours, gate.costly) == (2, 16, 5 / 60, True)
    eight = by_run[("04_multi_gpu", "8 GPU(s)")]
    assert eight.gpus == 8 and eight.costly


def test_every_gpu_count_of_notebooks_04_and_05_times_at_least_50_steady_steps() -> None:
    """A speed-up measures training only when each run's throughput counts enough steady steps: the warm-up
    and the memory tracker's step are left out (workshop.training.counted_steps), the same rule the runs apply."""
    from workshop.training.counted_steps import counted_steps, warmup_steps

    training = [c for c in costs(SITE) if c.notebook in ("04_multi_gpu", "05_multi_node") and c.steps is not None]
    assert {c.gpus for c in training if c.notebook == "04_multi_gpu"} == {1, 2, 4, 8}
    for c in training:
        assert c.counted_steps == len(counted_steps(c.steps)) == c.steps - warmup_steps(c.steps)   # step 2 is in the warm-up
        assert c.counted_steps >= 50, (c.notebook, c.run, c.steps, c.counted_steps)
    eight = next(c for c in training if c.run == "8 GPU(s)")
    assert (eight.steps, eight.counted_steps) == (63, 57)         # 2,000 examples at a global batch of 32
    rows = {r["notebook"]: r for r in budget_rows(SITE, 20)}
    assert rows["04_multi_gpu"]["min_counted_steps"] == 57 and rows["05_multi_node"]["min_counted_steps"] >= 50
    gate = next(c for c in costs(SITE) if c.run == "bandwidth gate")
    assert gate.steps is None and gate.counted_steps is None     # not a training job


def test_notebook_04s_runs_are_the_plan_the_notebook_reads() -> None:
    """The instructor's 04 jobs are the right answer to the notebook's settings exercise: the largest
    micro-batch and the accumulation that keeps the plan's global batch (the same jobs, so handed over)."""
    from workshop.site.budget import notebook_runs
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
    assert nb5["gpu_h_class_instructor_run"] < nb5["gpu_h_class"] / 4          # 2-node rows run once


@pytest.mark.slow   # the CLI asks sinfo (a process) where Slurm answers
def test_cli_prints_the_table(capsys: pytest.CaptureFixture) -> None:
    """`workshop budget`, one command: the budget's tables first (the day after them: tests/test_schedule.py)."""
    assert main(["budget", "--profile", "example-hpc", "--students", "20"]) == 0
    out = capsys.readouterr().out
    assert markdown(SITE, 20) in out and "requested allocation" in out


def test_instructor_run_mode_gives_students_the_instructors_job(tmp_path: Path) -> None:
    from workshop.slurm import JobState, submit
    from workshop.slurm.jobs import prepare

    shared = tmp_path / "instructor-jobs"
    profile = local_site(tmp_path / "classroom.toml", instructor_jobs=shared, instructor_min_gpus=2)
    costly = {"procs_per_node": 2}
    with pytest.raises(ConfigError, match="instructor_jobs.*--instructor-run"):    # not run yet
        submit("bandwidth", profile=profile, overrides=costly, jobs_dir=tmp_path / "student" / "jobs")
    theirs = submit("bandwidth", profile=profile, overrides=costly, jobs_dir=shared)      # the instructor, once
    assert theirs.wait(timeout=600, poll=0.2) is JobState.COMPLETED, theirs.tail(40)
    mine = submit("bandwidth", profile=profile, overrides=costly, jobs_dir=tmp_path / "student" / "jobs")
    assert mine.job_id == theirs.job_id and mine.state() is JobState.COMPLETED
    link = tmp_path / "student" / "jobs" / theirs.job_dir.name
    assert link.is_symlink() and link.resolve() == theirs.job_dir.resolve()
    assert "# PASSED" in mine.tail(20)
    # a cheap job is the student's own: placed in their folder and queued there (where submit takes it; not run
    # here: the cheap path is every other test's submit, the instructor's the one above)
    cheap = prepare("bandwidth", profile=profile, overrides={"procs_per_node": 1, "sharding": "none"},
                    jobs_dir=tmp_path / "student" / "jobs")
    assert cheap.shared is None and cheap.queues_a_job and cheap.job_dir.parent == tmp_path / "student" / "jobs"


def local_site(path: Path, **course: object) -> Path:
    """A copy of the local profile, named after `path`, with a [course] table (instructor-run mode)."""
    lines = "".join(f"{k} = {json.dumps(str(v) if isinstance(v, Path) else v)}\n" for k, v in course.items())
    path.write_text((PROFILES_DIR / "local.toml").read_text().replace('name = "local"', f'name = "{path.stem}"')
                    + f"\n[course]\n{lines}")
    return path


def guide_command(marker: str) -> str:
    """The `workshop budget ...` command of docs/instructor.md's "Class budget" that contains `marker`."""
    part = (ROOT / "docs/instructor.md").read_text().split("## Class budget", 1)[1]
    found = re.findall(r"`(workshop budget [^`]*)`", part)
    return next(c for c in found if marker in c)


def run_as_written(command: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A guide's command line, typed in the course root with the course's environment first on PATH."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("WORKSHOP_", "SLURM_"))}
    clean.update(PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}", **env)
    return subprocess.run(["bash", "-c", command], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=300)


def test_the_guides_budget_command_prints_the_guides_table() -> None:
    command = guide_command("--students")
    assert command == "workshop budget --profile example-hpc --students 20"
    proc = run_as_written(command)
    assert proc.returncode == 0, proc.stderr
    assert markdown(SITE, 20) in proc.stdout and markdown(SITE, 20) in (ROOT / "docs/instructor.md").read_text()
    assert disk_markdown(SITE, 20) in proc.stdout


def test_the_guides_instructor_run_command_submits_each_costly_job_once(tmp_path: Path) -> None:
    """`workshop budget --profile <site> --instructor-run` as the guide writes it, <site> being a
    copy of the local profile with a [course] table: it submits every costly job (on the local backend the
    2-node jobs of 05) into instructor_jobs, a second run finds them, and a student's cell is handed the
    instructor's folder. The jobs are cancelled once submitted: that they run and are read as the student's
    own is test_instructor_run_mode_gives_students_the_instructors_job's."""
    from workshop.site.budget import is_costly
    from workshop.slurm import Job, submit
    from workshop.slurm.steps import step_config

    command = guide_command("--instructor-run")
    assert command == "workshop budget --profile <site> --instructor-run"
    shared = tmp_path / "instructor-jobs"
    profile = local_site(tmp_path / "site.toml", instructor_jobs=shared, instructor_min_gpus=8)
    site = load_profile(profile)
    expected = [c for c in costs(site) if c.costly]
    assert len(expected) == 5 and all(c.nodes == 2 for c in expected)     # the 2-node jobs of notebook 05
    try:
        first = run_as_written(command.replace("<site>", str(profile)))
        assert first.returncode == 0, first.stderr
        lines = [line.split("\t") for line in first.stdout.splitlines()]
        assert len(lines) == len(expected) and all(Path(folder).parent == shared for _, folder in lines), first.stdout
        assert sorted(p.name for p in shared.glob("*/job.json")) == ["job.json"] * len(expected)
        again = run_as_written(command.replace("<site>", str(profile)))
        assert again.returncode == 0 and again.stdout == first.stdout, again.stdout     # found, not queued twice
        # a student's cell asking for the 2-node hybrid run gets the instructor's job, linked into jobs/
        spec = dict(step="multi_node", nodes=2, procs_per_node=2, sharding="hybrid_shard", hybrid_replicas=2)
        assert is_costly(step_config(spec.pop("step"), site, spec), site)
        mine = submit("multi_node", profile=profile, overrides=spec, jobs_dir=tmp_path / "student" / "jobs")
        assert mine.job_dir.parent == shared and [mine.job_id, str(mine.job_dir)] in lines
        assert (tmp_path / "student" / "jobs" / mine.job_dir.name).is_symlink()
    finally:
        for record in shared.glob("*/job.json"):
            Job.load(record.parent).cancel()


def test_the_guides_budget_table_worked_by_hand() -> None:
    """The table docs/instructor.md states, from the example profile's own numbers and not from the code that
    prints it: each job's GPUs x its step's time limit (20 min; bandwidth 5 min), 20 students.
      01: 1 job x 1 GPU x 1/3 h = 0.33                      02: 5 jobs x 1 GPU x 1/3 h = 1.67
      03: 6 jobs x 4 GPUs (procs_per_node 4) x 1/3 h = 8.00; instructor_steps = ["strategies"]: the five strategy
          runs once, 5 x 4/3 = 6.7, the challenge job one of the sweep's (its own row)
      04: 1, 2, 4 and 8 GPUs x 1/3 h = 5.00; the 8-GPU run (instructor_min_gpus 8) once: 7/3 x 20 + 8/3 = 49.3
      05: bandwidth gate 16 GPUs x 1/12 h = 1.33, failed rendezvous 2 x 1/3, 1 node x 2 2/3, 2 nodes x 1 2/3,
          2 x 2 full_shard 4/3, 2 x 2 hybrid 4/3: 6.00; all but 1 node x 2 (2/3) are 2-node, run once:
          2/3 x 20 + 16/3 = 18.7
      a student's own jobs in instructor-run mode: 1/3 + 5/3 + 0 + 7/3 + 2/3 = 5 GPU-h
      reruns, 25 %: 0.25 x 63/3 = 5.25 per student, x 20 = 105.0; instructor-run 0.25 x 5 x 20 = 25.0
      the challenge sweep: 3 strategies' variants (ddp; full_shard and shard_grad_op with and without offload)
          x checkpointing or not x 4 micro-batches (1, 2, 4, 8 of 8 per GPU) = 40 jobs x 4 GPUs x 1/3 h = 53.3
      the dry run: one student's 22 jobs, 63/3 = 21.0; instructor-run 5.0"""
    guide = (ROOT / "docs/instructor.md").read_text().split("## Class budget", 1)[1].split("## The day", 1)[0]
    rows = {cells[0].strip("* "): [c.strip() for c in cells[1:]]
            for line in guide.splitlines() if line.startswith("| ") and not line.startswith("| notebook")
            for cells in [line.strip("|").split("|")] if cells[0].strip()}
    # fewest steps counted: the run's steps less its warm-up (10 %, at most 10; steps 2 and 3, instrumented,
    # fall inside it): 01/02 500 steps - 10; 03/05 125 at 4 GPUs - 10; 04's 8-GPU run 63 - 6
    by_hand = {"01_baseline": (1, 1, 490, 1 / 3, 20 / 3, 20 / 3),
               "02_fsdp_single_gpu": (5, 1, 490, 5 / 3, 100 / 3, 100 / 3),
               "03_sharding_strategies": (6, 4, 115, 8.0, 160.0, 5 * 4 / 3),
               "04_multi_gpu": (4, 8, 57, 5.0, 100.0, 7 / 3 * 20 + 8 / 3),
               "05_multi_node": (6, 16, 115, 6.0, 120.0, 2 / 3 * 20 + 16 / 3)}
    for notebook, (jobs, largest, counted, each, cls, instructor) in by_hand.items():
        assert rows[notebook] == [str(jobs), str(largest), str(counted), f"{each:.2f}", f"{cls:.1f}",
                                  f"{instructor:.1f}"], notebook
    total = [sum(v[i] for v in by_hand.values()) for i in range(6)]
    own = 1 / 3 + 5 / 3 + 0 + 7 / 3 + 2 / 3
    reruns = next(cells for name, cells in rows.items() if name.startswith("reruns: 25%"))
    assert reruns == ["", "", "", f"{0.25 * total[3]:.2f}", f"{0.25 * total[4]:.1f}", f"{0.25 * own * 20:.1f}"]
    sweep = next(cells for name, cells in rows.items() if name.startswith("03's challenge sweep"))
    assert sweep == ["40", "4", "", "", f"{40 * 4 / 3:.1f}", f"{40 * 4 / 3:.1f}"]
    dry = next(cells for name, cells in rows.items() if name.startswith("dry run"))
    assert dry == [str(total[0]), "16", "", "", f"{total[3]:.1f}", f"{own:.1f}"]
    assert rows["all"] == ["", "", "", f"{1.25 * total[3]:.2f}", f"{1.25 * total[4] + 40 * 4 / 3 + total[3]:.1f}",
                           f"{total[5] + 0.25 * own * 20 + 40 * 4 / 3 + own:.1f}"]
