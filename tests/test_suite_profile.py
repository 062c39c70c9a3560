"""The per-test CPU budget and the suite's own profile (tests/suite_profile.py, issue 51), on a small suite of
its own: a test over its budget fails and says why, a test marked heavy with its reason passes, a heavy mark
without a reason fails, a shared fixture's cost (and a shared run's, made on first asking) is charged to no test,
and the profile names each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.suite_profile import join

ROOT = Path(__file__).resolve().parent.parent
# the small suite's budget and what its dear tests burn, in CPU-s: twice the budget, so that a test over it is
# clearly over, a cheap one (a few ms) clearly under; the suite runs twice and burns 4 x BURN each time (at 1 s
# and a budget of 0.5 the test cost 11 CPU-s of a CI run, issue 51)
BUDGET, BURN = 0.2, 0.4
# the small suite's pytest without the installed plugins it has no use for: hypothesis's imports hypothesis for its
# summary (0.7 of a bare pytest's 1.1 CPU-s), anyio's its event loop support (0.2)
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:anyio"]

CONFTEST = """
from tests import suite_profile

def pytest_configure(config):
    suite_profile.configure(config)
"""
TESTS = f"""
import time
import pytest

def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

@pytest.fixture(scope="module")
def shared_run():
    burn({BURN})

def test_cheap():
    pass

def test_dear():
    burn({BURN})

@pytest.mark.heavy(reason="it must burn twice the budget")
def test_dear_and_marked():
    burn({BURN})

@pytest.mark.heavy(cpu_s=5)
def test_marked_without_reason():
    pass

def test_asks_for_the_shared_run_first(shared_run):
    pass

def test_makes_a_lazy_shared_run():
    from tests import suite_profile
    with suite_profile.shared("runs: lazy"):      # as tests/runs.py's RunCache makes a run on first asking
        burn({BURN})
"""


def test_a_test_over_its_cpu_budget_fails_unless_marked_heavy_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_small.py").write_text(TESTS)
    profile = tmp_path / "profile.json"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WORKSHOP_TEST_")},
           "PYTHONPATH": str(ROOT), "WORKSHOP_TEST_BUDGET_CPU_S": str(BUDGET), "WORKSHOP_TEST_PROFILE": str(profile)}
    proc = subprocess.run([*PYTEST, "-rf", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    failed = sorted(line.split("::")[1].split()[0] for line in out.splitlines() if line.startswith("FAILED"))
    assert failed == ["test_dear", "test_marked_without_reason"], out
    assert "over its CPU budget" in out and f"its budget is {BUDGET} CPU-s" in out and "marked heavy without a reason" in out
    doc = json.loads(profile.read_text())
    tests = {node.split("::")[1]: t for node, t in doc["tests"].items()}
    assert tests["test_dear"]["own"]["cpu_s"] >= 0.9 * BURN and tests["test_cheap"]["own"]["cpu_s"] < BUDGET
    # the module fixture's second is profiled as the fixture's, charged to none of its tests
    assert tests["test_asks_for_the_shared_run_first"]["own"]["cpu_s"] < BUDGET
    shared = [f for f in doc["fixtures"] if f["fixture"] == "shared_run"]
    assert len(shared) == 1 and shared[0]["cpu_s"] >= 0.9 * BURN and shared[0]["scope"] == "module"
    assert shared[0]["test"].endswith("::test_asks_for_the_shared_run_first")
    lazy = [f for f in doc["fixtures"] if f["fixture"] == "runs: lazy"]
    assert len(lazy) == 1 and lazy[0]["cpu_s"] >= 0.9 * BURN and tests["test_makes_a_lazy_shared_run"]["own"]["cpu_s"] < BUDGET
    assert "the dearest fixtures and tests" in out

    # the same suite with the check off: only the reasonless mark fails (a profile of a change meant to be slow)
    off = subprocess.run([*PYTEST, str(tmp_path)],
                         cwd=tmp_path, env={**env, "WORKSHOP_TEST_BUDGET": "off"}, capture_output=True, text=True,
                         timeout=120)
    assert "1 failed, 5 passed" in off.stdout, off.stdout[-2000:]

    joined = join(tmp_path / "joined.json", [profile, profile])           # the second run's profile, twice
    again = json.loads(profile.read_text())
    assert joined["cpu_s"] == pytest.approx(2 * again["cpu_s"]) and len(joined["tests"]) == 6
