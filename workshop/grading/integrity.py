"""The independent verdict: what each submission really earned, decided where the student's code never ran.

    python -m workshop.grading.integrity --root COURSE [--db gradebook.db] [--assignments 01_baseline] [--json out.json]

`workshop.grading.grade` runs this in a fresh process after nbgrader's autograde (`review`). nbgrader runs the
student's cells and the test cells in one kernel, so a cell that rebinds a checker, patches a module,
answers with an object equal to anything or hides tracebacks can win points there. Here, for every
submission:

1. every saved job's seal is checked: run/digest.json against summary.json and metrics.jsonl, and the
   log's WORKSHOP_SUMMARY / WORKSHOP_DIGEST / WORKSHOP_METRICS lines against them; results that two
   submissions share are one run handed in twice;
2. the instructor's locked cells, as the gradebook holds them (what nbgrader restores), are run again
   in a fresh namespace on the submission's saved jobs. The student's cells are not run: their values
   exist only as the plain-data records `workshop.student.checks` left in the autograded notebook, and each
   check takes its answer from there (a missing record is a wrong answer). References are recomputed
   by the course's code from the saved logs; a job whose seal is broken is not read;
3. the cells the student could edit are scanned for tampering (`workshop.grading.scan`), and the submission
   folder for files besides the notebook, jobs/ and the course's tables and plots;
4. cell by cell, points nbgrader gave are withheld, with the reason, where the re-run fails, where the
   cell's output holds more answer records than its checks write (a forged record), or where the test
   ran after a cell the scan flagged: a patched checker can make the kernel record the reference as the
   answer, and then the re-run alone would agree with nbgrader.

Limits: a student's code runs in nbgrader's kernel with the grader's Unix rights, so it could write
to the grader's own files; run autograde in a sandbox (another user, a container) to close that.
An unkeyed digest detects careless edits only (see `workshop verify`); accounting checks (who ran a
job, when, where) stay with `workshop verify`.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from workshop.student import checks
from workshop.slurm.shared import instructor_original, instructor_roots_of
from workshop.grading.scan import Cell, answer_key, bound_names, protected_names, read_names, scan_findings
from workshop.results.verify import KEY_ENV, digest_seal, read_log, saved_digest


# ---------------------------------------------------------------------------------- job seals
def seal_problems(folder: Path, key: str | None = None) -> list[str]:
    """What does not add up between a saved job's log, its results and the digest the run wrote (the check
    `workshop verify` makes: workshop.results.verify.digest_seal, job id included)."""
    try:
        job_id = str(json.loads((folder / "job.json").read_text())["job_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return ["no readable job.json"]
    log_path = folder / f"slurm-{job_id}.out"
    if not log_path.is_file():
        return [f"no log slurm-{job_id}.out"]
    return digest_seal(folder / "run", job_id, read_log(log_path), key).reasons


# ---------------------------------------------------------------------------------- the re-run
class Replay:
    """The answers one test cell's checks recorded in the autograded notebook, handed out in order."""

    def __init__(self, records: list[Any]) -> None:
        self.records = records
        self.taken = 0

    def left_over(self) -> str | None:
        """After the cell: records no check took. A check records exactly one answer each, so one more is
        a forged record (a student's function called by the test cell can publish display data)."""
        extra = len(self.records) - self.taken
        if extra <= 0:
            return None
        return (f"{extra} more answer record(s) than the test's checks made: a record was forged (the cell's output "
                "holds answers no check wrote)")

    def take(self, kind: str, what: str) -> Any:
        if self.taken >= len(self.records):
            raise AssertionError(f"{what}: no answer was recorded when nbgrader ran this test (the check did not "
                                 "run in the student's kernel: patched, redefined or skipped)")
        record = self.records[self.taken]
        self.taken += 1
        if type(record) is not dict or record.get("kind") != kind or record.get("what") != what:
            raise AssertionError(f"{what}: the recorded answers do not line up with the test's checks")
        if "invalid" in record:
            raise AssertionError(f"{what}: the answer was {record['invalid']}")
        try:
            return checks.plain(ast.literal_eval(record["answer"]))
        except (ValueError, TypeError, SyntaxError, KeyError, MemoryError, RecursionError, checks.NotPlain):
            raise AssertionError(f"{what}: the recorded answer is not plain data") from None


