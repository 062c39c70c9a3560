"""A clever student cannot talk the grading round: real nbgrader autograde on real submissions (the
session's executed course and its saved jobs), then the independent review `workshop.grading.grade` runs.

Every exploit below wins points in nbgrader's kernel, or tries to; each must end with no points, or
with its points withheld and the submission flagged with the reason. The genuine solution keeps full
marks with no flag; the blank release scores 0.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Callable

import nbformat
import pytest

from tests.grading import Course, append_to_cell, grade_the_class, insert_cell_after
from workshop.grading.release import assignments

pytestmark = pytest.mark.slow

A = "01_baseline"
FIRST = "nb01-mask-answer"      # the first answer cell: what is appended here runs before every test
ANSWERS = (FIRST, "nb01-untrained-answer", "nb01-predict", "nb01-eight-bit", "nb01-13-baseline-table", "nb01-epoch-answer")
ZERO = [   # every answer wrong: appended to each answer cell
    (FIRST, "def encode(tok, example, max_length):\n    return {'input_ids': [], 'labels': []}"),
    ("nb01-untrained-answer", "untrained_loss = -1.0"),
    ("nb01-predict", "bytes_per_param = {k: 0 for k in bytes_per_param}"),
    ("nb01-eight-bit", "eight_bit_bytes_per_param = {k: 0 for k in eight_bit_bytes_per_param}\n"
                       "largest_model_b = {k: -1.0 for k in largest_model_b}"),
    ("nb01-13-baseline-table", "baseline = {k: -1.0 for k in baseline}"),
    ("nb01-epoch-answer", "squad_epoch_hours = -1.0"),
]


def full(course: Course) -> float:
    return sum(course.max_points(A).values())


@pytest.fixture(scope="module")
def genuine(course_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Course, tuple]:
    """alice hands in every executed solution: a class of its own, so that no one else's copy of the same runs is
    in it (bob's blank release of 01 is graded in tests/test_course.py's class)."""
    course = Course(tmp_path_factory.mktemp("genuine"))
    for name in assignments():
        course.submit("alice", name, course_run / name)
    return course, grade_the_class(course, ",".join(assignments()))


@pytest.mark.parametrize("name", assignments())
def test_genuine_solution_keeps_full_marks_with_no_flag(genuine: tuple[Course, tuple], name: str) -> None:
    """The executed solution earns every point of every test cell, and the review agrees."""
    course, (rows, cells) = genuine
    assert cells[("alice", name)] == course.max_points(name)
    total = sum(course.max_points(name).values())
    assert rows[("alice", name)] == {"score": total, "verified_score": total, "flags": 0, "flag_reasons": ""}


def exploit_folder(course_run: Path, where: Path, cells: list[tuple[str, str]],
                   jobs_edit: Callable[[Path], None] | None = None) -> tuple[Path, Callable[[nbformat.NotebookNode], None]]:
    """A submission made from the executed solution: `cells` are (grade id, code), appended to an answer
    cell or inserted after a locked one."""
    folder = where / A
    shutil.copytree(course_run / A, folder)
    if jobs_edit is not None:
        jobs_edit(folder / "jobs")

    def edit(nb: nbformat.NotebookNode) -> None:
        for after, code in cells:
            if after in ANSWERS:
                append_to_cell(nb, after, code)
            else:
                insert_cell_after(nb, after, code)

    return folder, edit


def assert_no_points_or_flagged(score: float, columns: dict, *reasons: str) -> None:
    """No points at all, or every point nbgrader gave withheld; and each reason in the report."""
    assert score == 0 or columns["verified_score"] == 0, (score, columns)
    assert columns["flags"] > 0
    for reason in reasons:
        assert re.search(reason, columns["flag_reasons"]), (reason, columns["flag_reasons"])


def _edit_log(jobs: Path) -> None:
    """A faster run typed into the saved log's WORKSHOP_SUMMARY line."""
    (log,) = jobs.glob("baseline-*/slurm-*.out")
    lines = log.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("WORKSHOP_SUMMARY "):
            summary = json.loads(line.split(" ", 1)[1])
            summary["train_samples_per_s"] = round(summary["train_samples_per_s"] * 2, 3)
            lines[i] = "WORKSHOP_SUMMARY " + json.dumps(summary) + "\n"
    log.write_text("".join(lines))


# The checks passed through with the reference as the answer: the kernel records the reference, so the
# re-run alone agrees with nbgrader (the audit's hole A)
PASS_THROUGH = """
_o, _v, _c = wc.number, wc.value, wc.choice
wc.__dict__["form"] = lambda *a, **k: None   # a visible form check has no reference to pass through
wc.__dict__["number"] = lambda a, e, w, **k: _o(e, e, w, **k)
wc.__dict__["value"] = lambda a, e, w, **k: _v(e, e, w, **k)
wc.__dict__["choice"] = lambda a, e, w, **k: _c(e, e, w, **k)"""


