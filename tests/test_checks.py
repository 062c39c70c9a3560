"""The checking API of the test cells, and the tamper scan, on their own (fast: no kernel, no nbgrader).

The real-nbgrader exploit tests are in tests/test_integrity.py."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from workshop.student import checks
from workshop.grading.integrity import Placeholder, Replay
from workshop.grading.scan import Cell, answer_key, protected_names, scan_cells


class Anything(float):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = float.__hash__


def test_plain_data_survives_and_clever_objects_do_not() -> None:
    assert checks.plain({1: [np.float64(2.5), (True, None)], "a": np.int64(3)}) == {1: [2.5, [True, None]], "a": 3}
    assert checks.plain(float("nan")) is None
    for clever in (Anything(1.0), object(), {"x": Anything(0)}, {Anything(0): 1}, np.array([1.0])):
        with pytest.raises(checks.NotPlain):
            checks.plain(clever)


def test_number_accepts_rounding_and_rejects_the_rest() -> None:
    checks.number(np.float64(2.31), np.float64(2.3149), "loss")
    for wrong, message in ((2.5, "is not right"), (None, "still empty"), ("2.31", "should be a number"),
                           (True, "should be a number"), (Anything(2.3149), "type Anything")):
        with pytest.raises(AssertionError, match=message):
            checks.number(wrong, 2.3149, "loss")
    with pytest.raises(AssertionError, match="no reference value"):
        checks.number(1.0, float("nan"), "loss")


def test_value_choice_and_rule() -> None:
    checks.value({"weights": 4, "adam": [4, 4]}, {"weights": 4.0, "adam": [4, 4]}, "bytes per parameter")
    with pytest.raises(AssertionError):
        checks.value({"weights": 4}, {"weights": 4, "adam": 8}, "bytes per parameter")
    checks.choice(" Hybrid_Shard ", "hybrid_shard", "strategy", options=["full_shard", "hybrid_shard"])
    with pytest.raises(AssertionError, match="not one of"):
        checks.choice("zero3", "hybrid_shard", "strategy", options=["full_shard", "hybrid_shard"])
    checks.choice(False, False, "gate passes")
    with pytest.raises(AssertionError):
        checks.choice(0, False, "gate passes")   # a bool is asked for: 0 is not False
    checks.holds({"em": 10.0, "f1": 20.0}, lambda b: b["em"] <= b["f1"], "EM <= F1")
    with pytest.raises(AssertionError, match="does not hold"):
        checks.holds({"em": None, "f1": 20.0}, lambda b: b["em"] <= b["f1"], "EM <= F1")


def test_the_rerun_reads_answers_from_records_only() -> None:
    checks._replay = Replay([{"v": 1, "kind": "number", "what": "loss", "answer": "2.31"}])
    try:
        checks.number(Placeholder("baseline")["loss"], 2.3149, "loss")   # the kernel's value is never used
        with pytest.raises(AssertionError, match="no answer was recorded"):
            checks.number(Placeholder("baseline")["loss"], 2.3149, "loss")
    finally:
        checks._replay = None
    for record, message in (({"kind": "number", "what": "other", "answer": "1"}, "do not line up"),
                            ({"kind": "number", "what": "loss", "answer": "__import__('os')"}, "not plain data"),
                            ({"kind": "number", "what": "loss", "invalid": "an object of type X"}, "type X")):
        checks._replay = Replay([record])
        try:
            with pytest.raises(AssertionError, match=message):
                checks.number(0, 2.0, "loss")
        finally:
            checks._replay = None
    with pytest.raises(TypeError, match="outside a workshop.student.checks call"):
        assert Placeholder("baseline")["loss"] == 1   # a test cell may not compare a student's value itself


LOCKED = {"setup": "from workshop.student.lab import Lab\nlab = Lab()",
          "reference": "from workshop import checks\nreference = lab.table('baseline', [lab.run('baseline')])",
          "test": "checks.number(baseline['em'], reference['em'], 'em')"}


@pytest.mark.parametrize("source, reason", [
    ("checks = None", "rebinds `checks`"),
    ("def lab(): pass", "redefines `lab`"),
    ("import workshop.student.checks\nworkshop.student.checks.number = print", r"assigns `workshop\.student\.checks\.number`"),
    ("setattr(lab, 'run', print)", "setattr"),
    ("import sys\nsys.modules['workshop.student.checks'] = None", "sys.modules"),
    ("class A:\n    def __eq__(self, o): return True", "defines __eq__"),
    ("import sys, io\nsys.stderr = io.StringIO()", "sys.stderr"),
    ("from contextlib import redirect_stderr", "redirects stderr"),
    ("get_ipython().events.register('post_run_cell', print)", "event hook"),
    ("%%capture\nprint(1)", "get_ipython"),
    ("import IPython\nIPython.core.interactiveshell.InteractiveShell.showtraceback = print", "showtraceback"),
    ("import os\nos.environ.pop('NBGRADER_EXECUTION')", "environment"),
    ("exec('x = 1')", r"\(exec\)"),
    # by principle, not by a list of known tricks: the ways round a blacklist of names
    ("import workshop.student.checks as wc\n_o = wc.number\nwc.__dict__['number'] = lambda a, e, w, **k: _o(e, e, w, **k)",
     r"`\.__dict__`"),
    ("import workshop.student.checks as wc\nvars(wc).update(number=print)", r"vars\(\)"),
    ("from unittest import mock\nmock.patch.object(checks, 'number', print).start()", "imports unittest"),
    ("object.__setattr__(checks, 'number', print)", r"`\.__setattr__`"),
    ("getattr(__import__('s' + 'ys'), 'mod' + 'ules')['workshop.student.checks'].number = print", "computed name"),
    ("import importlib\nimportlib.reload(checks)", "importlib"),
    ("c = checks\nc.number = print", r"assigns the attribute `c\.number`"),
    ("import workshop.student.checks as wc\nwc.number = print", r"assigns `wc\.number`"),
    ("import sys\nx = sys._getframe(1)", r"uses `sys\._getframe`"),
    ("f = getattr\nf(checks, 'number')", "computed name"),
    ("x = getattr(checks, '__dict__')", "getattr"),
    ("class A(float):\n    def __ne__(self, o): return False", "defines __ne__"),
    ("def encode(tok, ex, n):\n    from IPython.display import publish_display_data\n"
     "    publish_display_data({'application/vnd.fsdp-workshop.answer+json': {}})", "forge"),
])
def test_scan_names_the_tampering(source: str, reason: str) -> None:
    cells = [Cell(name, src, src) for name, src in LOCKED.items()] + [Cell("answer", source)]
    found = scan_cells(cells, protected_names(LOCKED.values()))
    assert any(re.search(reason, r) for r in found), found


def scan_answers(*sources: str) -> list[str]:
    """The scan over LOCKED and these answer cells, in order."""
    cells = [Cell(name, src, src) for name, src in LOCKED.items()]
    cells += [Cell(f"answer {i}", src) for i, src in enumerate(sources, 1)]
    return scan_cells(cells, protected_names(LOCKED.values()))


DEBUGGING = """import sys, os, inspect, traceback
import os.path as osp
from os import getcwd
print(sys.version, sys.version_info.major, sys.executable, os.getcwd(), getcwd(), os.listdir("."), osp.join("a", "b"))
print(sys.path)
print(sys.modules.keys)
print("looking", file=sys.stderr)
sys.stdout.flush()
print(inspect.getsource(encode), inspect.signature(encode))
try:
    encode(1, 2, 3)
