"""The jobs of a cell as a plain table, the record a saved notebook keeps.

The live display is a widget: it updates while the watch runs, but a widget's saved output is only a
reference to a model in the kernel ("model not found" once the notebook is reopened), so papermill's
output, nbgrader's feedback and a reopened notebook lost which jobs ran, how long they took and how they
ended. When the watch ends, this table replaces the widget in its output (HTML, and text for a terminal
or a diff), with the rows also in the output's metadata (`workshop.jobs`) for a program to read.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from typing import Any

from workshop.slurm.records import JobState

COLUMNS = ("run", "job", "state", "elapsed", "exit code", "last log line")
CSS_CLASS = "workshop-jobs"
META_KEY = "workshop"


def rows(jobs: Mapping[str, Any], states: Mapping[str, JobState], state_words: Callable[[Any, JobState], str],
         elapsed: Callable[[float | None], str], last_line: Callable[[Any, JobState], str]) -> list[dict[str, str]]:
    """One row per job, every value a string as shown."""
    out = []
    for name, job in jobs.items():
        state = states[name]
        rc = job.record.exit_code
        out.append({"run": str(name), "job": job.job_id, "state": state_words(job, state),
                    "elapsed": elapsed(job.elapsed()), "exit code": "-" if rc is None else str(rc),
                    "last log line": last_line(job, state)})
    return out


def to_html(table: list[dict[str, str]]) -> str:
    head = "".join(f"<th>{c}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(r[c])}</td>" for c in COLUMNS) + "</tr>" for r in table)
    return (f'<table class="{CSS_CLASS}"><caption style="text-align:left">jobs of this cell, as the watch '
            f"ended</caption><tr>{head}</tr>{body}</table>")


def to_text(table: list[dict[str, str]]) -> str:
    widths = {c: max([len(c), *(len(r[c]) for r in table)]) for c in COLUMNS[:-1]}
    def line(values: Mapping[str, str]) -> str:
        return "  ".join([*(values[c].ljust(widths[c]) for c in COLUMNS[:-1]), values[COLUMNS[-1]]]).rstrip()
    return "\n".join(["jobs of this cell, as the watch ended:", line({c: c for c in COLUMNS}),
                      *(line(r) for r in table)])


def bundle(table: list[dict[str, str]]) -> tuple[dict[str, str], dict[str, Any]]:
    """(data, metadata) of a display_data output holding the table."""
    return {"text/html": to_html(table), "text/plain": to_text(table)}, {META_KEY: {"jobs": table}}


def update_table(handle: Any, table: list[dict[str, str]]) -> None:
    """Put the table in the output of `handle` (a display handle): the widget's, or the table's own again."""
    data, metadata = bundle(table)
    handle.update(data, metadata=metadata, raw=True)
