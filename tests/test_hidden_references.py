"""References only where grading runs (issue 48, items 3 and 4): no cell of the student's release computes
a value a check compares against, and a visible check looks at an answer's form only, so that neither
reading the kernel nor bisecting against a check learns a graded answer. Read from the notebooks (AST)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from workshop.grading.scan import without_hidden_tests

ROOT = Path(__file__).resolve().parent.parent
NAMES = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
# what computes a graded reference: none of it runs in a student's kernel
REFERENCE_CODE = {"answer_key", "fsdp_rules", "traffic", "bus_factor", "diagnose", "STATIC_RUNS", "comm_elements",
                  "memory_mb", "node_sent_gb", "strategy_runs", "expected_steps", "consistency", "losses_consistent"}
# checks against the student's own jobs and table (what they ran, what their table shows): the job is the
# student's to read, so nothing is learnt by asking the check; every other visible check is a form check
OWN_JOB_CHECKS = {"nb01-16-test-last-logged-loss", "nb01-18-test-train-samples-per-s", "nb02-16-test-settings-full-shard",
                  "nb02-17-test-settings-offload", "nb02-32-test-wrap-policy", "nb02-logits-test-measured",
                  "nb03-test-challenge-batch", "nb03-test-challenge-budget", "nb03-test-challenge-undominated",
                  "nb04-test-settings-keep-the-batch", "nb04-14-test-speedup"}


def cells(folder: str, name: str) -> list[dict]:
    return json.loads((ROOT / folder / name / f"{name}.ipynb").read_text())["cells"]


def used_names(source: str) -> set[str]:
    tree = ast.parse(source)
    out = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    out |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {a.name.rsplit(".", 1)[-1] for a in node.names} | set((getattr(node, "module", "") or "").split("."))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_no_cell_of_the_release_computes_a_reference(name: str) -> None:
    found = {c["id"]: sorted(used_names("".join(c["source"])) & REFERENCE_CODE)
             for c in cells("notebooks", name) if c["cell_type"] == "code"}
    assert {k: v for k, v in found.items() if v} == {}


@pytest.mark.parametrize("name", NAMES)
def test_no_cell_of_the_release_imports_the_grading_room(name: str) -> None:
    """The release runs in the student's install, which holds no `workshop.grading` (nor the grader's rules at the
    paths they left): a visible cell that imported one would stop every student at ModuleNotFoundError."""
    from tests.test_student_install import MOVED_REFERENCES

    gone = ("workshop.grading", *MOVED_REFERENCES)
    found = {}
    for c in cells("notebooks", name):
        if c["cell_type"] != "code":
            continue
        tree = ast.parse("".join(c["source"]))
        modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        modules |= {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                    for a in n.names}
        bad = sorted(m for m in modules if any(m == g or m.startswith(g + ".") for g in gone))
        if bad:
            found[c["id"]] = bad
    assert found == {}


@pytest.mark.parametrize("name", NAMES)
def test_visible_checks_check_form_and_say_so(name: str) -> None:
    wrong = {}
    for c in cells("solutions", name):
        meta = c.get("metadata", {}).get("nbgrader", {})
        if not (meta.get("grade") and c["cell_type"] == "code") or meta["grade_id"] in OWN_JOB_CHECKS:
            continue
        visible = without_hidden_tests("".join(c["source"]))
        kinds = {n.func.attr for n in ast.walk(ast.parse(visible)) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) and n.func.value.id == "checks"}
        if kinds - {"form"} or "### BEGIN HIDDEN TESTS" not in "".join(c["source"]):
            wrong[meta["grade_id"]] = sorted(kinds)
    assert wrong == {}


def test_a_form_check_says_it_checks_the_form_only(capsys: pytest.CaptureFixture[str]) -> None:
    from workshop.student import checks

    checks.form(11, lambda n: type(n) is int and n >= 1, "the fewest GPUs: a whole number")
    assert "only the form is checked here" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="not in that form yet"):
        checks.form(None, lambda n: type(n) is int, "the fewest GPUs: a whole number")


def test_the_feedback_sets_the_reference_beside_the_answer_only_while_grading(monkeypatch: pytest.MonkeyPatch) -> None:
    from workshop.student import checks

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    with pytest.raises(AssertionError) as live:
        checks.number(9, 11, "the fewest GPUs")
    assert "11" not in str(live.value)            # a bisection in the live notebook learns nothing
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    with pytest.raises(AssertionError, match=r"the reference: 11"):
        checks.value(9, 11, "the fewest GPUs")