except Exception:
    traceback.print_exc()
    print(traceback.format_exc())
%time y = encode(1, 2, 3)
"""


def test_a_student_who_debugs_and_patches_nothing_is_not_flagged() -> None:
    """sys, os, inspect and traceback read (a version, the folder, a source, a traceback), %time and `?`:
    debugging, not tampering. The first answer defines `encode`; the second debugs it."""
    assert scan_answers("def encode(t, e, n):\n    return {}", DEBUGGING, "encode?\nlab.run??\n%who",
                        "%%timeit -n 1\nencode(1, 2, 3)") == []


@pytest.mark.parametrize("source, reason", [
    ("import inspect\ng = inspect.currentframe().f_globals\ng['checks'] = None", r"uses `inspect\.currentframe`"),
    ("import inspect\ng = inspect.currentframe().f_globals", "reaches a frame"),
    ("import sys\nsys.path.insert(0, '.')\nimport helper", r"uses `sys\.path\.insert`"),
    ("import sys\np = sys.path\np.append('.')", r"uses `sys\.path`.*more than debugging"),
    ("import os\nos.system('sed -i s/1/2/ jobs/*/run/summary.json')", r"uses `os\.system`"),
    ("import os\nos.chdir('..')", r"uses `os\.chdir`"),
    ("from os import system\nsystem('true')", "system"),
    ("from sys import modules\nmodules['x'] = 1", "imports sys"),
    ("import traceback\nfor f, _ in traceback.walk_stack(None):\n    f.f_globals['checks'] = 1", r"walk_stack"),
    ("import sys\ntb = sys.exc_info()[2]\ng = tb.tb_frame.f_globals", "reaches a frame"),
    ("import sys as s\ns.settrace(print)", r"uses `sys\.settrace`"),
    ("import os\nos = os\nos.system('true')", r"uses `os\.system`"),
    ("%time checks.number = print", r"assigns `checks\.number`"),
    ("%%time\nimport workshop.student.checks as wc\nwc.__dict__['number'] = print", r"`\.__dict__`"),
    ("%%capture\nprint(1)", "get_ipython"),
    ("!ls", "get_ipython"),
    ("%env NBGRADER_EXECUTION=", "get_ipython"),
])
def test_debugging_modules_used_beyond_reading_are_flagged(source: str, reason: str) -> None:
    found = scan_answers(source)
    assert any(re.search(reason, r) for r in found), found


def test_a_debugging_module_imported_in_one_cell_is_judged_where_it_is_used() -> None:
    found = scan_answers("import sys\nprint(sys.version)", "f = sys._getframe(0)")
    assert found and all(r.startswith("answer 2") for r in found), found


@pytest.mark.parametrize("source, reason", [
    ("from workshop.training.fsdp_rules import shard0_local_shape\nx = shard0_local_shape([4], 3, 2)",
     "workshop.training.fsdp_rules"),
    ("import workshop.training.fsdp_rules as rules\nx = rules.held_fraction('ddp', 2)", "reference-only"),
    # the grader's rules at their grading-room paths, and at the old ones a student may still type (issue 48)
    ("from workshop.grading.fsdp_rules import hsdp_mesh\nx = hsdp_mesh(2, 8)", "workshop.grading.fsdp_rules"),
    ("from workshop.grading import traffic\nx = traffic.crossing('full_shard', 2, 2)", "workshop.grading.traffic"),
    ("import workshop.comm.traffic as t\nx = t.crossing('full_shard', 2, 2)", "workshop.comm.traffic"),
    ("from workshop.grading.consistency import losses_consistent as ok\nx = ok", "workshop.grading.consistency"),
    ("from workshop.training import consistency\nx = consistency", "workshop.training.consistency"),
    ("from workshop.training.counted_steps import expected_steps\nx = expected_steps(24, 2, 2, 1, 2)",
     "imports `expected_steps`"),
    ("def shard_shape(shape, n, r):\n    return list(fsdp_rules.shard0_local_shape(shape, n, r))", "uses `fsdp_rules`"),
    ("from workshop.results import memory\nx = memory.estimate('tiny').as_mb()", r"uses `\.estimate`"),
    ("from workshop.results.memory import estimate_config as e\nx = e", "imports `estimate_config`"),
    ("def encode(t, e, n):\n    return data.encode_for_training(t, e, n)", r"`\.encode_for_training`"),
    ("x = getattr(data, 'encode_for_training')", "by getattr"),
    ("busbw = measured_bw.large_busbw_GBps", "large_busbw_GBps"),
    ("busbw = measured['large_busbw_GBps'].iloc[0]", "the column `large_busbw_GBps`"),
    ("runs = STATIC_RUNS['03_sharding_strategies']", "uses `STATIC_RUNS`"),
    ("kind = diagnose(failed.log_path)[0].kind", "uses `diagnose`"),
    ("settings = challenge.load_sweep(lab.profile).rows[0]", "uses `challenge`"),
    ("def predict_memory(arch, run, n):\n    return dict(lab.predict('fsdp_1gpu', procs_per_node=n))",
     r"calls `lab\.predict`"),
    ("rank = sorted(runs, key=lambda r: lab.predict(**runs[r])['peak'])", r"calls `lab\.predict`"),
    ("def f(n):\n    return explore(gpus=n).mb", "calls `explore`"),
    ("from workshop.comm import model as comm\nx = comm.predict('bloom-560m', 'ddp', 8).by_kind(0)",
     "workshop.comm.model"),   # the reference of notebook 03's sent_elements
    ("def sent_elements(s, n, m, k=1):\n    return comm.model_facts('tiny')", "uses `comm`"),
])
def test_reference_only_code_in_a_students_cell_is_flagged(source: str, reason: str) -> None:
    found = scan_answers(source)
    assert any(re.search(reason, r) for r in found), found


def test_a_students_own_names_are_not_the_course_code_of_the_same_name() -> None:
    """`traffic`, `estimate` or `os` bound by the student's own cells are theirs, whichever cell reads them."""
    assert scan_answers("traffic = {'full_shard': 5.0}\nestimate = 3\nos = 'linux'",
                        "ratio = traffic['full_shard'] / estimate\nprint(os.upper())") == []


