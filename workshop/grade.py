"""Grade the whole class with one command: nbgrader autograde for every collected submission, then
one CSV of grades.

    python -m workshop.grade                      # in the course root (where nbgrader_config.py is)
    python -m workshop.grade --root /srv/course --assignments 01_baseline,02_fsdp_single_gpu

Submissions are nbgrader's `submitted/<student>/<assignment>/` (from `nbgrader collect`), each with
the student's `jobs/` folder: grading re-executes the notebook, which only reads those saved logs.
Written figures are left for manual grading in formgrader.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from workshop.release import nbgrader_config, venv_on_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workshop.grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=".", help="the nbgrader course root (default: .)")
    parser.add_argument("--assignments", default="", help="comma-separated; default: every assignment collected")
    parser.add_argument("--db", default="", help="gradebook database (default: ROOT/gradebook.db)")
    parser.add_argument("--out", default="grades.csv", help="CSV of scores per student and assignment")
    args = parser.parse_args(argv)
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI

    venv_on_path()
    root = Path(args.root).resolve()
    submitted = root / "submitted"
    if not submitted.is_dir():
        print(f"no {submitted}/: collect the submissions first (nbgrader collect ASSIGNMENT)", file=sys.stderr)
        return 2
    db = Path(args.db) if args.db else root / "gradebook.db"
    api = NbGraderAPI(config=nbgrader_config(root, root / "notebooks", db))
    found = sorted({p.name for p in submitted.glob("*/*") if p.is_dir()})
    wanted = [a for a in args.assignments.split(",") if a] or found
    failures = 0
    for assignment in wanted:
        students = sorted(p.parent.name for p in submitted.glob(f"*/{assignment}") if p.is_dir())
        for i, student in enumerate(students, 1):
            result = api.autograde(assignment, student, force=True, create=True)
            ok = result["success"]
            failures += not ok
            print(f"[{assignment} {i}/{len(students)}] {student}: {'graded' if ok else 'FAILED'}", flush=True)
            if not ok:
                print(result.get("error") or result.get("log", ""), file=sys.stderr)
    rows = []
    with Gradebook(f"sqlite:///{db}") as gb:
        for assignment in wanted:
            for sub in gb.assignment_submissions(assignment):
                rows.append({"student": sub.student_id, "assignment": assignment, "score": sub.score,
                             "max_score": sub.max_score, "needs_manual_grade": sub.needs_manual_grade})
    out = Path(args.out) if Path(args.out).is_absolute() else root / args.out
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["student", "assignment", "score", "max_score", "needs_manual_grade"])
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} submission(s) graded into {out}; {failures} failed"
          + ("; written reflections await manual grading in formgrader" if any(r["needs_manual_grade"] for r in rows)
             else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
