"""The executed course made once for the two course parts side by side (tests/conftest.py's `course_run`).

scripts/test.sh runs the tests that read the course run as two pytest processes (`course1`, `course2`,
tests/suite_split.py), and both need the same executed course: a run of every notebook, the longest fixture of the
suite (382 s of wall in the 2026-11-29 CI profile). Run twice it would cost the cores that run everything else, so
the processes share one folder (WORKSHOP_COURSE_RUN_SHARED). Whichever takes its lock first runs the course into it
and marks it done; the other waits on the lock and then finds the mark. A failed run leaves a failure mark naming
its log, so the other process fails at once with the same message instead of running the course again for 15
minutes. The lock is the kernel's (flock): a process that dies holding it releases it, and the next finds no mark
and runs the course afresh. Neither process tests the shared folder itself: each reads a copy in its own basetemp
(conftest.py), so a test that writes beside the notebooks cannot change what the other process reads."""

from __future__ import annotations

import fcntl
import os
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Callable

LOCK, DONE, FAILED, LOG, RESULTS = "lock", "done", "failed", "run.log", "results"
TAIL = 40    # lines of the run's log a failure shows


class SharedRunFailed(Exception):
    """The shared course run failed, in this process or in the one that made it: the message is the same."""


def shared_course(folder: Path, make: Callable[[Path], None]) -> Path:
    """The results folder of the one course run in `folder`: made here by `make(results)` if no process made it
    yet, else reused as it is. Blocks while another process holds the lock (makes it).

    Raises SharedRunFailed if the run failed, here or in another process (its failure mark)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # released on close, or by the kernel when the holder dies
        if (folder / FAILED).is_file():
            raise SharedRunFailed((folder / FAILED).read_text())
        if not (folder / DONE).is_file():
            _make(folder, make)
    return folder / RESULTS


def _make(folder: Path, make: Callable[[Path], None]) -> None:
    """Run `make` into folder/results with its output in folder/run.log; mark the folder done, or failed."""
    results, log = folder / RESULTS, folder / LOG
    if results.exists():                          # a holder that died mid-run left it half made
        shutil.rmtree(results)
    try:
        with open(log, "w") as out, redirect_stdout(out), redirect_stderr(out):
            make(results)
    except BaseException as e:                    # an interrupt too: the other process must not wait on a rerun
        lines = log.read_text(errors="replace").splitlines()[-TAIL:] if log.is_file() else []
        message = (f"the shared course run into {results} failed in process {os.getpid()}: {type(e).__name__}: {e}\n"
                   f"its log: {log} (the last {len(lines)} lines:)\n" + "\n".join(lines))
        (folder / FAILED).write_text(message)
        raise SharedRunFailed(message) from e
    (folder / DONE).write_text(f"made by process {os.getpid()}\n")