@pytest.mark.parametrize("sources", [
    ("ask = lab.predict", "def predict_memory(arch, run, n):\n    return dict(ask('fsdp_1gpu', procs_per_node=n))"),
    ("from workshop.student.explorer import explore as ex\ndef f(n):\n    return ex(gpus=n).mb",),
    ("import functools\nask = functools.partial(lab.predict, 'strategies')\nagain = ask",
     "def f(**s):\n    return again(**s)['peak']"),
    ("from workshop.comm import model as comm\nnet = comm.predict", "f = lambda nodes, g: net('bloom-560m', 'full_shard', nodes * g, nodes)"),
])
def test_a_lesson_tool_under_another_name_inside_a_function_is_flagged(sources: tuple[str, ...]) -> None:
    """A tool bound to a name of the student's (an alias, a partial, an import as), in any of their cells,
    and then called inside their function answers the tool's cases all the same."""
    found = scan_answers(*sources)
    assert any("a function of yours calls" in r for r in found), found


def test_a_tools_answer_kept_in_a_name_is_not_a_tool() -> None:
    """What the tool returned for a case the student asked (a number, a table) may be read anywhere."""
    assert scan_answers("peak = lab.predict('strategies')['peak']",
                        "def over_budget(budget):\n    return peak > budget") == []


