"""The course as the main job, and grading it with the real nbgrader.

The whole course runs once (papermill, local backend); the autograde tests grade copies of its
executed notebooks and saved jobs as students would submit them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from tests.grading import Course, append_to_cell, replace_cell
from tests.lazy_student import fill_like_a_lazy_student
from workshop.release import assignments

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def nbgrader_course(tmp_path_factory: pytest.TempPathFactory) -> Course:
    return Course(tmp_path_factory.mktemp("nbgrader"))


@pytest.mark.parametrize("name", assignments())
def test_every_notebook_runs_end_to_end(course_run: Path, name: str) -> None:
    nb = nbformat.read(course_run / name / f"{name}.ipynb", as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == []
    assert list((course_run / name / "jobs").glob("*/job.json")), "no job ran"
    assert list((course_run / "tables").glob(f"{name[:2]}_*.csv")) and list((course_run / "plots").glob(f"{name[:2]}_*.png"))


def test_tables_hold_numbers_from_the_runs(course_run: Path) -> None:
    import pandas as pd

    strategies = pd.read_csv(course_run / "tables" / "03_strategies.csv", index_col=0)
    assert list(strategies.index) == ["ddp", "full_shard", "shard_grad_op", "offload", "activation_checkpointing"]
    assert (strategies["samples_per_s"] > 0).all() and (strategies["predicted_mem_mb"] > 0).all()
    scaling = pd.read_csv(course_run / "tables" / "04_scaling.csv", index_col=0)
    assert list(scaling.index) == [1, 2, 4] and (scaling["samples_per_s"] > 0).all()
    assert "speedup" not in scaling.columns and scaling["global_batch_measured"].nunique() == 1   # the student's part


@pytest.mark.parametrize("name", assignments())
def test_executed_solution_gets_full_marks(course_run: Path, nbgrader_course: Course, name: str) -> None:
    nbgrader_course.submit("alice", name, course_run / name)
    scores = nbgrader_course.autograde("alice", name)
    assert scores == nbgrader_course.max_points(name)


def test_blank_release_scores_zero_and_grading_never_submits(nbgrader_course: Course, tmp_path: Path) -> None:
    blank = tmp_path / "01_baseline"
    blank.mkdir()
    shutil.copy2(nbgrader_course.generate("01_baseline"), blank)
    nbgrader_course.submit("bob", "01_baseline", blank)
    assert set(nbgrader_course.autograde("bob", "01_baseline").values()) == {0.0}
    # autograde executed lab.run("baseline"): while grading it only reads saved jobs, so none appeared
    assert not (nbgrader_course.root / "autograded" / "bob" / "01_baseline" / "jobs").exists()


def release_with_jobs(nbgrader_course: Course, course_run: Path, name: str, folder: Path) -> Path:
    """The student release of `name` beside the jobs/ the course run made: a student who ran every
    cell of the helper's and answered nothing themselves."""
    folder.mkdir(parents=True)
    shutil.copy2(nbgrader_course.generate(name), folder)
    shutil.copytree(course_run / name / "jobs", folder / "jobs", symlinks=True)
    return folder


@pytest.mark.parametrize("name", assignments())
def test_every_point_needs_the_students_own_work(course_run: Path, nbgrader_course: Course, name: str,
                                                 tmp_path: Path) -> None:
    """The blank release, with every job of the notebook run and saved: nothing earns a point."""
    nbgrader_course.submit("blank", name, release_with_jobs(nbgrader_course, course_run, name, tmp_path / name))
    scores = nbgrader_course.autograde("blank", name)
    assert scores and set(scores.values()) == {0.0}, {k: v for k, v in scores.items() if v}


@pytest.mark.parametrize("name", assignments())
def test_a_student_who_copies_the_helpers_tables_earns_at_most_a_fifth(course_run: Path, nbgrader_course: Course,
                                                                      name: str, tmp_path: Path) -> None:
    """Every answer looked up, by its key, in the tables the notebook printed (tests/lazy_student.py)."""
    folder = release_with_jobs(nbgrader_course, course_run, name, tmp_path / name)
    nbgrader_course.submit("lazy", name, folder, edit=fill_like_a_lazy_student)
    scores, full = nbgrader_course.autograde("lazy", name), nbgrader_course.max_points(name)
    assert sum(scores.values()) <= 0.2 * sum(full.values()), {k: v for k, v in scores.items() if v}


def test_replaced_test_cell_and_edited_number_lose_exactly_their_points(course_run: Path,
                                                                        nbgrader_course: Course) -> None:
    def tamper(nb: nbformat.NotebookNode) -> None:
        # a wrong loss hidden behind a test cell replaced by `pass`, and a throughput typed by hand
        append_to_cell(nb, "nb01-13-baseline-table",
                       'baseline["final_train_loss"] = 1.234\nbaseline["train_samples_per_s"] = 999.0')
        replace_cell(nb, "nb01-16-test-final-train-loss", "pass  # nothing to see here")

    nbgrader_course.submit("mallory", "01_baseline", course_run / "01_baseline", tamper)
    scores = nbgrader_course.autograde("mallory", "01_baseline")
    full = nbgrader_course.max_points("01_baseline")
    lost = {k for k in full if scores[k] != full[k]}
    assert lost == {"nb01-16-test-final-train-loss", "nb01-18-test-train-samples-per-s"}
    assert all(scores[k] == 0 for k in lost)


def test_one_command_grades_the_class(course_run: Path, nbgrader_course: Course) -> None:
    import csv

    from workshop.grade import main

    nbgrader_course.submit("zoe", "02_fsdp_single_gpu", course_run / "02_fsdp_single_gpu")
    assert main(["--root", str(nbgrader_course.root), "--assignments", "01_baseline,02_fsdp_single_gpu",
                 "--jobs", "2", "--no-feedback"]) == 0   # feedback: tests/test_instructor_flow.py
    rows = list(csv.DictReader((nbgrader_course.root / "grades.csv").open()))
    by = {(r["student"], r["assignment"]): float(r["score"]) for r in rows}
    full_01 = sum(nbgrader_course.max_points("01_baseline").values())
    assert by[("alice", "01_baseline")] == full_01 and by[("bob", "01_baseline")] == 0
    assert by[("mallory", "01_baseline")] == full_01 - 2
    assert by[("zoe", "02_fsdp_single_gpu")] == sum(nbgrader_course.max_points("02_fsdp_single_gpu").values())