class Placeholder:
    """A student's variable in the re-run: it may only be passed to a check, which ignores it and reads
    the record instead. Anything else a test cell does with it is an error in the test cell."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getitem__(self, key: Any) -> "Placeholder":
        return Placeholder(f"{self._name}[{key!r}]")

    def __getattr__(self, attr: str) -> "Placeholder":
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Placeholder(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> "Placeholder":
        return Placeholder(f"{self._name}(...)")   # a student's function, called by a test cell on locked inputs

    def _misuse(self, *args: Any) -> Any:
        raise TypeError(f"a test cell used the student's {self._name} outside a workshop.student.checks call")

    __bool__ = __iter__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __float__ = __len__ = _misuse
    __add__ = __sub__ = __mul__ = __truediv__ = __contains__ = _misuse


@dataclass
class SourceCell:
    name: str
    source: str
    cell_type: str
    locked: bool
    solution: bool
    points: float | None     # a test cell's points (None: not an autograded code cell)


def is_parameters(cell: Any) -> bool:
    return cell.cell_type == "code" and "parameters" in cell.get("metadata", {}).get("tags", [])


def literal_assignments(source: str) -> dict[str, Any] | None:
    """`name = literal` lines as data; None when the cell holds anything else (code to scan)."""
    try:
        tree = ast.parse(source)
        return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body  # type: ignore[attr-defined]
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                } if all(isinstance(n, ast.Assign) for n in tree.body) else None
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None


def parameters(nb: Any) -> dict[str, Any]:
    """The submission's parameters cell, as data, never `profile` (a profile file holds thresholds that
    references are computed from): the re-run grades on the profile the saved jobs name."""
    for cell in nb.cells:
        if is_parameters(cell):
            values = literal_assignments(cell.source) or {}
            return {k: v for k, v in values.items() if k != "profile"}
    return {}


def release_parameters(root: Path, assignment: str, notebook: str) -> dict[str, Any] | None:
    """The release's parameters (what students were told to leave as they are), when the release is here."""
    import nbformat
    from traitlets.config.loader import PyFileConfigLoader

    try:
        config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
        release = config.CourseDirectory.get("release_directory", "release")
        nb = nbformat.read(root / release / assignment / f"{notebook}.ipynb", as_version=4)
    except Exception:
        return None
    return next((literal_assignments(c.source) for c in nb.cells if is_parameters(c)), None)


def answer_records(nb: Any) -> dict[str, list[Any]]:
    """Per grade id, the answers its checks recorded while nbgrader ran it."""
    out: dict[str, list[Any]] = {}
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id is None or cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {}) if output.get("output_type") == "display_data" else {}
            if checks.MIME in data:   # as plain JSON again (nbformat hands out its own dict subclass)
                out.setdefault(grade_id, []).append(json.loads(json.dumps(data[checks.MIME])))
    return out


@contextlib.contextmanager
def sealed_jobs(key: str | None) -> Iterator[None]:
    """While re-running, a saved job is only read when its seal holds (this process's own hook)."""
    from workshop.student import lab

    original = lab.find_saved

    def find_sealed(*args: Any, **kwargs: Any) -> Any:
        job = original(*args, **kwargs)
        if job is not None:
            problems = seal_problems(Path(job.record.job_dir), key)
            if problems:
                raise AssertionError(f"job {Path(job.record.job_dir).name}: " + "; ".join(problems))
        return job

    lab.find_saved = find_sealed
    try:
        yield
    finally:
        lab.find_saved = original


def tests_need(cells: list[SourceCell]) -> set[int]:
    """The indices of the code cells the test cells depend on: the tests, and every locked cell that binds a
    name they (or a cell they need) read. The lesson's plots, explorers and displays are left out: the
    test cells sit in a final Checks section, after the whole lesson, and need none of them."""
    needed: set[str] = set()
    keep: set[int] = set()
    for i in reversed(range(len(cells))):
        cell = cells[i]
        if cell.cell_type != "code" or cell.solution:
            continue
        if cell.points is not None or bound_names(cell.source) & needed:
            keep.add(i)
            needed |= read_names(cell.source)
    return keep


