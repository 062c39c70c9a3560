"""The student's terminal holds no answer key (issue 48, item 1), on the test cluster: the Unix user `student`, in a
Slurm job as Open OnDemand starts a session (the app's terminal.bashrc, with WORKSHOP_COURSE_PATH as script.sh
exports it), in the course folder `workshop student-folder` wrote, with the course environment installed as
bloom_env.yml installs it (`pip install .`, not editable). The routes a reader tries from JupyterLab's terminal
print nothing a check grades: the answer key does not import (at its old path or its new one), no file of the
grading room, no `solutions/` and no gradebook is in the folder or the environment."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_student_install import bloom_env_course_line, course_copy

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[2]
KEY_CALL = "a.fewest_gpus_for('bloom-7b1', 10)"
ROUTES = f"""cd "$COURSE"
echo "PYTHON $(command -v python)"
python -c "from workshop.grading import answer_key as a; print('GRADED', {KEY_CALL})"
python -c "from workshop.course import answer_key as a; print('GRADED', {KEY_CALL})"
python -c "import workshop, pathlib; print('MODULES', [str(p) for p in pathlib.Path(workshop.__file__).parent.rglob('*') \\
  if 'grading' in p.parts or 'answer' in p.name])"
find -L "$COURSE" "$(python -c 'import sys; print(sys.prefix)')" \\( -name solutions -o -name 'answer_key*' -o -name grading \\
  -o -name gradebook.db -o -name source \\) -print | sed 's/^/FOUND /'
echo ROUTES-DONE
"""


def students_env(cluster, student_view, where: Path) -> Path:
    """The course environment as bloom_env.yml builds it, where `student` reads it: a venv of the system Python
    (made by `student`), the pinned packages through a .pth, the course package installed from a copy of the
    checkout with bloom_env.yml's own line (`.`)."""
    venv = where / "bloom_env"
    cluster.run("/usr/bin/python3", "-m", "venv", "--without-pip", str(venv), user="student")
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "zz-pinned-packages.pth").write_text(f"{student_view.site}\n")
    src = course_copy(where / "build")
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                          "--no-deps", "--no-build-isolation", "--no-index", bloom_env_course_line()], cwd=src, capture_output=True,
                         text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr[-3000:]
    subprocess.run(["chmod", "-R", "a+rX", str(venv)], check=True)
    return venv


def test_the_students_terminal_prints_nothing_a_check_grades(cluster, student_view) -> None:
    where = cluster.shared / f"terminal-{os.getpid()}-{time.time_ns()}"
    where.mkdir(mode=0o1777)
    where.chmod(0o1777)
    try:
        check_routes(cluster, student_view, where)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def check_routes(cluster, student_view, where: Path) -> None:
    venv = students_env(cluster, student_view, where)
    course = where / "fsdp-workshop"
    cluster.run(str(venv / "bin" / "workshop"), "student-folder", str(course), "--release", str(student_view.repo / "notebooks"),
                user="student", timeout=120)
    (where / "routes.sh").write_text(ROUTES)
    bashrc = student_view.repo / "slurm" / "ood" / "template" / "terminal.bashrc"
    (where / "session.sh").write_text(
        "#!/bin/bash\n"
        f"export COURSE={shlex.quote(str(course))} WORKSHOP_COURSE_PATH={shlex.quote(str(venv / 'bin'))}:\"$PATH\"\n"
        f"bash --rcfile {shlex.quote(str(bashrc))} -i < {shlex.quote(str(where / 'routes.sh'))} 2>&1\n")
    job = cluster.sbatch("-o", str(where / "session.out"), "-D", str(where), str(where / "session.sh"), user="student")
    record = cluster.wait(job, timeout=180)
    out = (where / "session.out").read_text()
    print(out)
    assert record["State"] == "COMPLETED" and "ROUTES-DONE" in out, (record, out[-3000:])
    assert f"PYTHON {venv}/bin/python" in out                             # the terminal runs the course's env
    assert "GRADED" not in out.replace("print('GRADED'", "")
    assert "ModuleNotFoundError: No module named 'workshop.grading'" in out
    assert "ModuleNotFoundError: No module named 'workshop.course'" in out
    assert "MODULES []" in out
    assert [ln for ln in out.splitlines() if ln.startswith("FOUND ")] == []
    assert sorted(p.name for p in course.iterdir()) == sorted(p.name for p in (ROOT / "notebooks").iterdir()
                                                              if p.is_dir())
