"""Grade the whole class with one command: nbgrader autograde for every collected submission, each
student's feedback, then the grades as CSV.

    python -m workshop.grading.grade                      # in the course root (where nbgrader_config.py is)
    python -m workshop.grading.grade --jobs 2             # two submissions at a time
    python -m workshop.grading.grade --skip-autograde     # after grading reflections in formgrader: feedback and CSVs again

Submissions are nbgrader's `submitted/<student>/<assignment>/` (from `nbgrader collect`, or copies of
each student's assignment folder), each with the student's `jobs/` folder: grading re-executes the
notebook, which only reads those saved logs. It writes

- `feedback/<student>/<assignment>/<notebook>.html` (nbgrader generate_feedback: every test cell's
  result, with the message of each failed check);
- `grades.csv`: one row per student and assignment (score, max score, whether written answers await
  manual grading, and `flags`: the reasons an instructor should look at that submission by hand);
- `grade_cells.csv`: one row per graded cell of every submission.

Formgrader shows the *autograded* notebook, which comes from the student's copy: the model answer
and rubric of a written reflection (the instructor's text of that markdown answer cell in
`solutions/`) are stripped from it with the release. So after autograde each reflection gets the
instructor's text in a cell right below the student's answer, marked `workshop.model_answer`, which
formgrader shows beside the grading box and the feedback leaves out (HideModelAnswers).

A submission that cannot be graded gets one line saying why and what to run.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

from workshop.grading import references
from workshop.grading.integrity import UNREVIEWED, review
from workshop.grading.ipc_kernel import use_ipc_for_async_kernels
from workshop.grading.release import course_gradebook, nbgrader_config, venv_on_path
from workshop.student.lab import saved_profile

# `verified_score`, `flags` (how many findings) and `flag_reasons` (one sentence each) come from the
# independent review (workshop.grading.integrity) and from what this module sees of the submission's folder
GRADES_FIELDS = ["student", "assignment", "score", "max_score", "needs_manual_grade", *UNREVIEWED]
CELL_FIELDS = ["student", "assignment", "notebook", "cell", "cell_type", "auto_score", "manual_score", "score",
               "max_score", "failed"]


@dataclass
class Submission:
    student: str
    assignment: str
    folder: Path
    flags: list[str] = field(default_factory=list)   # shown to the instructor in grades.csv's `flags`
    error: str = ""                                   # why it could not be graded, with the fix


def submission_flags(sub: Submission) -> list[str]:
    """Reasons to look at a submission by hand, each a sentence; they land in grades.csv's `flags`.

    Every check that marks a submission for the instructor (rather than taking points) adds its
    reasons here."""
    flags = []
    if not (sub.folder / "jobs").is_dir():
        flags.append("no jobs/ folder beside the notebook: its tables read no runs (collect the student's whole "
                     "assignment folder, jobs/ included, and grade again)")
    return flags


def find_submissions(root: Path, wanted: list[str]) -> list[Submission]:
    submitted = root / "submitted"
    subs = [Submission(p.parent.name, p.name, p) for p in sorted(submitted.glob("*/*")) if p.is_dir()]
    return [s for s in subs if not wanted or s.assignment in wanted]


def known_assignments(db: Path) -> set[str]:
    from nbgrader.api import Gradebook

    if not db.is_file():
        return set()
    with Gradebook(f"sqlite:///{db}") as gb:
        return {a.name for a in gb.assignments}


def enter_students(db: Path, students: set[str]) -> None:
    """Every student into the gradebook before the workers start: two workers autograding one student's
    two assignments would otherwise both create the student, and the second fails on the unique name."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{db}") as gb:
        for student in sorted(students):
            gb.update_or_create_student(student)


