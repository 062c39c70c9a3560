"""docs/grading.md is the notebooks' grading, as the notebooks' own metadata says it: one row per graded
cell with its points, the reference-only code it names is code the integrity scan flags, the points a
copying student earns stay within a quarter of each notebook's, and every check comes after the lesson."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from workshop.grading import scan
from workshop.grading.release import REPO, assignments

DOC = REPO / "docs" / "grading.md"
COPYABLE_SHARE = 0.25


def table(heading: str) -> list[list[str]]:
    """The body rows of the first table under `heading`, each a list of its cells."""
    lines = DOC.read_text().split(heading, 1)[1].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    block = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        block.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return [row for row in block[1:] if not set(row[0]) <= {"-", " "}]


def graded_cells(name: str) -> dict[str, tuple[float, str]]:
    nb = nbformat.read(REPO / "solutions" / name / f"{name}.ipynb", as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: (float(c.metadata["nbgrader"]["points"]),
                                                 "auto" if c.cell_type == "code" else "hand")
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}


def rows() -> list[dict[str, str]]:
    keys = ["notebook", "cell", "points", "graded_by", "takes", "may_not_use", "copying"]
    return [dict(zip(keys, r)) for r in table("## The graded cells")]


@pytest.mark.parametrize("name", assignments())
def test_the_table_has_one_row_per_graded_cell_with_its_points(name: str) -> None:
    documented = {r["cell"].strip("`"): (float(r["points"]), r["graded_by"]) for r in rows()
                  if r["notebook"] == name[:2]}
    assert documented == graded_cells(name)


def test_what_a_student_may_not_use_is_what_the_scan_flags() -> None:
    flagged = set(scan.REFERENCE_NAMES) | set(scan.TOOLS.values())
    named = {token for r in rows() for token in re.findall(r"`([^`]+)`", r["may_not_use"])}
    assert named and named <= flagged, named - flagged
    listed = {token for r in table("### 2. Reference-only code") for token in re.findall(r"`([^`.]+)`", r[0])}
    assert listed <= set(scan.REFERENCE_NAMES), listed - set(scan.REFERENCE_NAMES)


@pytest.mark.parametrize("name", assignments())
def test_copying_earns_at_most_a_quarter_of_each_notebooks_points(name: str) -> None:
    mine = [r for r in rows() if r["notebook"] == name[:2]]
    auto = sum(float(r["points"]) for r in mine if r["graded_by"] == "auto")
    copyable = sum(float(r["points"]) for r in mine if r["copying"] == "yes")
    assert all(r["copying"] in (("yes", "no") if r["graded_by"] == "auto" else ("—",)) for r in mine)
    assert copyable <= COPYABLE_SHARE * auto, (copyable, auto)


@pytest.mark.parametrize("name", assignments())
def test_the_readers_count_covers_every_autograded_cell_and_needs_reasoning_for_three_quarters(name: str) -> None:
    """The reader's count (R, C or D per autograded cell) has the notebook's points, marks *yes* in the
    graded-cells table exactly where it says C or D, and C + D is at most 25 % of the autograded points."""
    counted = {r[1].strip("`"): (float(r[2]), r[3]) for r in table("### The reader's count") if r[0] == name[:2]}
    auto = {cell: points for cell, (points, by) in graded_cells(name).items() if by == "auto"}
    assert {cell: points for cell, (points, _) in counted.items()} == auto
    assert {count for _, count in counted.values()} <= {"R", "C", "D"}
    copying = {r["cell"].strip("`"): r["copying"] for r in rows() if r["notebook"] == name[:2]}
    assert {cell for cell, (_, count) in counted.items() if count != "R"} == \
        {cell for cell, says in copying.items() if says == "yes"}
    assert sum(points for points, count in counted.values() if count != "R") <= COPYABLE_SHARE * sum(auto.values())
    # the sums the page states under the table are the table's
    said = re.search(rf"{name[:2]}: (?:C \+ D = )?([0-9.]+) of ([0-9.]+)", DOC.read_text().split("### The reader's count")[1])
    reached = sum(points for points, count in counted.values() if count != "R")
    assert said and (float(said[1]), float(said[2])) == (reached, sum(auto.values())), (said, reached)


@pytest.mark.parametrize("name", assignments())
def test_every_check_comes_after_the_lesson(name: str) -> None:
    """Run All stops at the first failing cell: every test cell sits in the final Checks section, after every
    answer, reflection and lesson cell; only the checks, their references and feedback-only reveals follow."""
    nb = nbformat.read(REPO / "solutions" / name / f"{name}.ipynb", as_version=4)
    heading = max(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                  and re.match(r"## \d+\. Checks", c.source))
    meta = [c.metadata.get("nbgrader", {}) for c in nb.cells]
    tests = [i for i, (c, m) in enumerate(zip(nb.cells, meta)) if m.get("grade") and c.cell_type == "code"]
    assert tests and min(tests) > heading
    assert heading > max(i for i, m in enumerate(meta) if m.get("solution"))
    assert all(m.get("locked") and not m.get("solution") for m in meta[heading:]), name
