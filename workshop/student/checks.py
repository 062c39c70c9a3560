"""The checks a notebook's test cells call, built so that grading never has to trust the kernel.

A test cell runs in the student's kernel, where every name and module can be patched. So each check
does two things:

1. it compares the answer with the reference and raises AssertionError on a mismatch, so nbgrader's
   score and the student's feedback work as usual;
2. while nbgrader grades (`NBGRADER_EXECUTION`), it records the student's answer as plain data in the
   cell's output (a display output of type `MIME`).

`workshop.grading.integrity` then re-runs the instructor's locked cells in a fresh process the student's code
never touches: there every check takes its answer from the record, not from the kernel, and every
reference is recomputed by the course's own code from the submission's saved, digest-checked logs.
A missing record is a wrong answer. Only int, float, str, bool, None, list, tuple and dict survive as
an answer: any other object (one whose `__eq__` is always true, a float subclass) is a wrong answer.

Rules for test cells (so that the re-run can recompute them):
- a student's value appears only as the first argument of a check: a name with constant
  subscripts (`baseline["em"]`, `scaling[n]["speedup"]` where `n` comes from a locked cell), or a
  call of the student's function on locked inputs (`checks.value(mask_labels(unseen), ...)`);
- the reference is computed in a locked cell by the course's code (`lab.table`, `lab.run(step,
  wait=False).summary()`, `workshop.results.memory`, ...), never from a student's variable; jobs are found by
  step and locked settings.

    checks.number(baseline["last_logged_loss"], reference["last_logged_loss"], "last_logged_loss")
    checks.value(bytes_per_param, {"weights": 4, "grads": 4, "adam": 8}, "bytes per parameter")
    checks.choice(gate_passed, busbw >= threshold, "does the gate pass?")
    checks.choice(fastest, "shard_grad_op", "fastest strategy", options=["ddp", "full_shard", "shard_grad_op"])
    checks.holds(baseline, lambda b: 0 <= b["em"] <= b["f1"] <= 100, "EM <= F1 <= 100")

A reference that would answer a graded cell (the instructor's sweep, the rule's values beside the
student's) is shown with `reveal`, after the test cells: only while nbgrader grades, so the student
reads it in the feedback, once the answer is graded (docs/grading.md).
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any, Callable, Sequence

MIME = "application/vnd.fsdp-workshop.answer+json"
RECORD_VERSION = 1
MAX_DEPTH = 20


class NotPlain(ValueError):
    """An answer that is not plain data (int, float, str, bool, None, list, tuple, dict)."""


# ---------------------------------------------------------------------------------- plain data
def _numpy_scalar(value: Any) -> Any:
    """numpy's own scalar types (exact types only: a subclass could override `item`), as Python values."""
    np = sys.modules.get("numpy")
    t = type(value)
    if np is not None and t in (np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8,
                                np.uint64, np.uint32, np.uint16, np.uint8, np.bool_):
        return t.item(value)
    raise NotPlain(f"an object of type {t.__name__}")


def plain(value: Any, depth: int = 0) -> Any:
    """`value` rebuilt from exact built-in types; NaN becomes None (an empty answer).

    Types are tested exactly (`type(x) is float`), never with isinstance: a subclass could carry its
    own `__eq__`, `__float__` or `__getitem__`."""
    if depth > MAX_DEPTH:
        raise NotPlain("nested too deep")
    t = type(value)
    if t in (bool, int, str, type(None)):
        return value
    if t is float:
        if math.isnan(value):
            return None
        if math.isinf(value):
            raise NotPlain("not a finite number")
        return value
    if t in (list, tuple):
        return [plain(v, depth + 1) for v in t.__iter__(value)]
    if t is dict:
        out = {}
        for k, v in dict.items(value):
            if type(k) not in (str, int, bool, float, type(None)):
                raise NotPlain(f"a dict key of type {type(k).__name__}")
            out[k] = plain(v, depth + 1)
        return out
    return plain(_numpy_scalar(value), depth)   # the Python scalar it is, in the same place: no level deeper