def useful_line(result: dict[str, Any]) -> str:
    """nbgrader's reason for a failed autograde: its log's error lines (its `error` is a generic traceback)."""
    log = str(result.get("log") or "")
    lines = [ln.split("]", 1)[-1].strip() for ln in log.splitlines() if "ERROR" in ln or "CRITICAL" in ln]
    lines = [ln for ln in lines if ln and not ln.startswith("nbgrader") and "Removing failed" not in ln]
    if lines:
        return lines[0]
    error = str(result.get("error") or "").strip().splitlines()
    return error[-1] if error else "nbgrader gave no reason"


MODEL_ANSWER = "model_answer"   # metadata.workshop key of the cells that carry a reflection's model answer


def model_answers(source_nb: Path) -> dict[str, str]:
    """{grade id: the instructor's text} of every manually graded markdown answer cell in solutions/."""
    import nbformat
    from traitlets.config.loader import PyFileConfigLoader

    stub = "YOUR ANSWER HERE"
    cfg_path = source_nb.parents[2] / "nbgrader_config.py"
    if cfg_path.is_file():
        stub = str(PyFileConfigLoader(cfg_path.name, path=str(cfg_path.parent)).load_config()
                   .ClearSolutions.get("text_stub", stub))
    out = {}
    for cell in nbformat.read(source_nb, as_version=4).cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        text = cell.source.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", "").strip()
        if cell.cell_type == "markdown" and meta.get("grade") and meta.get("solution") and text and text != stub:
            out[meta["grade_id"]] = text
    return out


def add_model_answers(root: Path, sub: Submission) -> int:
    """Put each reflection's model answer below the student's answer in the autograded notebooks."""
    import nbformat

    count = 0
    for graded in sorted((root / "autograded" / sub.student / sub.assignment).glob("*.ipynb")):
        source = root / "solutions" / sub.assignment / graded.name
        answers = model_answers(source) if source.is_file() else {}
        if not answers:
            continue
        nb = nbformat.read(graded, as_version=4)
        cells = [c for c in nb.cells if MODEL_ANSWER not in c.get("metadata", {}).get("workshop", {})]
        out = []
        for cell in cells:
            out.append(cell)
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if cell.cell_type == "markdown" and grade_id in answers:
                note = nbformat.v4.new_markdown_cell(
                    f"**Model answer and rubric** (from solutions/; for the grader, not in the feedback)\n\n"
                    f"{answers[grade_id]}", metadata={"workshop": {MODEL_ANSWER: grade_id}})
                out.append(note)
                count += 1
        nb.cells = out
        nbformat.write(nb, graded)
    return count


