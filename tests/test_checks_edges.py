"""The test cells' checks at their edges: students are graded by these, so a wrong edge fails a correct
student or passes a wrong one. Tolerances are worked by hand in each test (number(): within
max(abs_tol, rel x |expected|), by default rel 2 % and abs 0.011)."""

from __future__ import annotations

import numpy as np
import pytest

from workshop.student import checks


def passes(check, *args, **kw) -> bool:  # noqa: ANN001
    try:
        check(*args, **kw)
    except AssertionError:
        return False
    return True


# ---------------------------------------------------------------- number
@pytest.mark.parametrize("answer, expected, ok", [
    (10.19, 10.0, True), (10.21, 10.0, False),        # 2 % of 10 is 0.2
    (9.81, 10.0, True), (9.79, 10.0, False),
    (-10.19, -10.0, True), (-10.21, -10.0, False),    # the tolerance follows |expected|
    (0.1109, 0.1, True), (0.1111, 0.1, False),        # small values: the absolute 0.011 wins over 2 % (0.002)
    (0.0109, 0.0, True), (-0.0111, 0.0, False),
    (102, 100, True), (103, 100, False),              # ints are numbers too
])
def test_number_just_inside_and_just_outside_the_tolerance(answer: float, expected: float, ok: bool) -> None:
    assert passes(checks.number, answer, expected, "x") is ok


def test_number_on_the_bound_itself_passes() -> None:
    """Values exactly representable in binary, so the bound is met exactly: `<=`, not `<`."""
    assert passes(checks.number, 10.0, 8.0, "x", rel=0.25, abs_tol=0.0)       # |10 - 8| = 2 = 0.25 x 8
    assert not passes(checks.number, 10.0625, 8.0, "x", rel=0.25, abs_tol=0.0)
    assert passes(checks.number, 1.5, 1.0, "x", rel=0.0, abs_tol=0.5)
    assert not passes(checks.number, 1.5625, 1.0, "x", rel=0.0, abs_tol=0.5)


def test_number_with_an_infinite_answer_or_reference() -> None:
    with pytest.raises(AssertionError, match="your answer is not a finite number"):
        checks.number(float("inf"), 2.0, "speed-up")
    with pytest.raises(AssertionError, match="your answer is not a finite number"):
        checks.number(np.float64("-inf"), 2.0, "speed-up")
    # a reference that is not a number (a run that measured nothing) is not the student's fault
    for reference in (float("inf"), float("nan"), None, "n/a"):
        with pytest.raises(AssertionError, match="there is no reference value for speed-up: did the job complete?"):
            checks.number(2.0, reference, "speed-up")


def test_number_messages() -> None:
    with pytest.raises(AssertionError) as e:
        checks.number(2.5, 2.0, "loss", hint="read the log")
    assert str(e.value) == "loss = 2.5 is not right: read the log"
    with pytest.raises(AssertionError) as e:
        checks.number(None, 2.0, "loss")
    assert str(e.value) == "loss is still empty: fill it in"
    with pytest.raises(AssertionError) as e:
        checks.number([2.0], 2.0, "loss")
    assert str(e.value) == "loss should be a number, got [2.0]"


def test_number_prints_what_passed(capsys: pytest.CaptureFixture[str]) -> None:
    checks.number(np.float32(0.5), 0.5, "efficiency")
    assert capsys.readouterr().out == "ok: efficiency = 0.5\n"


# ---------------------------------------------------------------- value
def test_value_lists_of_the_wrong_length() -> None:
    assert not passes(checks.value, [1, 2], [1, 2, 3], "shape")      # zip() alone would stop at the shorter
    assert not passes(checks.value, [1, 2, 3], [1, 2], "shape")
    assert not passes(checks.value, [], [0], "shape")
    assert not passes(checks.value, {"a": [1, 2]}, {"a": [1, 2, 2]}, "nested")
    assert passes(checks.value, (1024, 96), [1024, 96], "shape")      # a tuple is read as the list it is