def test_lesson_tools_asked_in_a_cell_are_not_flagged() -> None:
    """lab.predict and the explorer answer the case a student asks, in a cell: that is what they are for."""
    assert scan_answers("peaks = {n: float(lab.predict(**runs[n])['peak']) for n in runs}\n"
                        "ranking = sorted(peaks, key=peaks.get)",
                        "e = explore(model='bloom-560m', gpus=4)\nprint(e.mb)") == []


def test_scan_passes_an_honest_answer_and_flags_an_edited_locked_cell() -> None:
    honest = "row = measured.iloc[0]\nbaseline = {'em': row['em'], 'f1': float(row['f1'])}\nfor n in [1, 2]:\n    x = n"
    cells = [Cell(name, src, src) for name, src in LOCKED.items()] + [Cell("answer", honest)]
    assert scan_cells(cells, protected_names(LOCKED.values())) == []
    cells[2] = Cell("test", "pass", LOCKED["test"])
    assert scan_cells(cells, protected_names(LOCKED.values())) == [
        "test: a locked cell was edited (nbgrader ran the original)"]


def test_a_student_function_called_by_a_test_cell_is_read_from_its_record() -> None:
    # wave 2: the student writes mask_labels(); a test cell calls it on an example the notebook never showed
    checks._replay = Replay([{"kind": "value", "what": "labels of an unseen example", "answer": "[-100, -100, 7, 8]"}])
    try:
        checks.value(Placeholder("mask_labels")({"unseen": 1}), [-100, -100, 7, 8], "labels of an unseen example")
    finally:
        checks._replay = None


