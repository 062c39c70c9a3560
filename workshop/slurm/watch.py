"""Watch jobs until they end: one table widget in Jupyter, one line per change elsewhere.

The display refreshes every `poll` seconds (1 s), and at once on a change of state, from what each
job says (read every 0.2 s, so a wait ends as soon as its last job does): its own log first
(`[job] start`, `[job] end`, `[workshop] step k/N`), Slurm through the shared poller (asked at
most once per interval for all watched jobs together) for everything a log cannot say. Elapsed
times count from the job's own start stamp (its log's `[job] start`, to the millisecond) to its
`[job] end` until Slurm answers; then they are the scheduler's. When Slurm's accounting does not answer, the display says so and goes
on following the logs. Once every job has ended by its log, the wait gives Slurm one query slot to
confirm it (its final state and elapsed time), so what is saved is Slurm's word; where accounting has not
answered by then, the saved row says so, and the table is updated in place when it does.

In a notebook the widget lives only while the watch runs: when it ends, the plain table
(workshop.slurm.job_table) replaces it in the same output, so a saved notebook holds no widget.
"""

from __future__ import annotations

import html
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from workshop.slurm.log_line import failure_line, last_meaningful_line
from workshop.slurm.pending import pending_words
from workshop.slurm.records import JobRecord, JobState


STATE_CHECK_S = 0.2   # how often the jobs' states are read; the display refreshes every `poll` or on a change


class Job(Protocol):
    """What watching needs of a job (`workshop.slurm.jobs.Job` has it). A protocol, not an import: the
    job API imports this module to wait, and nothing here imports the job API back."""

    record: JobRecord

    @property
    def job_id(self) -> str: ...
    @property
    def step(self) -> str: ...
    @property
    def reason(self) -> str: ...
    def state(self) -> JobState: ...
    def elapsed(self) -> float | None: ...
    def progress(self) -> tuple[int, int] | None: ...
    def tail(self, n: int = 20) -> str: ...

View = Callable[[Mapping[str, JobState], str], None]


def in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _fmt_elapsed(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}"


_FAILURES: dict[tuple[str, str], str] = {}     # (log, state) -> its failure line: a log no longer changes then


def _last_line(job: "Job", state: JobState | None = None) -> str:
    """The log's last line worth reading (workshop.slurm.log_line); a failed job's one-line reason."""
    if state is not None and state.finished and state not in (JobState.COMPLETED, JobState.CHECKPOINTED):
        key = (str(job.record.log_path), state.value)
        if key not in _FAILURES:
            error = getattr(job, "_error_line", lambda: "")()
            _FAILURES[key] = failure_line(job.record.log_path, error)
        if _FAILURES[key]:
            return _FAILURES[key]
    return last_meaningful_line(job.tail(60))


def _state_words(job: "Job", state: JobState) -> str:
    """The state, and who said it when that matters: the log ahead of Slurm; why it waits, in words."""
    said = " (by its log; Slurm to confirm)" if job.record.state_from == "log" and state.finished else ""
    if state is JobState.PENDING and job.reason:
        return f"{state.value}: {pending_words(job.reason)}"
    return f"{state.value}{said}" + (f" ({job.reason})" if job.reason else "")


def trouble(jobs: Mapping[str, "Job"]) -> str:
    """What Slurm could not tell just now, for the display ('' when all is well)."""
    from workshop.slurm.slurm_backend import POLLER
    if any(j.record.backend == "slurm" for j in jobs.values()) and POLLER.trouble:
        return POLLER.trouble
    return ""


class _WidgetView:
    """One HTML table widget: a row per job (state, steps as a progress bar, elapsed, last log line), shown
    while the watch runs. When the watch ends, the plain table (workshop.slurm.job_table) takes its place in
    the same output: a widget's saved output is only a reference to a model that lives in the kernel, so a
    saved and reopened notebook (the collected submission, its feedback) showed "Error displaying widget:
    model not found" above the table."""

    def __init__(self, jobs: Mapping[str, "Job"]) -> None:
        import ipywidgets as w
        from IPython.display import display
        self.jobs = jobs
        self.table = w.HTML()
        # while the watch runs, a reader without widgets (a terminal, a diff) sees what this output is
        bundle = {**self.table._repr_mimebundle_(),
                  "text/plain": "(the live job display, an HTML widget: the job table replaces it when the watch ends)"}
        self.handle = display(bundle, raw=True, display_id=True)

    def __call__(self, states: Mapping[str, JobState], note: str) -> None:
        rows = []
        for name, job in self.jobs.items():
            state = states[name]
            prog = job.progress()
            bar = (f'<progress value="{prog[0]}" max="{max(prog[1], 1)}"></progress> {prog[0]}/{prog[1]}'
                   if prog else "")
            colour = _COLOURS.get(state.value, "#cf222e")
            rows.append(f"<tr><td><b>{html.escape(str(name))}</b></td><td><code>{html.escape(job.job_id)}</code></td>"
                        f'<td style="color:{colour}"><b>{html.escape(_state_words(job, state))}</b></td>'
                        f"<td>{bar}</td><td>{_fmt_elapsed(job.elapsed())}</td>"
                        f"<td><code>{html.escape(_last_line(job, state))}</code></td></tr>")
        foot = f'<p style="color:#9a6700">&#9888; {html.escape(note)}</p>' if note else ""
        self.table.value = ("<table><tr><th>run</th><th>job</th><th>state</th><th>steps</th><th>elapsed</th>"
                            f"<th>last log line</th></tr>{''.join(rows)}</table>{foot}")

    def end(self, states: Mapping[str, JobState]) -> Any:
        """The watch ended: the plain table replaces the widget in its output, and the widget's model goes."""
        from workshop.slurm.job_table import update_table
        update_table(self.handle, _record(self.jobs, states))
        self.table.close()
        return self.handle