def test_value_dicts_with_a_key_more_or_less() -> None:
    assert not passes(checks.value, {"a": 1}, {"a": 1, "b": 2}, "state")
    assert not passes(checks.value, {"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 2}, "state")
    assert not passes(checks.value, {"a": 1, "c": 2}, {"a": 1, "b": 2}, "state")


def test_value_tolerance_and_types() -> None:
    assert passes(checks.value, [1.0000009], [1.0], "x")                # rel 1e-6 of 1
    assert not passes(checks.value, [1.0000011], [1.0], "x")
    assert passes(checks.value, 0.0, 1e-9, "x") and not passes(checks.value, 0.0, 1.1e-9, "x")
    assert not passes(checks.value, "4", 4, "bytes")                   # a string is not the number
    assert not passes(checks.value, [4], 4, "bytes")
    assert not passes(checks.value, "full_shard", "FULL_SHARD", "name")  # value() compares strings exactly
    assert passes(checks.value, {"w": np.int64(4)}, {"w": 4}, "bytes")
    with pytest.raises(AssertionError) as e:
        checks.value(None, [1], "labels")
    assert str(e.value) == "labels is still empty: fill it in"


# ---------------------------------------------------------------- choice
def test_choice_edges() -> None:
    assert not passes(checks.choice, 1, True, "gate passes")            # a bool is asked for: 1 is not True
    assert not passes(checks.choice, "True", True, "gate passes")
    assert passes(checks.choice, np.True_, True, "gate passes")        # numpy's own bool is a bool
    assert not passes(checks.choice, np.False_, True, "gate passes")
    assert passes(checks.choice, "FULL_shard", "full_shard", "fastest", options=["full_shard", "ddp"])
    assert not passes(checks.choice, "ddp", "full_shard", "fastest", options=["full_shard", "ddp"])
    with pytest.raises(AssertionError) as e:
        checks.choice("zero3", "ddp", "strategy", options=["ddp"])
    assert str(e.value) == "strategy: 'zero3' is not one of ['ddp']"


# ---------------------------------------------------------------- holds
def test_holds_only_with_a_true_verdict() -> None:
    """A rule that returns the student's own value (1, "yes", a list) has not said the rule holds."""
    for verdict in (1, "yes", [True], 1.0, None, False, np.False_):
        with pytest.raises(AssertionError, match="EM <= F1 does not hold"):
            checks.holds({"em": 1}, lambda _, v=verdict: v, "EM <= F1")
    checks.holds({"em": 1}, lambda _: True, "EM <= F1")


def test_holds_with_a_rule_computed_with_numpy() -> None:
    """An instructor's rule over a pandas table returns numpy's bool: numpy.True_ holds, numpy.False_ does not."""
    speedups = {"2": 1.8, "4": 3.1}
    checks.holds(speedups, lambda s: np.all(np.array(list(s.values())) <= np.array([2, 4])), "speed-up <= GPUs")
    with pytest.raises(AssertionError, match="does not hold"):
        checks.holds(speedups, lambda s: np.all(np.array(list(s.values())) <= np.array([1, 2])), "speed-up <= GPUs")


def test_holds_names_the_error_of_a_rule_that_cannot_be_evaluated() -> None:
    with pytest.raises(AssertionError) as e:
        checks.holds({}, lambda b: b["em"] <= b["f1"], "EM <= F1", hint="fill both")
    assert str(e.value) == "EM <= F1 does not hold (KeyError: 'em'): fill both"


def test_messages_without_a_hint_and_of_an_empty_choice(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(AssertionError) as e:
        checks.holds({"em": 1}, lambda _: False, "EM <= F1")
    assert str(e.value) == "EM <= F1 does not hold"                   # no hint: nothing after it
    with pytest.raises(AssertionError) as e:
        checks.choice(None, "ddp", "fastest")
    assert str(e.value) == "fastest is still empty: fill it in"
    with pytest.raises(AssertionError) as e:
        checks.choice("ddp", "full_shard", "fastest", hint="compare the throughputs")
    assert str(e.value) == "fastest: 'ddp' is not right: compare the throughputs"
    checks.value([1], [1], "labels")
    checks.choice("ddp", "ddp", "fastest")
    checks.holds(1, lambda _: True, "rule")
    assert capsys.readouterr().out == "ok: labels\nok: fastest\nok: rule\n"


@pytest.mark.parametrize("check, args", [
    (checks.number, (2.0, 2.0)), (checks.value, ([1], [1])), (checks.choice, ("ddp", "ddp")),
    (checks.holds, (1, lambda _: True)), (checks.form, (1, lambda _: True)),
])
def test_each_check_replays_its_own_kind_of_record(check, args) -> None:  # noqa: ANN001
    """In the independent re-run the answer comes from the record of the same kind and name, or not at all."""
    from workshop.grading.integrity import Replay

    kind = check.__name__
    answer = args[0]
    checks._replay = Replay([{"v": 1, "kind": kind, "what": "x", "answer": repr(answer)}])
    try:
        check(None, *args[1:], "x")               # the kernel's value (None) is never used
    finally:
        checks._replay = None
    other = "number" if kind != "number" else "value"
    checks._replay = Replay([{"v": 1, "kind": other, "what": "x", "answer": repr(answer)}])
    try:
        with pytest.raises(AssertionError, match="do not line up"):
            check(None, *args[1:], "x")
    finally:
        checks._replay = None


def test_while_nbgrader_grades_each_check_records_the_answer_as_plain_data(monkeypatch) -> None:  # noqa: ANN001
    """In a kernel (an IPython shell) under NBGRADER_EXECUTION, the answer goes into the cell's output as a
    record the integrity review replays; outside grading nothing is published."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    assert not InteractiveShell.initialized()
    InteractiveShell.instance()
    try:
        with capture_output() as quiet:
            checks.number(2.5, 2.5, "loss")
        monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
        with capture_output() as graded:
            checks.number(np.float64(2.5), 2.5, "loss")
            with pytest.raises(AssertionError):
                checks.value(Anything(1.0), [1], "labels")
    finally:
        InteractiveShell.clear_instance()          # the rest of the session runs outside a kernel again
    assert quiet.outputs == []
    records = [o.data[checks.MIME] for o in graded.outputs]
    assert records == [{"v": checks.RECORD_VERSION, "kind": "number", "what": "loss", "answer": "2.5"},
                       {"v": checks.RECORD_VERSION, "kind": "value", "what": "labels",
                        "invalid": "an object of type Anything"}]
    assert graded.outputs[0].data["text/plain"] == "(answer recorded for grading: loss)"


class Anything(float):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = float.__hash__


def test_a_failed_rule_with_a_hint_and_answers_nested_too_deep() -> None:
    with pytest.raises(AssertionError) as e:
        checks.holds(1, lambda _: False, "speed-up <= GPUs", hint="rerun the smallest run")
    assert str(e.value) == "speed-up <= GPUs does not hold: rerun the smallest run"
    deep: list = [1.0]
    for _ in range(checks.MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(checks.NotPlain) as e:
        checks.plain(deep)
    assert str(e.value) == "nested too deep"
    shallow: list = [1.0]
    for _ in range(checks.MAX_DEPTH - 1):
        shallow = [shallow]
    assert checks.plain(shallow) == shallow


def nested(inner: object, levels: int, wrap: str) -> object:
    for _ in range(levels):
        inner = {"k": inner} if wrap == "dict" else [inner]
    return inner


@pytest.mark.parametrize("wrap", ["list", "dict"])
@pytest.mark.parametrize("scalar", [1.0, np.float64(1.0), np.int64(1)])
def test_nesting_is_limited_the_same_for_lists_dicts_and_numpy_scalars(wrap: str, scalar: object) -> None:
    """MAX_DEPTH levels of lists or dicts are an answer, one more is not; a numpy scalar is the Python
    number it stands for, at the same depth (it used to count as one level more)."""
    assert checks.plain(nested(scalar, checks.MAX_DEPTH, wrap)) == nested(1, checks.MAX_DEPTH, wrap)
    with pytest.raises(checks.NotPlain, match="nested too deep"):
        checks.plain(nested(scalar, checks.MAX_DEPTH + 1, wrap))


def test_a_dict_key_that_is_not_plain_names_its_type() -> None:
    with pytest.raises(AssertionError) as e:
        checks.value({("ddp", 2): 1.0}, {"ddp": 1.0}, "speed-ups")
    assert str(e.value) == ("speed-ups: your answer is a dict key of type tuple: give a plain number, string, bool, "
                            "list or dict")


def test_value_compares_the_numbers_inside_a_dict_within_the_tolerance() -> None:
    """A memory breakdown computed in floats matches the reference within rel 1e-6, key by key."""
    assert passes(checks.value, {"weights": 4.000002, "grads": 4}, {"weights": 4, "grads": 4}, "bytes")
    assert not passes(checks.value, {"weights": 4.00001, "grads": 4}, {"weights": 4, "grads": 4}, "bytes")


def test_the_default_messages_of_number_and_value() -> None:
    """number() sends the student back to the log; value() without a hint says only what is wrong."""
    with pytest.raises(AssertionError) as e:
        checks.number(2.5, 2.0, "loss")
    assert str(e.value) == ("loss = 2.5 is not right: look again at your job's log (the WORKSHOP_SUMMARY line) or "
                            "the table built from it")
    with pytest.raises(AssertionError) as e:
        checks.value([1, 2], [1, 3], "labels")
    assert str(e.value) == "labels is not right"
    with pytest.raises(AssertionError) as e:
        checks.value([1, 2], [1, 3], "labels", hint="-100 marks the prompt")
    assert str(e.value) == "labels is not right: -100 marks the prompt"
    with pytest.raises(AssertionError) as e:
        checks.choice("zero3", "ddp", "strategy", options=["ddp"], hint="pick a strategy the course ran")
    assert str(e.value) == "strategy: 'zero3' is not one of ['ddp']: pick a strategy the course ran"


def test_while_grading_a_failed_check_sets_the_reference_beside_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the feedback (NBGRADER_EXECUTION set) the student reads the reference; live, never (a bisection)."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    for check, args, message in (
        (checks.number, (2.5, 2.0, "loss"), "loss = 2.5 is not right (the reference: 2.0): look again"),
        (checks.value, ([1, 2], [1, 3], "labels"), "labels is not right (the reference: [1, 3])"),
        (checks.choice, ("ddp", "full_shard", "fastest"), "fastest: 'ddp' is not right (the reference: 'full_shard')"),
    ):
        with pytest.raises(AssertionError) as e:
            check(*args)
        assert str(e.value).startswith(message), str(e.value)


def test_a_form_check_names_what_is_not_in_form_yet() -> None:
    """A rule that cannot run on the answer (a missing key) says which error; a false one says only that the
    form is not there yet: no hint, as the value is graded elsewhere."""
    with pytest.raises(AssertionError) as e:
        checks.form({}, lambda h: 0 < h["ddp"] <= 1, "held_fraction")
    assert str(e.value) == "held_fraction: not in that form yet (KeyError: 'ddp')"
    with pytest.raises(AssertionError) as e:
        checks.form({"ddp": 2}, lambda h: 0 < h["ddp"] <= 1, "held_fraction")
    assert str(e.value) == "held_fraction: not in that form yet"


def test_a_reveal_shows_the_reference_only_while_grading(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Live, the student reads where the reference will be, and no function of the hidden tests is called;
    while grading, the reference itself, or a function's result."""
    called = []
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert checks.reveal(lambda: called.append(1), "the rule's sweep") is None
    assert checks.reveal({"ddp": 1.0}, "held_fraction") is None
    assert called == []
    assert capsys.readouterr().out == ("the rule's sweep: shown in your feedback, once your answers are graded\n"
                                       "held_fraction: shown in your feedback, once your answers are graded\n")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert checks.reveal({"ddp": 1.0}, "held_fraction") == {"ddp": 1.0}
    assert checks.reveal(lambda: [1, 2], "the rule's sweep") == [1, 2]
    assert capsys.readouterr().out == ""


def test_a_reveal_whose_hidden_test_stopped_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hidden test that failed before defining its reference leaves a sentence, not a NameError, in the
    feedback."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    shown = checks.reveal(lambda: rule_table, "the rule's table")  # noqa: F821 (defined by a hidden test only)
    assert shown == ("the rule's table: not shown, the check above stopped before its reference "
                     "(name 'rule_table' is not defined)")


def test_replay_answers_makes_every_check_read_the_record_until_cleared() -> None:
    """The integrity review's switch: with a replay, the kernel's value is ignored; with None, it is read again."""
    from workshop.grading.integrity import Replay

    checks.replay_answers(Replay([{"v": 1, "kind": "number", "what": "loss", "answer": "2.0"}]))
    try:
        checks.number(99.0, 2.0, "loss")                  # the kernel's 99.0 is not the answer
    finally:
        checks.replay_answers(None)
    assert not passes(checks.number, 99.0, 2.0, "loss")
