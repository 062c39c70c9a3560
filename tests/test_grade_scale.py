"""A class at scale: many submissions of one notebook graded by `python -m workshop.grade --jobs 2`.

CI grades WORKSHOP_GRADE_SUBMISSIONS (default 6) copies of the course run's 01 submission; the issue's
figure is 100 (`WORKSHOP_GRADE_SUBMISSIONS=100`). The time per submission (wall time over count)
must stay within WORKSHOP_GRADE_MAX_S (default 5 s, the issue's bound on 2 free cores); on a machine
busy with other work the bound grows with the load found before grading (load average / cores).
"""

from __future__ import annotations

import csv
import os
import re
import time
from pathlib import Path

import pytest

from tests.grading import Course

pytestmark = pytest.mark.slow

SUBMISSIONS = int(os.environ.get("WORKSHOP_GRADE_SUBMISSIONS", "6"))
MAX_S = float(os.environ.get("WORKSHOP_GRADE_MAX_S", "5"))


def test_a_class_of_submissions_is_graded_within_the_time_per_submission(course_run: Path, tmp_path: Path,
                                                                          capsys) -> None:
    from workshop.grade import main

    course = Course(tmp_path / "course")
    students = [f"s{i:03d}" for i in range(SUBMISSIONS)]
    for student in students:
        course.submit(student, "01_baseline", course_run / "01_baseline")
    busy = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    t0 = time.perf_counter()
    rc = main(["--root", str(course.root), "--jobs", "2", "--no-feedback"])
    took = time.perf_counter() - t0
    out = capsys.readouterr().out
    per = took / SUBMISSIONS
    print(f"{SUBMISSIONS} submissions graded in {took:.1f} s: {per:.2f} s per submission (--jobs 2; the machine "
          f"was {busy:.1f}x oversubscribed before grading)")
    assert rc == 0, out
    progress = re.findall(r"^\[autograde (\d+)/(\d+)\] ", out, flags=re.M)
    assert [int(i) for i, _ in progress] == list(range(1, SUBMISSIONS + 1))
    rows = list(csv.DictReader((course.root / "grades.csv").open()))
    full = sum(course.max_points("01_baseline").values())
    assert len(rows) == SUBMISSIONS and all(float(r["score"]) == full for r in rows)
    assert per <= MAX_S * busy, f"{per:.2f} s per submission (bound {MAX_S} s x load {busy:.1f})"