def rerun(cells: list[SourceCell], params: dict[str, Any], records: dict[str, list[Any]], jobs_dir: Path,
          key: str | None) -> dict[str, str | None]:
    """Each test cell's verdict (None: passed, else why not), from the locked cells run afresh."""
    results: dict[str, str | None] = {}
    first_failure: str | None = None
    needed = tests_need(cells)
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="workshop-rerun-") as work, sealed_jobs(key):
        if jobs_dir.is_dir():
            os.symlink(jobs_dir.resolve(), Path(work) / "jobs")
        os.chdir(work)
        namespace: dict[str, Any] = {"__name__": "__main__", "display": lambda *a, **k: None, "profile": None,
                                     **params}
        last_test = max((i for i, c in enumerate(cells) if c.points is not None), default=-1)
        try:
            for i, cell in enumerate(cells[:last_test + 1]):   # what comes after the last test decides nothing
                if cell.cell_type != "code":
                    continue
                if cell.solution:
                    namespace.update({n: Placeholder(n) for n in bound_names(cell.source)})
                    continue
                if i not in needed:   # a display, a plot, an explorer: no test reads what it binds
                    continue
                is_test = cell.points is not None
                replay = Replay(records.get(cell.name, [])) if is_test else None
                checks.replay_answers(replay)
                error = None
                try:
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                        exec(compile(cell.source, f"<{cell.name}>", "exec"), namespace)
                except (Exception, SystemExit) as e:
                    error = str(e) if isinstance(e, AssertionError) and str(e) else f"{type(e).__name__}: {e}"
                finally:
                    checks.replay_answers(None)
                if replay is not None and error is None and (forged := replay.left_over()):
                    error = forged
                if is_test:
                    if error and first_failure and error.startswith("NameError"):
                        error = f"an earlier cell failed: {first_failure}"
                    results[cell.name] = error
                elif error and first_failure is None:
                    first_failure = f"{cell.name}: {error}"
        finally:
            os.chdir(here)
    return results


# ---------------------------------------------------------------------------------- one submission
# The report columns of a submission the review could not reach: flagged, never silently full marks.
UNREVIEWED = {"verified_score": 0.0, "flags": 1, "flag_reasons": "not reviewed: see the integrity review's error"}


@dataclass
class Review:
    student: str
    assignment: str
    score: float = 0.0                    # the gradebook's (autograded and, where given, manual points)
    withheld: float = 0.0
    reasons: list[str] = field(default_factory=list)

    def columns(self) -> dict[str, Any]:
        return {"verified_score": round(self.score - self.withheld, 6), "flags": len(self.reasons),
                "flag_reasons": "; ".join(self.reasons)}


def source_cells(gb: Any, notebook: str, assignment: str) -> list[SourceCell]:
    nb = gb.find_notebook(notebook, assignment)
    points = {c.name: c.max_score for c in nb.grade_cells if c.cell_type == "code"}
    solutions = {c.name for c in nb.solution_cells}
    return [SourceCell(c.name, c.source, c.cell_type, bool(c.locked), c.name in solutions, points.get(c.name))
            for c in nb.source_cells]


