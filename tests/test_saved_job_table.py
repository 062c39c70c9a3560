"""The saved notebook keeps its jobs (issue 40, deliverable 3): the live job display is a widget, whose saved
output is empty, so each watch ends by displaying a plain table of its jobs. Read here from the course's
executed notebooks (papermill's output, what nbgrader's feedback and a reopened notebook show), and
checked against each job's own folder: job.json (state, exit code, Slurm's or the local backend's
elapsed time) and its log."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = ["01_baseline", "02_fsdp_single_gpu", "03_sharding_strategies", "04_multi_gpu", "05_multi_node"]
COLUMNS = ["run", "job", "state", "elapsed", "exit code", "last log line"]


class _Cells(HTMLParser):
    """The rows of <table class="workshop-jobs"> as lists of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def saved_tables(notebook: Path) -> list[list[dict[str, str]]]:
    """Every job table in the notebook's saved outputs, read from its HTML (what a reader sees)."""
    nb = nbformat.read(notebook, as_version=4)
    tables = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            page = out.get("data", {}).get("text/html", "")
            if out.get("output_type") != "display_data" or 'class="workshop-jobs"' not in page:
                continue
            assert "application/vnd.jupyter.widget-view+json" not in out["data"], "the record is not a widget"
            parser = _Cells()
            parser.feed(page)
            head, *rows = parser.rows
            assert head == COLUMNS
            tables.append([dict(zip(COLUMNS, r)) for r in rows])
            # the same rows for a program, in the output's metadata, and as text for a terminal
            assert out["metadata"]["workshop"]["jobs"] == tables[-1]
            assert all(r["job"] in out["data"]["text/plain"] for r in tables[-1])
    return tables


def hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_watched_job_is_in_a_plain_table_of_the_saved_notebook(course_run: Path, name: str) -> None:
    if not (course_run / name / f"{name}.ipynb").is_file():
        pytest.skip(f"{name} was not run (WORKSHOP_TEST_ONLY)")
    tables = saved_tables(course_run / name / f"{name}.ipynb")
    records = {r["job_id"]: r for r in (json.loads(p.read_text()) for p in (course_run / name / "jobs").glob("*/job.json"))}
    shown = {row["job"]: row for table in tables for row in table}
    assert tables and set(shown) == set(records), "every job the notebook ran is in a saved table, once"
    for job_id, row in shown.items():
        rec = records[job_id]
        assert row["state"].startswith(rec["state"]), (row, rec["state"])
        assert row["exit code"] == ("-" if rec["exit_code"] is None else str(rec["exit_code"]))
        if rec["elapsed_s"] is not None:
            assert row["elapsed"] == hms(rec["elapsed_s"])
        log = Path(rec["log_path"]).read_text(errors="replace")
        line = row["last log line"]
        assert line and not re.match(r"(WORKSHOP_[A-Z_]+ |USDT:|\{'|\[job\] end )", line), line
        if rec["state"] == "COMPLETED":
            # a line of the log itself, the last worth reading: a training job's last step, a bandwidth
            # test's verdict
            assert " ".join(line.split()) in {" ".join(x.split()) for x in log.splitlines()}, line
            steps = re.findall(r"^\[workshop\] step (\d+)/(\d+) ", log, flags=re.M)
            if steps and line.startswith("[workshop] step "):
                assert line.startswith(f"[workshop] step {steps[-1][0]}/{steps[-1][1]} ")
            elif "# Avg bus bandwidth" in log:
                assert line == [x for x in log.splitlines() if x.startswith("# ")][-1].strip()
