"""Shared fixtures: real training runs (tests/runs.py), made once per session."""

from __future__ import annotations

import gc

# No cyclic collections while the suite's modules load (torch, transformers, nbformat): they cost each pytest
# about 1 CPU-s of its collection (7.7 -> 6.6, measured); pytest_collection_finish turns the collector back on,
# with the loaded modules frozen out of its scans (as workshop.training.train does for a rank's start-up).
gc.disable()

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from tests import course_share, suite_profile, suite_split
from tests.runs import RunCache
from tests.tiers import ProcessGuard, classify, failure

# a cell with no reply from its kernel for this long is a lost message, not work (workshop.grading.run_all):
# the longest cell of the course takes about a minute here
CELL_TIMEOUT_S = 240


def pytest_configure(config: pytest.Config) -> None:
    """The suite's own profile and the per-test CPU budget (tests/suite_profile.py, marker `heavy`)."""
    suite_profile.configure(config)


@pytest.fixture(scope="session", autouse=True)
def dry_run_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One cache of dry runs for the whole suite (workshop.slurm.fit.shared_cache): the same config dry-run by
    several tests, or by the course run and then its grading, runs once (13 CPU-s each). scripts/test.sh gives
    its five processes one folder ($WORKSHOP_DRYRUN_CACHE); a pytest run by hand gets its own. Never the account's
    ~/.cache: a dry run cached there by an older checkout would stand in for today's."""
    given = os.environ.get("WORKSHOP_DRYRUN_CACHE")
    with pytest.MonkeyPatch.context() as patch:
        folder = Path(given) if given else tmp_path_factory.mktemp("dryrun")
        patch.setenv("WORKSHOP_DRYRUN_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> RunCache:
    return RunCache(tmp_path_factory.mktemp("runs"))


def run_course(out: Path) -> None:
    """Every solution notebook executed with papermill on the local backend, into `out`."""
    from workshop.grading.run_all import main

    # WORKSHOP_TEST_ONLY=02 runs just that notebook, for work on one notebook (select its tests with -k)
    only = os.environ.get("WORKSHOP_TEST_ONLY", "")
    rc = main(["--output", str(out), "--profile", "local", "--cell-timeout", str(CELL_TIMEOUT_S),
               *(["--only", only] if only else [])])
    if rc != 0:
        raise RuntimeError(f"python -m workshop.grading.run_all --output {out} exited {rc}")


@pytest.fixture(scope="session")
def course_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The main job: every solution notebook executed with papermill on the local backend.

    WORKSHOP_COURSE_RUN=<results folder of `python -m workshop.grading.run_all`> reuses an executed course instead (a copy
    of it), for work on the grading tests: the course is run again only when the notebooks change.
    WORKSHOP_COURSE_RUN_SHARED=<folder> (scripts/test.sh: the two course parts) runs it once into that folder for
    every process given it, and each reads a copy (tests/course_share.py); a folder marked done is reused as it
    is, so scripts/test.sh gives each suite run a fresh one."""
    out = tmp_path_factory.mktemp("course") / "results"
    given = os.environ.get("WORKSHOP_COURSE_RUN")
    if not given and os.environ.get("WORKSHOP_COURSE_RUN_SHARED"):
        try:
            given = str(course_share.shared_course(Path(os.environ["WORKSHOP_COURSE_RUN_SHARED"]), run_course))
        except course_share.SharedRunFailed as e:
            pytest.fail(str(e), pytrace=False)
    if given:
        shutil.copytree(given, out, symlinks=True)
        return out
    try:
        run_course(out)
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    return out


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    gc.freeze()
    gc.enable()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that starts no process gets the marker `fast` (tests/tiers.py), before `-m` selects: `make
    test-fast` is `pytest -m fast`.

    WORKSHOP_TEST_PART=course1 and =course2 each keep half of the tests that read the course run (`course_run`;
    =course both), =rest1 and =rest2 each half of the others (=rest both): scripts/test.sh runs the four side by
    side, beside tests/slurm, so that the cores stay busy while one part waits (the course's jobs, kernels
    starting, Slurm's poll floor). The halves are packed by file on the committed profile's wall time
    (tests/suite_split.py); the course halves run the course once between them (tests/course_share.py)."""
    classify(items, lambda item: item.add_marker(pytest.mark.fast))
    part = os.environ.get("WORKSHOP_TEST_PART", "")
    if not part:
        return
    if part not in suite_split.PARTS:
        raise pytest.UsageError(f"WORKSHOP_TEST_PART={part!r}: one of {', '.join(suite_split.PARTS)}, or unset for "
                                f"every test (tests/suite_split.py)")
    keep = suite_split.keep(part, items)
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
