"""A throwaway nbgrader course for the autograde tests: the real nbgrader, on copies of submissions."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from pathlib import Path
from typing import Callable

import nbformat

from workshop.grading.release import REPO, nbgrader_config, venv_on_path


def alembic_head() -> str:
    """nbgrader's gradebook revision, read in-process: what `nbgrader.api.get_alembic_version` reads by running
    `alembic heads` in a subprocess (3.2 CPU-s) each time a gradebook is created, six times a suite. The same
    script directory's head (tests/test_grading_harness.py compares the two); the instructor's commands keep
    nbgrader's own."""
    import tempfile

    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import write_alembic_ini

    global _HEAD
    if _HEAD is None:
        with tempfile.TemporaryDirectory() as tmp:
            ini = os.path.join(tmp, "alembic.ini")
            write_alembic_ini(ini, "sqlite:////tmp/gradebook.db")
            _HEAD = ScriptDirectory.from_config(Config(ini)).get_current_head()
    return _HEAD


_HEAD: str | None = None


class Course:
    """An nbgrader course root in `root` with this repo's solutions/ as its source."""

    def __init__(self, root: Path) -> None:
        import nbgrader.api
        from nbgrader.apps import NbGraderAPI

        nbgrader.api.get_alembic_version = alembic_head      # this process's gradebooks: no `alembic heads` process
        venv_on_path()
        self.root = root
        shutil.copytree(REPO / "solutions", root / "solutions",
                        ignore=shutil.ignore_patterns("jobs", "tables", "plots", ".ipynb_checkpoints"))
        shutil.copy2(REPO / "nbgrader_config.py", root / "nbgrader_config.py")
        self.db = root / "gradebook.db"
        self.api = NbGraderAPI(config=nbgrader_config(root, root / "notebooks", self.db))
        self.generated: set[str] = set()
        # what the instructor's one command printed when it graded this class (grade_the_class): its progress lines
        self.grade_output = ""

    def generate(self, assignment: str) -> Path:
        if assignment not in self.generated:
            result = self.api.generate_assignment(assignment, force=True)
            assert result["success"], result.get("log", "") + str(result.get("error"))
            self.generated.add(assignment)
        return self.root / "notebooks" / assignment / f"{assignment}.ipynb"

    def submit(self, student: str, assignment: str, folder: Path,
               edit: Callable[[nbformat.NotebookNode], None] | None = None) -> None:
        """Copy a student's assignment folder (notebook and jobs/) into submitted/, optionally edited."""
        self.generate(assignment)
        dest = self.root / "submitted" / student / assignment
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(folder, dest)
        if edit is not None:
            path = dest / f"{assignment}.ipynb"
            nb = nbformat.read(path, as_version=4)
            edit(nb)
            nbformat.write(nb, path)

    def autograde(self, student: str, assignment: str) -> dict[str, float]:
        """Autograde one submission; the auto-graded score of each test cell, by grade id."""
        from nbgrader.api import Gradebook

        result = self.api.autograde(assignment, student, force=True, create=True)
        assert result["success"], result.get("log", "") + str(result.get("error"))
        with Gradebook(f"sqlite:///{self.db}") as gb:
            sub = gb.find_submission_notebook(assignment, assignment, student)
            return {g.name: g.score for g in sub.grades if g.cell_type == "code" and g.auto_score is not None}

    def max_points(self, assignment: str) -> dict[str, float]:
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{self.db}") as gb:
            nb = gb.find_notebook(assignment, assignment)
            return {c.name: c.max_score for c in nb.grade_cells if c.cell_type == "code"}


def replace_cell(nb: nbformat.NotebookNode, grade_id: str, source: str) -> None:
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            cell.source = source
            return
    raise KeyError(grade_id)


def append_to_cell(nb: nbformat.NotebookNode, grade_id: str, line: str) -> None:
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            cell.source = cell.source + "\n" + line
            return
    raise KeyError(grade_id)


def insert_cell_after(nb: nbformat.NotebookNode, grade_id: str, source: str) -> None:
    """A new code cell (no nbgrader metadata, as a student adds one) right after the cell `grade_id`."""
    for i, cell in enumerate(nb.cells):
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            nb.cells.insert(i + 1, nbformat.v4.new_code_cell(source))
            return
    raise KeyError(grade_id)


def grade_the_class(course: Course, assignments: str) -> tuple[dict[tuple[str, str], dict], dict[tuple[str, str], dict]]:
    """The instructor's one command over every submission at once (`workshop.grading.grade`, two at a time).

    By (student, assignment): grades.csv's row (nbgrader's score and the review's columns), and the
    auto-graded score of each test cell (grade_cells.csv), as `Course.autograde` returns it."""
    import csv

    from workshop.grading.grade import main

    printed = io.StringIO()
    before = os.environ.get("PYTHONSAFEPATH")
    try:
        with contextlib.redirect_stdout(printed):
            rc = main(["--root", str(course.root), "--assignments", assignments, "--jobs", "2", "--no-feedback"])
    finally:    # grade sets PYTHONSAFEPATH for its kernels: a later test's `python -m` must still see its folder
        if before is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = before
    course.grade_output = printed.getvalue()
    print(course.grade_output, end="")
    assert rc == 0, course.grade_output[-4000:]
    rows = {(r["student"], r["assignment"]): {"score": float(r["score"]), "verified_score": float(r["verified_score"]),
                                              "flags": int(r["flags"]), "flag_reasons": r["flag_reasons"]}
            for r in csv.DictReader((course.root / "grades.csv").open())}
    cells: dict[tuple[str, str], dict] = {}
    for r in csv.DictReader((course.root / "grade_cells.csv").open()):
        if r["cell_type"] == "code" and r["auto_score"] not in ("", "None"):
            cells.setdefault((r["student"], r["assignment"]), {})[r["cell"]] = float(r["score"])
    return rows, cells