def _ship_helper(jobs: Path) -> None:
    """helper.py beside the notebook (nbgrader copies it next to the kernel): the pass-through patch,
    where the scan of the notebook's cells cannot see it."""
    (jobs.parent / "helper.py").write_text("import workshop.student.checks as wc\n" + PASS_THROUGH + "\n")


# a student function the test cell calls, publishing the right answer as a record of its own
FORGER = """
def encode(tok, example, max_length):
    from IPython.display import publish_display_data
    what = ("input_ids and labels of unseen examples" if max_length == config.max_length
            else f"input_ids and labels at max_length {max_length}")
    right = [encode_for_training(tok, ex, max_length) for ex in unseen]
    publish_display_data({"application/vnd.fsdp-" + "workshop.answer+json": {"v": 1, "kind": "value", "what": what,
                                                                            "answer": repr(right)}})
    return {"input_ids": [], "labels": []}"""

# An honest student debugging: the interpreter's modules read, IPython's timing and help used, nothing patched
DEBUGGING = """
import sys, os, inspect, traceback
print(sys.version, sys.version_info.major, os.getcwd(), sorted(os.listdir("."))[:3], os.path.join("jobs", "x"))
print(inspect.getsource(encode), inspect.signature(encode))
try:
    encode(tok, examples[0], 8)
except Exception:
    traceback.print_exc()"""

# The same modules used to reach the notebook's namespace: the function the first test calls swaps the
# name `checks` the later test cells use for checkers that pass anything
SLY = """
import sys


class _Pass:
    number = value = choice = holds = form = staticmethod(lambda *a, **k: None)


def encode(tok, example, max_length):
    sys._getframe(1).f_globals["checks"] = _Pass
    return {"input_ids": [], "labels": []}"""

# One student per exploit: (cells appended or inserted, an edit of the saved jobs or of their folder)
EXPLOITS: dict[str, tuple[list[tuple[str, str]], Callable[[Path], None] | None]] = {
    # zero answers; the old checker redefined in an answer cell, the new one in a cell slipped in
    # after the locked cell that imports it: nbgrader's kernel passes every test
    "mallory": ([*ZERO, (FIRST, "def check(*args, **kwargs):\n    pass"),
                 ("nb01-mask-unseen", "class checks:\n    number = value = holds = form = staticmethod(lambda *a, **k: None)")],
                None),
    "oscar": ([*ZERO, (FIRST, """
import workshop.student.lab, workshop.student.checks
workshop.student.lab.check = lambda *a, **k: None
workshop.student.checks.number = workshop.student.checks.value = workshop.student.checks.holds = lambda *a, **k: None
workshop.student.checks.form = lambda *a, **k: None""")], None),
    # jupyter/nbgrader#1379: an answer whose comparisons are always true
    "trudy": ([(FIRST, """
class Anything(float):
    def __eq__(self, other): return True
    def __le__(self, other): return True
    def __ge__(self, other): return True
    def __gt__(self, other): return True
    def __sub__(self, other): return Anything(0.0)
    def __abs__(self): return 0.0
def encode(tok, example, max_length):
    return Anything(0.0)"""),
               ("nb01-untrained-answer", "untrained_loss = Anything(0.0)"),
               ("nb01-predict", "bytes_per_param = Anything(0.0)"),
               ("nb01-eight-bit", "eight_bit_bytes_per_param = Anything(0.0)\nlargest_model_b = Anything(0.0)"),
               ("nb01-13-baseline-table", "baseline = {k: Anything(0.0) for k in baseline}"),
               ("nb01-epoch-answer", "squad_epoch_hours = Anything(0.0)")], None),
    # jupyter/nbgrader#1324: failing tests that leave no error output look passed to nbgrader
    "eve": ([*ZERO, (FIRST, """
import os, sys, IPython
IPython.core.interactiveshell.InteractiveShell.showtraceback = lambda *a, **k: None   # as in nbgrader#1324
sys.stderr = open(os.devnull, "w")
get_ipython().showtraceback = lambda *a, **k: None
get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)""")], None),
    # the checks patched through the module's __dict__ to compare the reference with itself
    "peggy": ([*ZERO, (FIRST, "import workshop.student.checks as wc" + PASS_THROUGH)], None),
    # the same patch in a file handed in beside the notebook, imported by a plain `import helper`
    "ivan": ([*ZERO, (FIRST, "import helper")], _ship_helper),
    # a forged answer record, published by the student's function that the test cell calls
    "victor": ([*ZERO, (FIRST, FORGER)], None),
    # the answer key read from the instructor's cells: the reference function, the references
    "walter": ([*ZERO, (FIRST, "def encode(tok, example, max_length):\n"
                               "    return encode_for_training(tok, example, max_length)"),
                ("nb01-predict-reference", "bytes_per_param = state_reference\neight_bit_bytes_per_param = eight_bit_reference\n"
                                           "largest_model_b = fits_reference\nuntrained_loss = untrained_reference"),
                ("nb01-15-reference", "baseline = {k: reference[k] for k in baseline}\n"
                                      "squad_epoch_hours = epoch_hours_reference")], None),
    # the answers are read from the table of the edited log: nbgrader's kernel agrees with them
    "frank": ([], _edit_log),
    # frames reached through sys, the namespace's checkers swapped from inside the tested function
    "sly": ([*ZERO, (FIRST, SLY)], None),
    # not an exploit: the solution, debugged with sys, os, inspect, traceback, %time and ? (tests below)
    "dora": ([(FIRST, DEBUGGING), ("nb01-predict", "%time total = sum(bytes_per_param.values())"),
              ("nb01-11-table", "measured?\nimport sys\nprint(sys.path, file=sys.stderr)")], None),
    # alice's own run, handed in by grace as well: her notebook, alice's jobs
    "alice": ([], None),
    "grace": ([], None),
}


