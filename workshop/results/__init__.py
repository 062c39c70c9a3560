"""Results: what training runs leave, read back.

Logs into records, records into the course's tables and plots (`logs`, `tables`, `plots`); a failed job
into a sentence (`diagnose`); the memory model each run is set beside (`memory`, `memory_compare`); a
submitted job checked against Slurm's accounting and its own seal (`verify`).

May import: `workshop.training` (what a run writes) and `workshop.slurm` (job records, site profiles).
Never the rooms above it (comm, bench, student, site, grading).
"""

from pathlib import Path

from workshop.slurm import log_line


def first_failure_title(log_path: Path) -> str:
    """The title of `workshop diagnose`'s first finding for a failed job's log ('' when it finds none):
    the line the job watch shows for a failure (workshop.slurm.log_line, which cannot import this layer)."""
    from workshop.results.diagnose import diagnose

    titles = [f.title for f in diagnose(log_path) if f.kind != "unfinished"]
    return titles[0] if titles else ""


log_line.explain_failures_with(first_failure_title)
