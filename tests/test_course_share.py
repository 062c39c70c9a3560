"""The course halves make one course run between them (tests/course_share.py): two real processes race on the
lock with a cheap stand-in for the run; one makes it, the other reuses it, and a failed run fails the other fast
with the same message, without a second run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.course_share import DONE, FAILED, SharedRunFailed, shared_course

ROOT = Path(__file__).resolve().parent.parent
MAKE_S = 2.0     # the stand-in's run: long enough that the second process starts while the first holds the lock

# the stand-in: a run that logs a line, counts itself in made.txt (outside the shared folder), writes a result
# after MAKE_S seconds, or fails then; it prints what it got back, or the failure's message
STAND_IN = """
import sys, time
from pathlib import Path
from tests.course_share import SharedRunFailed, shared_course

folder, fail = Path(sys.argv[1]), sys.argv[2] == "fail"

def make(results):
    print("the stand-in runs")
    with open(folder.parent / "made.txt", "a") as f:
        f.write("made\\n")
    time.sleep(float(sys.argv[3]))
    if fail:
        raise RuntimeError("a notebook failed")
    results.mkdir()
    (results / "table.csv").write_text("42\\n")

started = time.monotonic()
try:
    results = shared_course(folder, make)
except SharedRunFailed as e:
    print(f"FAILED after {time.monotonic() - started:.1f} s: {e}")
    sys.exit(1)
print(f"GOT {(results / 'table.csv').read_text().strip()} from {results}")
"""


def race(tmp_path: Path, outcome: str) -> list[tuple[int, str, float]]:
    """Two processes started together on one shared folder: (exit code, output, seconds) of each."""
    folder = tmp_path / "course-run"
    procs = [subprocess.Popen([sys.executable, "-c", STAND_IN, str(folder), outcome, str(MAKE_S)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    t0 = time.monotonic()
    done = []
    for proc in procs:
        out = proc.communicate(timeout=120)[0]
        done.append((proc.returncode, out, time.monotonic() - t0))
    return done


def test_two_processes_make_the_course_once_and_both_read_it(tmp_path: Path) -> None:
    done = race(tmp_path, "ok")
    assert [rc for rc, _, _ in done] == [0, 0], done
    got = {out.strip().splitlines()[-1] for _, out, _ in done}
    assert got == {f"GOT 42 from {tmp_path / 'course-run' / 'results'}"}, done
    assert (tmp_path / "made.txt").read_text() == "made\n"               # one run, not two
    assert (tmp_path / "course-run" / DONE).is_file() and not (tmp_path / "course-run" / FAILED).exists()
    assert "the stand-in runs" in (tmp_path / "course-run" / "run.log").read_text()   # its output: in the log
    assert max(s for _, _, s in done) >= MAKE_S                          # the second waited for the first


def test_a_failed_run_fails_the_other_process_at_once_with_the_same_message(tmp_path: Path) -> None:
    done = race(tmp_path, "fail")
    assert [rc for rc, _, _ in done] == [1, 1], done
    messages = {out.split("s: ", 1)[1] for _, out, _ in done}
    assert len(messages) == 1, done                                      # the same message in both
    message = messages.pop()
    assert "RuntimeError: a notebook failed" in message and "run.log" in message and "the stand-in runs" in message
    assert (tmp_path / "made.txt").read_text() == "made\n"               # the second did not run it again
    waits = sorted(float(out.split("FAILED after ")[1].split(" s")[0]) for _, out, _ in done)
    assert waits[1] < 3 * MAKE_S                                         # it failed when the lock was free


def test_a_run_left_half_made_by_a_killed_holder_is_made_afresh(tmp_path: Path) -> None:
    """A holder killed mid-run (the kernel releases its lock) leaves results/ half made and no mark: the next
    process runs the course again, into an empty folder. An interrupt is a failure: marked, not waited on again."""
    folder = tmp_path / "course-run"
    holder = subprocess.Popen([sys.executable, "-c", STAND_IN, str(folder), "ok", "600"], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "made.txt").is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        (folder / "results").mkdir()
        (folder / "results" / "half.ipynb").write_text("{}")
    finally:
        holder.kill()
        holder.wait(timeout=60)
    made = []

    def make(results: Path) -> None:
        made.append(results.exists())
        results.mkdir()

    assert shared_course(folder, make) == folder / "results" and made == [False]
    assert shared_course(folder, make) == folder / "results" and made == [False]     # done: reused
    with pytest.raises(SharedRunFailed, match="KeyboardInterrupt"):
        shared_course(tmp_path / "other", lambda results: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(SharedRunFailed, match="KeyboardInterrupt"):
        shared_course(tmp_path / "other", make)
    assert made == [False]
