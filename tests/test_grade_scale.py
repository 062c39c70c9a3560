"""A class at scale: many submissions of one notebook graded by `python -m workshop.grading.grade --jobs 2`.

CI grades WORKSHOP_GRADE_SUBMISSIONS (default 6) copies of the course run's 01 submission: every one is
graded, in order, with progress, to full marks. How fast is a benchmark's question, not a test's (a
timed test on a shared CI machine measures its neighbours): `benchmarks/grade_class.py` grades 100
submissions on a quiet machine, checks the issue's bound (5 s a submission on 2 cores) and
`benchmarks/cpu/` keeps what it measured.
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


def test_a_class_of_submissions_is_graded_in_order_with_progress(course_run: Path, tmp_path: Path, capsys) -> None:
    from workshop.grading.grade import main

    course = Course(tmp_path / "course")
    students = [f"s{i:03d}" for i in range(SUBMISSIONS)]
    for student in students:
        course.submit(student, "01_baseline", course_run / "01_baseline")
    t0 = time.perf_counter()
    rc = main(["--root", str(course.root), "--jobs", "2", "--no-feedback"])
    took = time.perf_counter() - t0
    out = capsys.readouterr().out
    per = took / SUBMISSIONS
    print(f"{SUBMISSIONS} submissions graded in {took:.1f} s: {per:.2f} s per submission (--jobs 2, beside the "
          f"rest of the suite)")
    assert rc == 0, out
    progress = re.findall(r"^\[autograde (\d+)/(\d+)\] ", out, flags=re.M)
    assert [int(i) for i, _ in progress] == list(range(1, SUBMISSIONS + 1))
    rows = list(csv.DictReader((course.root / "grades.csv").open()))
    full = sum(course.max_points("01_baseline").values())
    assert len(rows) == SUBMISSIONS and all(float(r["score"]) == full for r in rows)