@pytest.fixture(scope="module")
def exploits(course_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Course, dict]:
    """Every exploit above handed in to one class, graded by the instructor's one command."""
    course = Course(tmp_path_factory.mktemp("exploits"))
    for student, (cells, jobs_edit) in EXPLOITS.items():
        folder, edit = exploit_folder(course_run, tmp_path_factory.mktemp(student), cells, jobs_edit)
        course.submit(student, A, folder, edit)
    return course, {student: row for (student, _), row in grade_the_class(course, A)[0].items()}


def test_a_class_of_submissions_of_one_notebook_is_graded_in_order_with_progress(exploits: tuple[Course, dict]) -> None:
    """A class at scale (tests/test_grade_scale.py graded six copies of the run in a class of its own until issue 51:
    this class, graded once, is that class): many submissions of one notebook, graded by the instructor's one
    command with `--jobs 2`, every one graded, in order, one progress line each, the executed solution handed in
    (alice, and grace's copy of it) at full marks. How fast is a benchmark's question, not a test's:
    `benchmarks/grade_class.py` grades 100 submissions on a quiet machine."""
    course, rows = exploits
    progress = re.findall(r"^\[autograde (\d+)/(\d+)\] ", course.grade_output, flags=re.M)
    assert [int(i) for i, _ in progress] == list(range(1, len(EXPLOITS) + 1)), course.grade_output[-3000:]
    assert {int(n) for _, n in progress} == {len(EXPLOITS)}
    assert set(rows) == set(EXPLOITS) and len(EXPLOITS) >= 6
    assert rows["alice"]["score"] == rows["grace"]["score"] == full(course)


def test_redefined_checker_wins_nothing(exploits: tuple[Course, dict]) -> None:
    course, rows = exploits
    columns = rows["mallory"]
    assert columns["score"] == full(course)   # the exploit works in nbgrader's kernel ...
    assert_no_points_or_flagged(columns["score"], columns, "redefines `checks`", r"withheld: .*no answer was recorded")


def test_patched_workshop_modules_win_nothing(exploits: tuple[Course, dict]) -> None:
    course, rows = exploits
    columns = rows["oscar"]
    assert columns["score"] == full(course)
    assert_no_points_or_flagged(columns["score"], columns, r"assigns `workshop\.student\.lab\.check`",
                                r"assigns `workshop\.student\.checks\.number`", "withheld")


def test_answer_equal_to_anything_wins_nothing(exploits: tuple[Course, dict]) -> None:
    columns = exploits[1]["trudy"]
    assert columns["score"] == 0
    assert_no_points_or_flagged(columns["score"], columns, "defines __eq__")


def test_silenced_tracebacks_win_nothing(exploits: tuple[Course, dict]) -> None:
    columns = exploits[1]["eve"]
    assert_no_points_or_flagged(columns["score"], columns, "showtraceback", "sys.stderr", "exception handler")


def test_checks_patched_to_pass_the_reference_through_win_nothing(exploits: tuple[Course, dict]) -> None:
    """The kernel recorded the reference as every answer, so the re-run agrees with nbgrader; the scan
    flags the patch, and every test after the patching cell loses its points."""
    course, rows = exploits
    columns = rows["peggy"]
    assert columns["score"] >= full(course) - 2   # all but the hidden `holds` (not patched) in nbgrader's kernel
    assert_no_points_or_flagged(columns["score"], columns, r"nb01-mask-answer line \d+: uses `\.__dict__`",
                                r"withheld: it ran after nb01-mask-answer, which the scan flagged")