def test_harmless_python_is_not_flagged() -> None:
    """A student's own class, a docstring, `__name__`, a literal getattr and their own dicts stay unflagged."""
    honest = ('class Row:\n    """a row"""\n    def __init__(self, x):\n        self.x = x\n    def __repr__(self):\n'
              '        return f"Row({self.x})"\n'
              'import math\nscaling = {n: {} for n in [1, 2]}\nscaling[1]["speedup"] = math.sqrt(4)\n'
              'name = Row.__name__\nem = getattr(Row(1), "x")')
    cells = [Cell(name, src, src) for name, src in LOCKED.items()] + [Cell("answer", honest)]
    assert scan_cells(cells, protected_names(LOCKED.values())) == []


def test_reading_the_answer_key_is_flagged_and_reading_the_tables_is_not() -> None:
    """Names the instructor's cells bind for the tests only (a reference, a name a test cell binds, a
    reference function only tests call) are the answer key; the lab and the measured table are not."""
    locked = {"setup": "from workshop.student.lab import Lab\nfrom workshop.training.data import encode_reference_free as encode_ok\n"
                       "from workshop.training.data import encode_for_training\nlab = Lab()\nshown = encode_ok(1)",
              "table": "measured = lab.table('baseline')",
              "reference": "state_reference = {'weights': 4}",
              "gate-reference": "from workshop.results.diagnose import diagnose\ngate = lab.find('bandwidth')",
              "test": "checks.value(bytes_per_param, state_reference, 'b')\n"
                      "model = {n: encode_for_training(n) for n in [1]}\ncheckS = model"}
    key = answer_key(locked, {"test"}, ["bytes_per_param = {'weights': 4}"])
    assert {"state_reference", "model", "checkS", "encode_for_training", "gate"} <= key
    assert not {"lab", "measured", "encode_ok", "shown", "diagnose"} & key   # a tool stays the student's
    cells = [Cell(n, src, src) for n, src in locked.items()]
    for source, flagged in (("bytes_per_param = state_reference", "state_reference"),
                            ("def encode(t, e, n):\n    return encode_for_training(t, e, n)", "encode_for_training"),
                            ("row = measured.iloc[0]\nx = lab.profile", None)):
        found = scan_cells([*cells, Cell("answer", source)], protected_names(locked.values()), key)
        if flagged is None:
            assert found == []
        else:
            assert any(f"reads `{flagged}`" in r and "answer key" in r for r in found), found


@pytest.mark.parametrize("path", sorted(Path(__file__).parents[1].glob("solutions/*/*.ipynb")), ids=lambda p: p.stem)
def test_the_model_answers_trigger_no_finding(path: Path) -> None:
    """The scan as the review runs it, on the instructor's own answers: an honest notebook is never flagged."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    locked, tests, answers, cells = {}, set(), [], []
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if c.cell_type != "code" or "parameters" in c.metadata.get("tags", []):
            continue
        if meta.get("solution"):
            answers.append(c.source)
            cells.append(Cell(meta["grade_id"], c.source))
        elif meta.get("locked"):
            locked[meta["grade_id"]] = c.source
            tests |= {meta["grade_id"]} if meta.get("grade") else set()
            cells.append(Cell(meta["grade_id"], c.source, c.source))
    assert answers and tests
    key = answer_key(locked, tests, answers)
    assert any("reference" in k for k in key) or path.stem.startswith(("02", "03")), key
    assert scan_cells(cells, protected_names(locked.values()), key) == []


def test_a_forged_answer_record_is_one_record_too_many() -> None:
    """A check writes one record: a student's function called by a test cell that publishes its own
    (the right answer) before the check's (the wrong one) leaves a record over, and the cell fails."""
    forged = {"kind": "value", "what": "labels", "answer": "[1, 2]"}
    real = {"kind": "value", "what": "labels", "answer": "[0, 0]"}
    replay = Replay([forged, real])
    checks._replay = replay
    try:
        checks.value(Placeholder("encode")(1), [1, 2], "labels")   # the forged record passes the check ...
    finally:
        checks._replay = None
    assert replay.left_over() is not None and "forged" in replay.left_over()   # ... and is caught after the cell
    honest = checks._replay = Replay([real])
    try:
        checks.value(Placeholder("encode")(1), [0, 0], "labels")
    finally:
        checks._replay = None
    assert honest.left_over() is None
