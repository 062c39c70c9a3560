"""Grading at class scale on this machine's CPUs: N copies of one genuine notebook-01 submission graded
by the instructor's own command, `python -m workshop.grading.grade --jobs J`, timed.

    .venv/bin/python benchmarks/grade_class.py --students 100 --jobs 2

Why a benchmark and not a test: a timed test on a shared CI machine measures its neighbours. This
runs alone, on a quiet machine, and keeps what it measured.

It runs notebook 01 once on the embedded default (papermill, the local backend) for a real
submission, copies it N times into a throwaway nbgrader course, grades them all with feedback (as
docs/instructor.md does), checks every one got full marks, and writes
`benchmarks/cpu/grade_class-<date>.json`: date, machine (cores, load before), versions, the time
per submission and whether issue 13's bound (5 s a submission on 2 cores) holds. Exit 1 if not.
A CPU figure of the grading pipeline; GPU figures live in `benchmarks/results/`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BOUND_S = 5.0   # seconds per submission on 2 cores (issue 13)


PACKAGES = ("nbgrader", "papermill", "torch", "transformers", "ipykernel")


def genuine_submission(scratch: Path) -> Path:
    """Notebook 01 executed as a student would, with its jobs/: the folder a student hands in."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "WANDB_MODE": "offline", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run([sys.executable, "-m", "workshop.grading.run_all", "--output", str(scratch / "results"), "--only", "01",
                    "--cell-timeout", "600"], check=True, env=env, cwd=REPO)
    return scratch / "results" / "01_baseline"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--students", type=int, default=100)
    p.add_argument("--jobs", type=int, default=2, help="parallel graders (workshop.grading.grade --jobs)")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "cpu")
    args = p.parse_args(argv)

    from benchmarks import machine
    from tests.grading import Course

    with tempfile.TemporaryDirectory(prefix="grade-class-") as tmp:
        scratch = Path(tmp)
        folder = genuine_submission(scratch)
        course = Course(scratch / "course")
        for i in range(args.students):
            course.submit(f"s{i:03d}", "01_baseline", folder)
        full = sum(course.max_points("01_baseline").values())
        load = os.getloadavg()[0]
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "workshop.grading.grade", "--root", str(course.root), "--jobs",
                               str(args.jobs)], cwd=course.root)
        took = time.perf_counter() - started
        rows = list(csv.DictReader((course.root / "grades.csv").open()))
        all_full = len(rows) == args.students and all(float(r["score"]) == full for r in rows)

    per = took / args.students
    result = {
        **machine.record("python -m workshop.grading.grade (autograde, integrity review, feedback) of N copies of one "
                         "genuine notebook-01 submission", load, PACKAGES),
        "students": args.students, "jobs": args.jobs, "seconds": round(took, 1),
        "seconds_per_submission": round(per, 2), "bound_s": BOUND_S, "grade_exit_code": proc.returncode,
        "every_submission_full_marks": all_full,
        "met": proc.returncode == 0 and all_full and per <= BOUND_S,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"grade_class-{result['date'][:10]}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.students} submissions graded in {took:.0f} s with --jobs {args.jobs}: {per:.2f} s each "
          f"(bound {BOUND_S} s): {'met' if result['met'] else 'NOT met'}; written to {path}")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
