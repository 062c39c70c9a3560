"""Shared fixtures: real training runs (tests/runs.py), made once per session."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests import suite_profile
from tests.runs import RunCache
from tests.tiers import ProcessGuard, classify, failure

# a cell with no reply from its kernel for this long is a lost message, not work (workshop.grading.run_all):
# the longest cell of the course takes about a minute here
CELL_TIMEOUT_S = 240


def pytest_configure(config: pytest.Config) -> None:
    """The suite's own profile and the per-test CPU budget (tests/suite_profile.py, marker `heavy`)."""
    suite_profile.configure(config)


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> RunCache:
    return RunCache(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="session")
def course_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The main job: every solution notebook executed with papermill on the local backend.

    WORKSHOP_COURSE_RUN=<results folder of `python -m workshop.grading.run_all`> reuses an executed course instead (a copy
    of it), for work on the grading tests: the course is run again only when the notebooks change."""
    from workshop.grading.run_all import main

    out = tmp_path_factory.mktemp("course") / "results"
    if os.environ.get("WORKSHOP_COURSE_RUN"):
        shutil.copytree(os.environ["WORKSHOP_COURSE_RUN"], out, symlinks=True)
        return out
    # WORKSHOP_TEST_ONLY=02 runs just that notebook, for work on one notebook (select its tests with -k)
    only = os.environ.get("WORKSHOP_TEST_ONLY", "")
    assert main(["--output", str(out), "--profile", "local", "--cell-timeout", str(CELL_TIMEOUT_S),
                 *(["--only", only] if only else [])]) == 0
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that starts no process gets the marker `fast` (tests/tiers.py), before `-m` selects: `make
    test-fast` is `pytest -m fast`.

    WORKSHOP_TEST_PART=course keeps the tests that read the course run (`course_run`), =rest the
    others: scripts/test.sh runs the two parts side by side, beside tests/slurm, so that the cores stay
    busy while one part waits (the course's jobs, kernels starting, Slurm's poll floor)."""
    classify(items, lambda item: item.add_marker(pytest.mark.fast))
    part = os.environ.get("WORKSHOP_TEST_PART", "")
    if part not in ("course", "rest"):
        return
    keep = [item for item in items if ("course_run" in getattr(item, "fixturenames", ())) == (part == "course")]
    kept = {id(item) for item in keep}
    dropped = [item for item in items if id(item) not in kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


# `make test-fast` (WORKSHOP_TEST_TIER=fast): a test of the tier that starts a process anyway, in its own code or
# in a fixture set up for it, ends in an error that names the process (tests/tiers.py)
_GUARD = ProcessGuard() if os.environ.get("WORKSHOP_TEST_TIER") == "fast" else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _GUARD is not None and item.get_closest_marker("fast") is not None:
        _GUARD.watch()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    if _GUARD is not None and item.get_closest_marker("fast") is not None and (started := _GUARD.stop()):
        pytest.fail(failure(started), pytrace=False)