# ---------------------------------------------------------------------------------- recording / replay
_replay: Any = None   # set only by workshop.grading.integrity, in its own process: answers come from the records


def replay_answers(replay: Any) -> None:
    """Read answers from `replay` (the integrity review's records) instead of the cell, until called with None.
    Only the review calls it, in its own process, where no student's code has run before it."""
    global _replay
    _replay = replay


def _record(kind: str, what: str, answer: Any = None, invalid: str | None = None) -> None:
    """Put the answer, as plain data, into the test cell's output while nbgrader grades."""
    if not os.environ.get("NBGRADER_EXECUTION"):
        return
    try:
        from IPython import get_ipython
        from IPython.display import publish_display_data
    except ImportError:
        return
    if get_ipython() is None:
        return
    record = {"v": RECORD_VERSION, "kind": kind, "what": what}
    if invalid is None:
        record["answer"] = repr(answer)    # exact built-ins only: ast.literal_eval reads it back
    else:
        record["invalid"] = invalid
    publish_display_data({MIME: record, "text/plain": f"(answer recorded for grading: {what})"})


def _answer(kind: str, what: str, raw: Any) -> Any:
    """The student's answer as plain data: recorded here, or, in the independent re-run, read back."""
    if _replay is not None:
        return _replay.take(kind, what)
    try:
        answer = plain(raw)
    except NotPlain as e:
        _record(kind, what, invalid=str(e))
        raise AssertionError(f"{what}: your answer is {e}: give a plain number, string, bool, list or dict") from None
    _record(kind, what, answer)
    return answer


# ---------------------------------------------------------------------------------- comparison
def _is_number(x: Any) -> bool:
    return type(x) in (int, float)


def _close(got: Any, want: Any, rel: float, abs_tol: float) -> bool:
    if _is_number(got) and _is_number(want):
        return abs(got - want) <= max(abs_tol, rel * abs(want))
    if type(got) is not type(want):
        return False
    if type(want) is dict:
        return got.keys() == want.keys() and all(_close(got[k], want[k], rel, abs_tol) for k in want)
    if type(want) is list:
        return len(got) == len(want) and all(_close(g, w, rel, abs_tol) for g, w in zip(got, want))
    return got == want


def _fail(message: str, hint: str, reference: Any = None) -> None:
    """Fail the check. While nbgrader grades, the message also holds the reference, so the feedback sets it
    beside the student's value; in the live notebook it never does (a check must not answer a bisection)."""
    from workshop.student.cell_label import where_now   # which cell to scroll to, when JupyterLab says

    shown = f" (the reference: {reference!r})" if reference is not None and os.environ.get("NBGRADER_EXECUTION") else ""
    raise AssertionError(message + shown + (f": {hint}" if hint else "") + where_now())


# ---------------------------------------------------------------------------------- the checks
def number(answer: Any, expected: Any, what: str, rel: float = 0.02, abs_tol: float = 0.011,
           hint: str = "look again at your job's log (the WORKSHOP_SUMMARY line) or the table built from it") -> None:
    """A number within `rel` (relative) or `abs_tol` (absolute) of `expected`: a figure from the
    student's own logs, or one the memory model or a stated rule gives."""
    got = _answer("number", what, answer)
    try:
        want = plain(expected)
    except NotPlain:     # an infinite reference (a run that measured nothing): not the student's mistake
        want = None
    if got is None:
        _fail(f"{what} is still empty", "fill it in")
    if not _is_number(got):
        _fail(f"{what} should be a number, got {got!r}", "")
    if not _is_number(want):
        raise AssertionError(f"there is no reference value for {what}: did the job complete?")
    if not _close(got, want, rel, abs_tol):
        _fail(f"{what} = {got:g} is not right", hint, want)
    print(f"ok: {what} = {got:g}")