def _widget_view(jobs: Mapping[str, "Job"]) -> _WidgetView:
    return _WidgetView(jobs)


_COLOURS = {"COMPLETED": "#1a7f37", "RUNNING": "#0969da", "PENDING": "#6e7781", "CHECKPOINTED": "#9a6700"}


def _final_words(job: "Job", state: JobState) -> str:
    """The state a saved table keeps: Slurm's final word, or, where accounting had not given it when the watch
    stopped waiting, what is missing (the log's word stays until `lab.table` or `job.state()` reads Slurm's)."""
    if job.record.state_from == "log" and state.finished:
        return (f"{state.value} by its log; Slurm's accounting had not confirmed it when the watch ended "
                "(lab.table or job.state() reads the final state)")
    return _state_words(job, state)


def _record(jobs: Mapping[str, "Job"], states: Mapping[str, JobState]) -> list[dict[str, str]]:
    from workshop.slurm.job_table import rows
    return rows(jobs, states, _final_words, _fmt_elapsed, _last_line)


def _text_view(jobs: Mapping[str, "Job"]) -> View:
    """A terminal: one line rewritten in place for a single job; otherwise a line per change."""
    in_place = sys.stdout.isatty() and len(jobs) == 1
    shown: dict[str, str] = {}

    def update(states: Mapping[str, JobState], note: str) -> None:
        if note and shown.get("") != note:
            print(f"{'' if not in_place else chr(10)}note: {note}", flush=True)
        shown[""] = note
        for name, job in jobs.items():
            prog = job.progress()
            steps = f" step {prog[0]}/{prog[1]}" if prog else ""
            head = f"{job.job_id} {name}: {_state_words(job, states[name])}{steps}"
            line = f"{head} {_fmt_elapsed(job.elapsed())}"
            if in_place:
                sys.stdout.write("\r" + line[:150].ljust(150) + ("\n" if states[name].finished else ""))
                sys.stdout.flush()
            elif shown.get(name) != head:
                print(line, flush=True)
                shown[name] = head
    return update


def wait_all(jobs: Mapping[str, "Job"], timeout: float | None = None, poll: float | None = None,
             quiet: bool = False) -> dict[str, JobState]:
    """Until every job has ended (and Slurm has confirmed it, for one query slot at most) or `timeout`
    seconds pass; each job's last state."""
    from workshop.slurm.slurm_backend import POLLER
    interval = poll if poll is not None else 1.0
    start = time.monotonic()
    widget = _widget_view(jobs) if not quiet and in_notebook() else None
    view: View | None = None if quiet else (widget or _text_view(jobs))
    confirm_until = None
    shown: tuple[float, Any] | None = None      # when the display was last drawn, and what it showed
    while True:
        states = {name: job.state() for name, job in jobs.items()}
        note = trouble(jobs) if view else ""
        # drawn on any change (a state, or Slurm's trouble: the return below may follow at once) or
        # every `interval`
        if view and (shown is None or (states, note) != shown[1] or time.monotonic() - shown[0] >= interval):
            view(states, note)
            shown = (time.monotonic(), (states, note))
        timed_out = timeout is not None and time.monotonic() - start >= timeout
        if all(s.finished for s in states.values()) and not timed_out:
            # every job ended; those only their log has ended get Slurm's word, for one query slot at most
            # (bounded: an accounting outage must not hold the notebook): a saved state is Slurm's final one
            confirm_until = confirm_until or time.monotonic() + POLLER.interval() + 2 * interval
            unsettled = not all(job.record.settled for job in jobs.values())
            if unsettled and time.monotonic() < confirm_until and not (POLLER.trouble and POLLER.due_in() > 0):
                time.sleep(min(interval, STATE_CHECK_S))
                continue
            if widget:
                handle = widget.end(states)
                if unsettled:     # the plain table takes Slurm's word when it comes, while the notebook goes on
                    threading.Thread(target=_confirm, args=(jobs, interval, POLLER.interval() * 6, handle),
                                     daemon=True).start()
            return states
        if timed_out:
            if widget:
                widget.end(states)
            return states
        # states are read often (a job's files; Slurm only through the rate-limited poller), so the
        # cell moves on as soon as the last job ends: a whole `interval` here cost each cell ~0.7 s
        time.sleep(min(interval, STATE_CHECK_S))


def _confirm(jobs: Mapping[str, "Job"], interval: float, seconds: float, handle: Any) -> None:
    """After the watch: follow Slurm until it has confirmed every job (or `seconds` pass), then update the
    plain table in place (a papermill run and a browser both keep the update)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(interval)
        for job in jobs.values():
            job.state()
        if all(job.record.settled for job in jobs.values()):
            break
    from workshop.slurm.job_table import update_table
    try:
        update_table(handle, _record(jobs, {name: job.state() for name, job in jobs.items()}))
    except Exception:      # the kernel is shutting down: the table keeps the logs' word
        pass


def wait(job: "Job", timeout: float | None = None, poll: float | None = None, quiet: bool = False) -> JobState:
    """One job: until it ends or `timeout` seconds pass; its last state."""
    return wait_all({job.step: job}, timeout=timeout, poll=poll, quiet=quiet)[job.step]