def review_notebook(review: Review, gb: Any, root: Path, notebook: str, key: str | None) -> None:
    import nbformat

    assignment, student = review.assignment, review.student
    cells = source_cells(gb, notebook, assignment)
    submitted_path = root / "submitted" / student / assignment / f"{notebook}.ipynb"
    autograded_path = root / "autograded" / student / assignment / f"{notebook}.ipynb"
    if not autograded_path.is_file():
        review.reasons.append(f"{notebook}: no autograded notebook (autograde failed?)")
        return
    submitted = nbformat.read(submitted_path, as_version=4)
    autograded = nbformat.read(autograded_path, as_version=4)
    # the scan: cells the student could edit, and locked cells they changed
    locked = {c.name: c.source for c in cells if c.cell_type == "code" and c.locked and not c.solution}
    tests = {c.name for c in cells if c.points is not None}
    # the answer key's names, for the scan; `key` stays the site's digest key, for the jobs' seals below
    references = answer_key(locked, tests, [c.source for c in cells if c.solution and c.cell_type == "code"])
    present, to_scan, where = set(), [], {}
    defaults = release_parameters(root, assignment, notebook)
    for i, cell in enumerate(submitted.cells, 1):
        if cell.cell_type != "code":
            continue
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        where.setdefault(grade_id, i)
        values = literal_assignments(cell.source) if is_parameters(cell) else None
        if values is not None:   # the parameters cell, as data: say what differs from the release
            review.reasons += [f"parameters cell: {k} = {v!r} (the release has {defaults.get(k)!r})"
                               for k, v in values.items() if defaults is not None and defaults.get(k) != v]
            continue
        present.add(grade_id)
        to_scan.append((i, Cell(grade_id or f"cell {i} (no grade id)", cell.source, locked.get(grade_id))))
    found = scan_findings([c for _, c in to_scan], protected_names(locked.values()), references)
    review.reasons += [reason for _, reason in found]
    # the first cell the student wrote that the scan flagged: what nbgrader scored after it ran in a
    # kernel that cell could have changed (an edited locked cell is not one: nbgrader ran the original)
    flagged = [(to_scan[j][0], to_scan[j][1].label) for j, _ in found if to_scan[j][1].locked_source is None]
    first_flag = min(flagged, default=None)
    review.reasons += [f"{c.name}: this test cell was deleted" for c in cells
                       if c.points is not None and c.name not in present]
    # the independent re-run, compared with nbgrader cell by cell
    verdicts = rerun(cells, parameters(submitted), answer_records(autograded),
                     root / "submitted" / student / assignment / "jobs", key)
    sub = gb.find_submission_notebook(notebook, assignment, student)
    for grade in sub.grades:
        given = float(grade.score or 0)
        review.score += given
        if grade.name not in verdicts:
            continue
        why = verdicts[grade.name]
        if why is None and first_flag is not None and where.get(grade.name, 0) > first_flag[0]:
            why = f"it ran after {first_flag[1]}, which the scan flagged (look at that cell, then give the points by hand)"
        if why is not None and given > 0:
            review.withheld += given
            review.reasons.append(f"{grade.name}: nbgrader gave {given:g} point(s), withheld: {why}")
        elif why is None and given < float(grade.max_score):
            review.reasons.append(f"{grade.name}: the independent check passes where nbgrader gave {given:g} of "
                                  f"{float(grade.max_score):g}: look at the cell's output")


# What a submission folder holds besides its notebooks and jobs/: what the course's own code writes there
# (model weights are none of them: notebook 05 merges its checkpoint in the scratch folder and removes it)
COURSE_OUTPUTS = {"tables": {".csv"}, "plots": {".png"}}


def written_files(gb: Any, notebooks: list[str], assignment: str) -> set[str]:
    """The `.py` files the model answers write beside the notebook (`job_settings(fn, "shard_model.py")`)."""
    names: set[str] = set()
    for notebook in notebooks:
        for cell in source_cells(gb, notebook, assignment):
            if cell.solution and cell.cell_type == "code":
                try:
                    tree = ast.parse(cell.source)
                except SyntaxError:
                    continue
                names |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                          and n.value.endswith(".py") and "/" not in n.value}
    return names


def shipped_files(folder: Path, written: set[str]) -> list[str]:
    """Files in the submission that are neither a notebook, nor a saved job, nor what the course writes.

    nbgrader copies the whole folder into the folder the autograde kernel runs in; there a `workshop/`
    package, a `helper.py` or an `ipykernel_launcher.py` would be imported in place of the real one,
    were the current folder on sys.path (`workshop.grading.grade` runs the kernels with PYTHONSAFEPATH=1 so that
    it is not). Named, so the instructor sees what was handed in besides the notebook."""
    out = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        top = rel.parts[0]
        if path.is_dir() or top in ("jobs", ".ipynb_checkpoints"):
            continue
        if len(rel.parts) == 1 and (path.suffix == ".ipynb" or path.name in written):
            continue
        if len(rel.parts) == 2 and path.suffix in COURSE_OUTPUTS.get(top, set()):
            continue
        if len(rel.parts) == 2 and top == "__pycache__" and path.name.split(".")[0] + ".py" in written:
            continue   # the bytecode Python caches of a file the notebook wrote and loaded
        out.append(f"the submission holds {rel.as_posix()}, which is not the notebook, jobs/ or a table or plot the "
                   "course writes (code shipped beside the notebook: look at it; it was not on the kernel's path)")
    return out