def value(answer: Any, expected: Any, what: str, rel: float = 1e-6, abs_tol: float = 1e-9, hint: str = "") -> None:
    """A structure (list, dict, tuple of numbers and strings) equal to `expected`, numbers within the
    tolerances: e.g. a reference function's result (`workshop.training.data` labels, a memory-model breakdown)."""
    got = _answer("value", what, answer)
    want = plain(expected)
    if got is None:
        _fail(f"{what} is still empty", "fill it in")
    if not _close(got, want, rel, abs_tol):
        _fail(f"{what} is not right", hint, want)
    print(f"ok: {what}")


def _normal(x: Any) -> Any:
    return " ".join(x.split()).lower() if type(x) is str else x


def choice(answer: Any, expected: Any, what: str, options: Sequence[Any] | None = None, hint: str = "") -> None:
    """One choice among `options` (a string, compared without case and extra spaces) or a yes/no
    answer (`expected` a bool: only True or False is accepted, not 1 or "yes")."""
    got = _answer("choice", what, answer)
    want = plain(expected)
    if got is None:
        _fail(f"{what} is still empty", "fill it in")
    if options is not None and _normal(got) not in [_normal(plain(o)) for o in options]:
        _fail(f"{what}: {got!r} is not one of {list(options)!r}", hint)
    if type(got) is not type(want) or _normal(got) != _normal(want):
        _fail(f"{what}: {got!r} is not right", hint, want)
    print(f"ok: {what}")


def reveal(reference: Any, what: str) -> Any:
    """`reference` while nbgrader grades (it lands in the student's feedback); in the live notebook a line
    saying where to find it. A locked cell after the test cells shows a reference this way when it would
    answer a graded cell: the student sees it once the answer is graded, never before. Given a function
    (`lambda: table`), it is called only while grading: the names a hidden test defines exist only then."""
    if os.environ.get("NBGRADER_EXECUTION"):
        if not callable(reference):
            return reference
        try:   # a reference computed by the hidden tests above: it exists only once they ran
            return reference()
        except NameError as e:
            return f"{what}: not shown, the check above stopped before its reference ({e})"
    print(f"{what}: shown in your feedback, once your answers are graded")
    return None


def form(answer: Any, rule: Callable[[Any], bool], what: str) -> None:
    """A visible check of an answer's form only (its type, keys, units, a plausible range): the value itself
    is graded by a hidden test where grading runs, so passing here says nothing about being right, and a
    bisection against this check learns nothing. The message says so."""
    got = _answer("form", what, answer)
    try:
        ok = rule(got)
    except Exception as e:   # a missing key or an empty value: not yet an answer of that form
        _fail(f"{what}: not in that form yet ({type(e).__name__}: {e})", "")
    if _verdict(ok) is not True:
        _fail(f"{what}: not in that form yet", "")
    print(f"form ok: {what} (only the form is checked here; the value is graded with your notebook)")


def _verdict(ok: Any) -> Any:
    """A rule's result as Python's bool where it is numpy's own (a rule computed over a pandas table
    returns numpy.True_); anything else is left as it is, so only True itself says the rule holds."""
    np = sys.modules.get("numpy")
    return np.bool_.item(ok) if np is not None and type(ok) is np.bool_ else ok


def holds(answer: Any, rule: Callable[[Any], bool], what: str, hint: str = "") -> None:
    """A stated rule holds for the answer (given as plain data): consistency between the student's
    own numbers, e.g. EM <= F1, or a speed-up no larger than the GPU count."""
    got = _answer("holds", what, answer)
    try:
        ok = rule(got)
    except Exception as e:   # a missing key or an empty value: the rule cannot hold
        _fail(f"{what} does not hold ({type(e).__name__}: {e})", hint)
    if _verdict(ok) is not True:
        _fail(f"{what} does not hold", hint)
    print(f"ok: {what}")