def test_code_shipped_beside_the_notebook_is_not_imported_and_is_named(exploits: tuple[Course, dict]) -> None:
    """helper.py is copied beside the kernel, but the kernel runs with PYTHONSAFEPATH: `import helper`
    fails, the zero answers stay zero, and the report names the file."""
    columns = exploits[1]["ivan"]
    assert columns["score"] == 0 and columns["verified_score"] == 0, columns
    assert_no_points_or_flagged(columns["score"], columns, r"the submission holds helper\.py")


def test_a_forged_answer_record_wins_nothing(exploits: tuple[Course, dict]) -> None:
    columns = exploits[1]["victor"]
    # the reference function is no name of his kernel since the hidden test reads the grading room's rows (issue
    # 48): what he reads of the instructor's is the hidden test's own `unseen`
    assert_no_points_or_flagged(columns["score"], columns, "publishes display data", "reads `unseen`")


def test_the_answer_key_read_from_the_instructors_cells_wins_nothing(exploits: tuple[Course, dict]) -> None:
    """Issue 48: no visible cell computes a reference any more, so the names walter reads from the instructor's
    cells (`state_reference`, `epoch_hours_reference`) do not exist in his kernel, nor, since the hidden test
    reads the grading room's rows, the mask's reference function: only what his own table shows can score in
    nbgrader; the scan names the reference-only function he called and the review withholds it."""
    course, rows = exploits
    columns = rows["walter"]
    own_table = sum(v for k, v in course.max_points(A).items()
                    if k in ("nb01-16-test-last-logged-loss", "nb01-18-test-train-samples-per-s"))
    assert columns["score"] <= own_table + course.max_points(A)["nb01-test-mask"] < full(course)
    assert_no_points_or_flagged(columns["score"], columns, "uses `encode_for_training`", "withheld: it ran after")


def test_debugging_modules_used_to_reach_the_namespace_win_nothing(exploits: tuple[Course, dict]) -> None:
    """sys imported, as a debugging student does, but used to swap the tests' checkers through a frame: the
    checks pass in nbgrader's kernel and record nothing; the scan names the frame, the review withholds all."""
    columns = exploits[1]["sly"]
    assert columns["score"] > 0
    assert_no_points_or_flagged(columns["score"], columns, r"uses `sys\._getframe`", "reaches a frame")


def test_a_student_who_debugs_and_patches_nothing_keeps_every_point(exploits: tuple[Course, dict]) -> None:
    """Issue 26: an `import sys` (or os, inspect, traceback) to debug, with nothing patched, used to withhold
    every later point; reads, %time and `?` are not findings, and the verified score is the full score."""
    course, rows = exploits
    columns = rows["dora"]
    assert columns["score"] == columns["verified_score"] == full(course), columns
    assert "withheld" not in columns["flag_reasons"]
    # her only flag: the saved jobs she shares with alice and the other students built from the same run
    assert all("one run handed in twice" in reason for reason in columns["flag_reasons"].split("; ")), columns


def test_edited_saved_log_wins_nothing(exploits: tuple[Course, dict]) -> None:
    course, rows = exploits
    columns = rows["frank"]
    assert columns["score"] == full(course)
    # every answer checked against the log is withheld (the two numbers, the epoch's hours); the mask and
    # the model-state arithmetic do not read the log and stand; the flag says why
    log_points = sum(v for k, v in course.max_points(A).items()
                     if k in ("nb01-16-test-last-logged-loss", "nb01-18-test-train-samples-per-s", "nb01-test-epoch-hours"))
    assert log_points == 0.75 and columns["verified_score"] == columns["score"] - log_points
    assert_no_points_or_flagged(0, columns, "edited numbers: the log's WORKSHOP_SUMMARY differs",
                                "withheld: an earlier cell failed: .*edited numbers")


def test_copied_log_of_another_student_is_flagged(exploits: tuple[Course, dict]) -> None:
    # grace hands in alice's folder: whoever copied, both are named
    columns = exploits[1]["grace"]
    assert columns["flags"] > 0 and "one run handed in twice" in columns["flag_reasons"]
    assert "alice" in columns["flag_reasons"]


def test_grade_report_has_the_review_columns(exploits: tuple[Course, dict]) -> None:
    course, rows = exploits
    # alice shares her saved jobs with grace (and the exploits made from the same run), so she is
    # named too; her points all stand. oscar's patched checkers won everything in nbgrader's kernel:
    # the report keeps that score and withholds it.
    assert rows["alice"]["verified_score"] == full(course) and "withheld" not in rows["alice"]["flag_reasons"]
    assert rows["oscar"]["score"] == full(course) and rows["oscar"]["verified_score"] == 0
    assert "withheld" in rows["oscar"]["flag_reasons"]
