"""`workshop student-folder DEST` (issue 48, item 2): a student's folder holds the five release notebooks and
nothing an instructor keeps (solutions/, the gradebook, .git, an answer, a hidden test), and it refuses a
tree that is not a release."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workshop.site import student_folder

ROOT = Path(__file__).resolve().parent.parent


def test_the_folder_holds_the_five_release_notebooks_and_nothing_of_the_instructors(tmp_path: Path) -> None:
    dest = tmp_path / "fsdp-workshop"
    out = subprocess.run([sys.executable, "-m", "workshop.cli", "student-folder", str(dest)], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert "5 notebook(s) written" in out
    notebooks = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*.ipynb"))
    assert notebooks == sorted(p.relative_to(ROOT / "notebooks").as_posix() for p in (ROOT / "notebooks").rglob("*.ipynb"))
    assert len(notebooks) == 5
    names = {p.name for p in dest.rglob("*")}
    assert not names & {"solutions", "gradebook.db", ".git", "nbgrader_config.py"}
    for path in dest.rglob("*.ipynb"):
        text = path.read_text()
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text, path
        assert (ROOT / "notebooks" / path.relative_to(dest)).read_bytes() == path.read_bytes()


def test_a_students_work_is_kept_and_a_solution_tree_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "course"
    student_folder.write(dest)
    mine = next(dest.rglob("01_baseline.ipynb"))
    mine.write_text(json.dumps({"my": "work"}))
    student_folder.write(dest)
    assert json.loads(mine.read_text()) == {"my": "work"}
    with pytest.raises(SystemExit, match="answers or hidden tests"):
        student_folder.write(tmp_path / "other", ROOT / "solutions")
    release = tmp_path / "release"
    shutil.copytree(ROOT / "notebooks", release)
    (release / "gradebook.db").write_text("")
    with pytest.raises(SystemExit, match="not part of a student's folder"):
        student_folder.write(tmp_path / "third", release)
