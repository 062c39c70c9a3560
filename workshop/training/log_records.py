"""The `WORKSHOP_*` record lines of a job's log, written and read in one place: `WORKSHOP_<KIND> {json}`.

Rank 0 of a training run prints its machine records into the job's log beside the Trainer's own lines; the
parsers (workshop.results.logs), `workshop verify` (workshop.results.verify) and the watch's "last line"
(workshop.slurm.log_line) read them back. Why one owner: a second spelling of the grammar drifts (a marker
renamed in the writer and not in a reader makes the reader silently see nothing). The training layer writes
them, so the grammar lives here, the lowest layer that needs it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from workshop.training.run_record import say

PREFIX = "WORKSHOP_"
SUMMARY, METRICS, DIGEST, RUN_ARGS, CHECKPOINT = "SUMMARY", "METRICS", "DIGEST", "RUN_ARGS", "CHECKPOINT"
KINDS = (SUMMARY, METRICS, DIGEST, RUN_ARGS, CHECKPOINT)
# any record line, after srun's `--label` prefix (`3: `) when there is one: what a reader of the last line skips
ANY_RECORD = re.compile(rf"^(?:\d+:\s*)?{PREFIX}[A-Z_]+ [\[{{]")


def marker(kind: str) -> str:
    """`WORKSHOP_SUMMARY`: what a line holding that record contains."""
    return PREFIX + kind


def line(kind: str, record: Any, default: Any = None) -> str:
    """The record's log line, the JSON object on one line."""
    return f"{marker(kind)} {json.dumps(record, default=default)}"


def write(kind: str, record: Any, default: Any = None) -> None:
    """Print the record as one whole line (run_record.say: one write, so no other rank splices into it)."""
    say(line(kind, record, default))


def pattern(kind: str) -> re.Pattern[str]:
    """The record's JSON object anywhere in a line (after a rank tag or srun's label): group 1."""
    return re.compile(rf"{marker(kind)}\s+(\{{.*\}})")


def read(text: str) -> tuple[str, str] | None:
    """(kind, JSON text) of a line that starts with a record, else None: verify reads the log's lines as written."""
    head, _, rest = text.partition(" ")
    if not head.startswith(PREFIX) or head[len(PREFIX):] not in KINDS:
        return None
    return head[len(PREFIX):], rest
