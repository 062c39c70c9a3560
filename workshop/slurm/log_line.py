"""The one line of a job's log a student reads beside its state, in the watch and in the saved job table.

A log ends in lines written for programs, not people: the profiler's start/stop notes (`USDT:...
SyncActivityProfilerHandler.cpp:52] profiler_start`), the run's machine records (`WORKSHOP_SUMMARY {...}`,
`WORKSHOP_DIGEST {...}`, `WORKSHOP_METRICS {...}`), transformers' log dicts (`{'train_runtime': ...}`), the
script's own `[job] end <stamp>` (the state column already says the job ended), each rank's `params_local=`
count (read back for the tables) and torchrun's framing
(`=====`, `-----`, `  time : ...`). The last line left is the one worth reading: while a job runs, its
newest step; when it ended well, its last step or result. A failed job's last lines are a traceback's
tail or torchrun's report, wrapped over several lines: it shows one line instead, `workshop diagnose`'s
title where a rule recognises the cause, else the exception the log names.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from workshop.training import log_records

WIDTH = 160        # characters of a line in a table cell

# Lines written for programs (each pattern says whose): left out of "the last line"
_NOISE = (
    re.compile(r"^(?:\[rank\d+\]:\s*)?(?:USDT|STAGE):\S*\s.*ActivityProfiler"),   # kineto's profiler notes
    re.compile(r"^(?:\[rank\d+\]:\s*)?\S*ActivityProfiler\w*\.cpp:\d+\]"),         # the same without a tag
    log_records.ANY_RECORD,                                      # the run's records: SUMMARY, DIGEST, METRICS...
    re.compile(r"^(?:\d+:\s*)?\{'[a-z_]+': "),                   # transformers' Trainer log dicts
    re.compile(r"^\[job\] end "),                                # the script's end stamp: the state says it
    re.compile(r"^\[workshop rank \d+ host \S+\] params_local="),  # each rank's share, read back for the tables
    re.compile(r"^[=\-]{8,}$"),                                  # torchrun's report frames
    # torch's C++ warnings and their stack dumps: a 2-node run that ended well may still print, after its
    # records, that its rendezvous store had gone (`[W... TCPStore.cpp] recvVector failed`, frames, then
    # `W... dynamic_rendezvous.py] ... failed to shutdown the rendezvous`); a failure is diagnose's to name
    re.compile(r"^\[?[WE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d*\s*\S+\.(?:cpp|py):\d+\]"),
    re.compile(r"^(?:frame #\d+: |Exception raised from |<omitting python frames>)"),
)


def meaningful(line: str) -> bool:
    """Whether a log line is for a reader (not blank, not a record or a profiler's note)."""
    text = line.strip()
    return bool(text) and not any(p.search(text) for p in _NOISE)


def last_meaningful_line(text: str) -> str:
    """The last line of `text` a student would read (tqdm's `\\r` redraws: the last one), shortened to WIDTH."""
    for raw in reversed(text.splitlines()):
        line = raw.rsplit("\r", 1)[-1].strip()
        if meaningful(line):
            return shorten(line)
    return ""


def shorten(line: str, width: int = WIDTH) -> str:
    line = " ".join(line.split())
    return line if len(line) <= width else line[:width - 1] + "…"


# `workshop diagnose` (workshop.results.diagnose) names a failure, but jobs sit below results
# (tests/test_layout.py): the results package registers it here when it is imported, as every course and
# CLI path that watches jobs does. Without it a failure shows the exception line the log names.
FailureExplainer = Callable[[Path], str]
explainer: list[FailureExplainer] = []


def explain_failures_with(explain: FailureExplainer) -> None:
    """Use `explain(log_path)` (a one-line title, or '') for failed jobs' lines from now on."""
    explainer[:] = [explain]


def failure_line(log_path: str | Path, error_line: str = "") -> str:
    """One line that says why a job failed: `workshop diagnose`'s first finding's title where it has one,
    else `error_line` (the exception the log names, workshop.slurm.jobs.Job._error_line), else the last
    meaningful line. '' for a log that does not exist."""
    path = Path(log_path)
    if not path.is_file():
        return shorten(error_line)
    title = ""
    for explain in explainer:
        try:
            title = explain(path)
        except (OSError, ValueError):
            title = ""
    if title:
        return shorten(title)
    if error_line:
        return shorten(error_line)
    try:
        with open(path, errors="replace") as f:
            return last_meaningful_line(f.read()[-65536:])
    except OSError:
        return ""