def review_class(root: Path, db: Path, assignments: list[str]) -> list[Review]:
    from nbgrader.api import Gradebook

    key = os.environ.get(KEY_ENV) or None
    reviews = []
    with Gradebook(f"sqlite:///{db}") as gb:
        for assignment in assignments:
            try:
                notebooks = [nb.name for nb in gb.find_assignment(assignment).notebooks]
            except Exception as e:   # no gradebook entry: every submission says it was not reviewed
                notebooks, why = [], f"not reviewed: {assignment} is not in the gradebook ({type(e).__name__})"
            else:
                why = ""
            owners: dict[str, list[tuple[str, str, bool]]] = {}
            batch = []
            folders = sorted((root / "submitted").glob(f"*/{assignment}"))
            instructor = instructor_roots_of(f for folder in folders for f in (folder / "jobs").glob("*/"))
            written = written_files(gb, notebooks, assignment) if notebooks else set()
            for folder in folders:
                review = Review(folder.parent.name, assignment, reasons=[why] if why else [])
                review.reasons += shipped_files(folder, written)
                for job in sorted((folder / "jobs").glob("*/")):
                    review.reasons += [f"job {job.name}: {p}" for p in seal_problems(job, key)]
                    if (d := saved_digest(job)) is not None:
                        owners.setdefault(d, []).append((review.student, job.name,
                                                         instructor_original(job, instructor) is not None))
                for notebook in notebooks:
                    try:
                        review_notebook(review, gb, root, notebook, key)
                    except Exception as e:   # never silently full marks: say that this one was not reviewed
                        review.reasons.append(f"{notebook}: not reviewed ({type(e).__name__}: {e})")
                batch.append(review)
            for review in batch:
                for d, who in owners.items():   # the instructor's job, handed to every student, is no one's copy
                    mine = [job for s, job, shared in who if s == review.student and not shared]
                    others = sorted({s for s, _, _ in who if s != review.student})
                    if mine and others:
                        review.reasons.append(f"job {mine[0]}: the same results (digest) are in the submission of "
                                              + ", ".join(others) + ": one run handed in twice")
            reviews += batch
    return reviews


def review(root: Path, db: Path, assignments: list[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Run the review in a fresh process (`-P`: nothing from the course folder is imported first);
    the report columns per (student, assignment). If it fails, every row says so."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "review.json"
        proc = subprocess.run([sys.executable, "-P", "-m", "workshop.grading.integrity", "--root", str(root), "--db", str(db),
                               "--assignments", ",".join(assignments), "--json", str(out)],
                              capture_output=True, text=True)
        print(proc.stdout, end="", flush=True)
        if proc.returncode != 0 or not out.is_file():
            print(proc.stderr, file=sys.stderr)
            return {}
        return {(r["student"], r["assignment"]): r["columns"] for r in json.loads(out.read_text())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workshop.grading.integrity", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=".", help="the nbgrader course root (default: .)")
    p.add_argument("--db", default="", help="gradebook database (default: ROOT/gradebook.db)")
    p.add_argument("--assignments", default="", help="comma-separated; default: every assignment submitted")
    p.add_argument("--json", default="", help="also write the reviews to this JSON file")
    args = p.parse_args(argv)
    os.environ["NBGRADER_EXECUTION"] = "autograde"   # the course's code reads saved jobs only, never submits
    os.environ.setdefault("MPLBACKEND", "Agg")
    root = Path(args.root).resolve()
    db = Path(args.db).resolve() if args.db else root / "gradebook.db"
    wanted = [a for a in args.assignments.split(",") if a] or sorted({p.name for p in (root / "submitted").glob("*/*")
                                                                      if p.is_dir()})
    reviews = review_class(root, db, wanted)
    for r in reviews:
        if r.reasons:
            print(f"FLAGGED {r.student}/{r.assignment}: {r.withheld:g} point(s) withheld; " + "; ".join(r.reasons))
    print(f"integrity: {len(reviews)} submission(s) reviewed, {sum(bool(r.reasons) for r in reviews)} flagged")
    if args.json:
        Path(args.json).write_text(json.dumps([{"student": r.student, "assignment": r.assignment,
                                                "columns": r.columns()} for r in reviews], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
