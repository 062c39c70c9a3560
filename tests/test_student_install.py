"""The student's install (issue 48, item 1): the course package built from the checkout, not editable, holds
no grading room, so in a fresh virtual environment the answer key does not import and no `solutions/` or
notebook lands in site-packages. The instructor's editable install (`make venv`, the grading environment of
docs/instructor.md) reads `workshop.grading` from the checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_wheel(tmp_path: Path) -> Path:
    """`pip wheel` of a copy of the checkout's package files (the build writes nothing into the checkout)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "workshop", src / "workshop", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True, text=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    return wheel


def test_the_students_install_has_no_answer_key_and_no_solutions(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.startswith("workshop/grading/") or "solutions/" in n or n.endswith(".ipynb")] == []
    assert "workshop/student/lab.py" in names                         # the course itself is there
    venv = tmp_path / "student"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)
    # from a folder that is not the checkout, as a student's course folder is not (`python -c` reads its cwd first)
    key = subprocess.run([python, "-c", "from workshop.grading import answer_key"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert key.returncode == 1 and "ModuleNotFoundError: No module named 'workshop.grading'" in key.stderr
    ran = subprocess.run([python, "-c", "import workshop.student.runs as s; print(s.__file__)"],
                         cwd=tmp_path, capture_output=True, text=True, check=True)
    assert str(venv) in ran.stdout                                   # the wheel's copy, not the checkout's
    assert not [p for p in venv.rglob("*") if p.name == "solutions" or p.suffix == ".ipynb"]