class HideModelAnswers(Preprocessor):
    """Feedback goes to the student: leave out the model answers added for formgrader."""

    enabled = Bool(True)   # nbconvert preprocessors are off unless enabled

    def preprocess(self, nb: Any, resources: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        nb.cells = [c for c in nb.cells if MODEL_ANSWER not in c.get("metadata", {}).get("workshop", {})]
        return nb, resources


# One API object per process and course: building it reads the config and the gradebook's schema.
# Keyed by the course, so a second course graded in the same process (or in a worker forked from
# it) never writes into the first one's folders.
_apis: dict[tuple[Path, Path], Any] = {}


def safe_path() -> None:
    """Kernels started from here do not put their folder first on sys.path (Python 3.11's PYTHONSAFEPATH,
    which IPython honours too): nbgrader runs each notebook in a copy of the student's folder, where a
    `workshop/`, `helper.py` or `ipykernel_launcher.py` handed in would otherwise replace the real one."""
    os.environ["PYTHONSAFEPATH"] = "1"


def _worker_api(root: Path, db: Path) -> Any:
    safe_path()
    if (root, db) not in _apis:
        from nbgrader.apps import NbGraderAPI

        venv_on_path()
        from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
        from nbgrader.preprocessors import GetGrades

        config = nbgrader_config(root, root / "notebooks", db)
        config.GenerateFeedback.preprocessors = [HideModelAnswers, GetGrades, CSSHTMLHeaderPreprocessor]
        use_ipc_for_async_kernels(config)   # no "running over TCP without encryption" from each autograde's kernel
        _apis[(root, db)] = NbGraderAPI(config=config)
    return _apis[(root, db)]


def autograde_one(root: Path, db: Path, assignment: str, student: str) -> tuple[bool, str, float]:
    """Autograde one submission (in a worker process): ok, nbgrader's reason when not, seconds taken."""
    t0 = time.perf_counter()
    api = _worker_api(root, db)
    for attempt in range(4):   # sqlite allows one writer: a worker may find the gradebook busy
        result = api.autograde(assignment, student, force=True, create=True)
        said = str(result.get("log", "")) + str(result.get("error", ""))
        if result["success"] or not any(busy in said for busy in ("database is locked", "UNIQUE constraint failed")):
            break
        time.sleep(0.5 * (attempt + 1))
    return bool(result["success"]), "" if result["success"] else useful_line(result), time.perf_counter() - t0


def feedback_one(root: Path, db: Path, assignment: str, student: str) -> tuple[bool, str, float]:
    t0 = time.perf_counter()
    result = _worker_api(root, db).generate_feedback(assignment, student, force=True)
    return bool(result["success"]), "" if result["success"] else useful_line(result), time.perf_counter() - t0


def run_all(task: Any, subs: list[Submission], root: Path, db: Path, jobs: int, verb: str) -> None:
    """Run `task` for every submission, `jobs` at a time, printing one progress line each."""
    started = time.perf_counter()
    n = len(subs)
    args = [(root, db, s.assignment, s.student) for s in subs]
    if jobs > 1:
        pool = ProcessPoolExecutor(max_workers=jobs)
        results = pool.map(task, *zip(*args))
    else:
        pool, results = None, (task(*a) for a in args)
    try:
        for i, (sub, (ok, why, took)) in enumerate(zip(subs, results), 1):
            if not ok:
                sub.error = f"{verb} failed: {why}"
            rate = (time.perf_counter() - started) / i
            print(f"[{verb} {i}/{n}] {sub.student}/{sub.assignment}: {'ok' if ok else 'FAILED: ' + why} ({took:.1f} s; "
                  f"{rate:.1f} s per submission, about {rate * (n - i):.0f} s left)", flush=True)
    finally:
        if pool is not None:
            pool.shutdown()


def export(db: Path, subs: list[Submission], grades_csv: Path, cells_csv: Path,
           reviews: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """grades.csv (one row per submission, with its flags) and grade_cells.csv (one row per graded cell)."""
    from nbgrader.api import Gradebook, MissingEntry

    flags = {(s.student, s.assignment): s.flags for s in subs}
    rows, cells = [], []
    with Gradebook(f"sqlite:///{db}") as gb:
        for assignment in sorted({s.assignment for s in subs}):
            try:
                graded = gb.assignment_submissions(assignment)
            except MissingEntry:
                continue
            for sub in graded:
                key = (sub.student_id, assignment)
                if key not in flags:
                    continue
                checked = reviews.get(key, UNREVIEWED)
                reasons = [*flags[key], *filter(None, [checked["flag_reasons"]])]
                rows.append({"student": sub.student_id, "assignment": assignment, "score": sub.score,
                             "max_score": sub.max_score, "needs_manual_grade": sub.needs_manual_grade,
                             "verified_score": checked["verified_score"],
                             "flags": len(flags[key]) + checked["flags"], "flag_reasons": "; ".join(reasons)})
                for nb in sub.notebooks:
                    for g in nb.grades:
                        cells.append({"student": sub.student_id, "assignment": assignment, "notebook": nb.name,
                                      "cell": g.name, "cell_type": g.cell_type, "auto_score": g.auto_score,
                                      "manual_score": g.manual_score, "score": g.score, "max_score": g.max_score,
                                      "failed": g.cell_type == "code" and g.auto_score is not None
                                                and g.auto_score < g.max_score})
    for path, fields, data in ((grades_csv, GRADES_FIELDS, rows), (cells_csv, CELL_FIELDS, cells)):
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(data)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workshop.grading.grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=".", help="the nbgrader course root (default: .)")
    parser.add_argument("--assignments", default="", help="comma-separated; default: every assignment collected")
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded at a time (default: 1)")
    parser.add_argument("--skip-autograde", action="store_true",
                        help="only feedback and CSVs from the gradebook (after manual grading in formgrader)")
    parser.add_argument("--no-feedback", action="store_true", help="skip nbgrader generate_feedback")
    parser.add_argument("--out", default="grades.csv", help="CSV of scores per student and assignment")
    parser.add_argument("--cells-out", default="grade_cells.csv", help="CSV of scores per graded cell")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    venv_on_path()
    root = Path(args.root).resolve()
    if not (root / "nbgrader_config.py").is_file():
        print(f"{root} has no nbgrader_config.py: run this in the course root, or give --root", file=sys.stderr)
        return 2
    submitted = root / "submitted"
    if not submitted.is_dir():
        print(f"no {submitted}/: collect the submissions first (nbgrader collect ASSIGNMENT, or copy each "
              "student's assignment folder to submitted/STUDENT/)", file=sys.stderr)
        return 2
    db = course_gradebook(root)
    subs = find_submissions(root, [a for a in args.assignments.split(",") if a])
    if not subs:
        print(f"nothing to grade in {submitted}/ (expected submitted/STUDENT/ASSIGNMENT/)", file=sys.stderr)
        return 2
    known = known_assignments(db)
    for sub in subs:
        sub.flags = submission_flags(sub)
        if sub.assignment not in known:
            sub.error = (f"the gradebook {db.name} has no assignment {sub.assignment!r}: run scripts/release.sh in "
                         f"the course root (it enters every assignment into {db.name}), then grade again")
        elif not (sub.folder / f"{sub.assignment}.ipynb").is_file() and not list(sub.folder.glob("*.ipynb")):
            sub.error = f"no notebook in {sub.folder}: collect the student's assignment folder again"
    for sub in subs:
        for line in [f"NOT GRADED: {sub.error}"] if sub.error else sub.flags:
            print(f"{sub.student}/{sub.assignment}: {line}", flush=True)
    ready = [s for s in subs if not s.error]
    if ready and not args.skip_autograde:
        references.rows_for_the_sites(saved_profile(s.folder / "jobs") for s in ready)   # a site's own profile
        enter_students(db, {s.student for s in ready})
        run_all(autograde_one, ready, root, db, args.jobs, "autograde")
    ready = [s for s in ready if not s.error]
    if not args.skip_autograde:
        answers = sum(add_model_answers(root, s) for s in ready)
        if answers:
            print(f"{answers} model answer(s) of written reflections added for formgrader", flush=True)
    if ready and not args.no_feedback:
        run_all(feedback_one, ready, root, db, args.jobs, "feedback")
    failed = [s for s in subs if s.error]
    out = Path(args.out) if Path(args.out).is_absolute() else root / args.out
    cells_out = Path(args.cells_out) if Path(args.cells_out).is_absolute() else root / args.cells_out
    graded = [s for s in subs if not s.error]
    # the independent verdict, in a fresh process the students' kernels never touched (workshop.grading.integrity)
    reviews = review(root, db, sorted({s.assignment for s in graded})) if graded else {}
    rows = export(db, graded, out, cells_out, reviews)
    flagged = sum(bool(r["flags"]) for r in rows)
    print(f"{len(rows)} submission(s) graded into {out.name} and {cells_out.name}; {len(failed)} not graded; "
          f"{flagged} flagged for a look by hand (grades.csv's flag_reasons)"
          + ("; feedback in feedback/" if not args.no_feedback and rows else "")
          + ("; written reflections await manual grading in formgrader" if any(r["needs_manual_grade"] for r in rows)
             else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
