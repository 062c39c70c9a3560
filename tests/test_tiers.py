"""The fast tier (`make test-fast`, tests/tiers.py) holds the tests that start no process, and only those: a test
is classified from what it uses, so a new one needs no marker, and one that starts a process anyway is named."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runs import clean_env
from tests.tiers import ProcessGuard, _reach, failure

ROOT = Path(__file__).resolve().parent.parent
ME = "tests/test_tiers.py::test_make_test_fast_collects_the_pure_tests_and_none_that_starts_a_process"


# ------------------------------------------------------------------ functions for the reading of code to judge

def _adds(a: int, b: int) -> int:
    return a + b


def _calls_a_pure_helper() -> int:
    return _adds(1, 2)


def _starts_a_process() -> str:
    return subprocess.run(["true"], check=True).args[0]


def _reaches_a_process_two_helpers_down() -> str:
    return _starts_a_process()


def _imports_papermill_inside() -> None:
    import papermill  # noqa: F401


def _submits_a_job() -> None:
    from workshop.slurm import submit
    submit("baseline")


def test_the_reading_follows_helpers_of_tests_and_imports_inside_functions() -> None:
    assert _reach(_adds) is None and _reach(_calls_a_pure_helper) is None
    assert _reach(_starts_a_process) == "subprocess"
    assert _reach(_reaches_a_process_two_helpers_down) == "_starts_a_process -> subprocess"
    assert _reach(_imports_papermill_inside) == "papermill"


def test_workshops_job_entry_points_are_not_fast() -> None:
    assert _reach(_submits_a_job) == "workshop.slurm.jobs.submit"


def test_the_guard_names_a_process_a_fast_test_starts_and_lets_git_pass() -> None:
    guard = ProcessGuard()
    guard.watch()
    subprocess.run(["git", "--version"], capture_output=True, check=True)
    assert guard.stop() == []
    guard.watch()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    started = guard.stop()
    assert len(started) == 1 and started[0].startswith("subprocess.Popen ") and started[0].endswith(" -c pass")
    assert "mark it @pytest.mark.slow" in failure(started)
    subprocess.run(["true"], check=True)                  # no longer watching: nothing recorded
    assert guard.started == started


def fast_selection() -> list[str]:
    """The arguments scripts/test.sh's --fast gives pytest (`-m fast` and what it ignores), read from the script."""
    line = re.search(r'^\s*exec "\$\{pytest\[@\]\}" (-m fast .*) "\$@"$', (ROOT / "scripts" / "test.sh").read_text(),
                     flags=re.M)
    assert line, "scripts/test.sh: no --fast line `exec \"${pytest[@]}\" -m fast ... \"$@\"`"
    return line.group(1).split()


def test_make_test_fast_collects_the_pure_tests_and_none_that_starts_a_process(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`make test-fast`'s own command (read from the Makefile), with --collect-only added, narrowed to two files:
    the recipe runs and selects; then the whole suite with the selection scripts/test.sh gives it, collected in
    this process (`pytest.main`: in a part of the suite every test module is imported already, about 1 CPU-s where
    a new pytest imported them all again, 20 CPU-s of a CI run; issue 51)."""
    recipe = re.search(r"^test-fast:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), flags=re.M).group(1)
    assert recipe == "bash scripts/test.sh --fast"
    proc = subprocess.run(["bash", "-c", f"{recipe} --collect-only tests/test_config.py tests/test_tiers.py"], cwd=ROOT,
                          env=clean_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ids = {ln.strip() for ln in proc.stdout.splitlines() if "::" in ln}
    # test_config's pure tests in; every test of this file reads or starts a process (this one's own command): out
    assert {i.split("::")[0] for i in ids} == {"tests/test_config.py"} and len(ids) > 10, ids

    monkeypatch.setenv("WORKSHOP_TEST_TIER", "fast")        # as scripts/test.sh --fast exports it
    monkeypatch.delenv("WORKSHOP_TEST_PART", raising=False)
    monkeypatch.delenv("WORKSHOP_TEST_PROFILE", raising=False)
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *fast_selection(), "tests"])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    ids = {ln.strip() for ln in out.splitlines() if "::" in ln}
    files = {i.split("::")[0] for i in ids}
    # by hand: pure logic (the memory model worked by hand, the graded checks, config) is in
    assert {"tests/test_memory_by_hand.py", "tests/test_checks.py", "tests/test_config.py",
            "tests/test_tables_by_hand.py"} <= files
    # marker slow (a multi-process training run), fixture course_run (an executed course), the Slurm cluster,
    # a GPU, the shared runs (fixture `runs`), a notebook through the course's runner: all out
    assert "tests/test_training.py::test_hsdp_2x2_matches_ddp_at_4_ranks" not in ids
    assert not [i for i in ids if i.startswith(("tests/slurm/", "tests/gpu/", "tests/test_course.py",
                                                "tests/test_integrity.py", "tests/test_course_retry.py",
                                                "tests/test_kernel_transport.py", "tests/test_local_backend.py"))]
    assert ME not in ids
    count = int(re.search(r"(\d+)/\d+ tests collected", out).group(1))
    assert count == len(ids) and count > 400
