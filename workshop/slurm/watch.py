"""`Job.wait()`: watch a job until it ends -- a widget in Jupyter, one updating line in a terminal.

The display refreshes from the local log file every `poll` seconds; the job's state comes through
the backend's poller, so watching many jobs never asks Slurm more than once per interval.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Callable

from workshop.slurm.records import JobState

if TYPE_CHECKING:
    from workshop.slurm.jobs import Job


def in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _fmt_elapsed(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}"


def _last_line(job: "Job") -> str:
    lines = [x for x in job.tail(5).splitlines() if x.strip()]
    return lines[-1].strip()[:160] if lines else ""


def _widget_view(job: "Job") -> Callable[[JobState, float], None]:
    import ipywidgets as w
    from IPython.display import display
    head = w.HTML()
    bar = w.IntProgress(value=0, min=0, max=1, description="steps", layout=w.Layout(width="60%"))
    last = w.HTML()
    display(w.VBox([head, bar, last]))

    def update(state: JobState, elapsed: float) -> None:
        import html
        reason = f" &mdash; {html.escape(job.reason)}" if job.reason else ""
        head.value = (f"<b>{html.escape(job.step)}</b> job <code>{html.escape(job.job_id)}</code>: "
                      f"<b>{state.value}</b>{reason} &middot; {_fmt_elapsed(elapsed)}")
        prog = job.progress()
        if prog:
            bar.max, bar.value = max(prog[1], 1), prog[0]
        bar.bar_style = {"COMPLETED": "success", "RUNNING": "info", "PENDING": ""}.get(state.value, "danger")
        last.value = f"<code>{html.escape(_last_line(job))}</code>"
    return update


def _text_view(job: "Job") -> Callable[[JobState, float], None]:
    tty = sys.stdout.isatty()
    shown = [""]

    def update(state: JobState, elapsed: float) -> None:
        prog = job.progress()
        steps = f" step {prog[0]}/{prog[1]}" if prog else ""
        reason = f" ({job.reason})" if job.reason else ""
        line = f"{job.job_id} {job.step}: {state.value}{reason}{steps} {_fmt_elapsed(elapsed)}"
        if tty:
            sys.stdout.write("\r" + line[:150].ljust(150))
            if state.finished:
                sys.stdout.write("\n")
            sys.stdout.flush()
        elif line.rsplit(" ", 1)[0] != shown[0]:     # no terminal: a new line only when something changed
            print(line, flush=True)
            shown[0] = line.rsplit(" ", 1)[0]
    return update


def wait(job: "Job", timeout: float | None = None, poll: float | None = None, quiet: bool = False) -> JobState:
    """Until the job finishes or `timeout` seconds pass; returns the last state seen."""
    interval = poll if poll is not None else 1.0
    start = time.monotonic()
    view = None if quiet else (_widget_view(job) if in_notebook() else _text_view(job))
    while True:
        state = job.state()
        if view:
            view(state, time.monotonic() - start)
        if state.finished or (timeout is not None and time.monotonic() - start >= timeout):
            return state
        time.sleep(interval)
