"""The suite's local parts (tests/suite_split.py, scripts/test.sh): every local test runs in exactly one of
`course1`, `course2`, `rest1` and `rest2`, none is lost; a test that reads the course run is in a course half;
files that share training runs stay in one half; the halves are packed by the committed profile so that they end
together, the course run itself charged to neither course half."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests import suite_split
from tests.suite_split import assign, pack, selected

ROOT = Path(__file__).resolve().parent.parent
LOCAL = (*suite_split.COURSES, *suite_split.RESTS)
BALANCE = 0.15       # the halves end together: their difference at most this share of their sum


def test_the_pack_fills_the_lightest_half_longest_first_and_is_the_same_every_time() -> None:
    """5, 4, 3, 3, 1: 5 -> 0, 4 -> 1, 3 -> 1 (4 < 5), 3 -> 0 (5 < 7), 1 -> 1 (7 < 8): 8 and 8."""
    costs = {"e": 1.0, "c": 3.0, "a": 5.0, "d": 3.0, "b": 4.0}
    assert pack(costs) == {"a": 0, "b": 1, "c": 1, "d": 0, "e": 1}
    assert pack(dict(reversed(list(costs.items())))) == pack(costs)


def test_a_course_test_stays_in_the_course_and_a_shared_run_keeps_its_files_together() -> None:
    tests = [("tests/a.py::one", ["runs"]), ("tests/b.py::two", ["tmp_path", "runs"]),
             ("tests/b.py::three", []), ("tests/c.py::four", ["course_run", "runs"]), ("tests/d.py::five", []),
             ("tests/e.py::six", ["course_run"]), ("tests/e.py::seven", ["course_run"])]
    walls = {"tests/a.py::one": 10, "tests/b.py::two": 10, "tests/b.py::three": 15, "tests/d.py::five": 1,
             "tests/c.py::four": 3, "tests/e.py::six": 2, "tests/e.py::seven": 2}
    parts = assign(tests, walls)
    assert parts["tests/e.py::six"] == parts["tests/e.py::seven"] == "course1"   # 4 s: the longer course unit
    assert parts["tests/c.py::four"] == "course2"                                # a course test: in the course
    assert parts["tests/a.py::one"] == parts["tests/b.py::two"] == "rest1"      # RUNS: 20 s, the longest unit
    assert parts["tests/b.py::three"] == parts["tests/d.py::five"] == "rest2"   # 15 + 1 s, packed beside it
    assert selected("rest", "rest1") and selected("rest", "rest2") and not selected("rest", "course1")
    assert selected("course", "course1") and selected("course", "course2") and not selected("course", "rest2")
    assert not selected("rest1", "rest2") and not selected("course1", "course2") and selected("course2", "course2")


def test_the_course_run_is_charged_to_no_test(tmp_path: Path) -> None:
    """The profile charges the course run to whichever test asked first: packed as it stands, that test's file
    would weigh 382 s more on its half, though both halves wait for the one run."""
    profile = tmp_path / "suite_profile-x.json"
    phases = {"setup": {"wall_s": 390.0}, "call": {"wall_s": 1.0}, "teardown": {"wall_s": 0.0}}
    profile.write_text(json.dumps({"tests": {"tests/a.py::one": {"phases": phases}},
                                   "fixtures": [{"fixture": "course_run", "test": "tests/a.py::one", "wall_s": 382.0},
                                                {"fixture": "graded", "test": "tests/a.py::one", "wall_s": 8.0}]}))
    assert suite_split.test_walls(profile) == {"tests/a.py::one": 9.0}      # its module fixture stays its own


def collect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            part: str = "rest1") -> dict[str, tuple[list[str], int]]:
    """Per local part, the node ids `WORKSHOP_TEST_PART=part` runs and how many tests the whole collection held
    before the part was chosen: one collection of the suite with the arguments scripts/test.sh gives a part, every
    part selected from it as the hook selects (tests/suite_split.py's `keep`, through tests/split_listing.py), and the
    hook's own selection for `part`, which must be the same.

    The collection runs in this process (`pytest.main`): in a part of the suite every test module is imported
    already, so it costs about 1 CPU-s, where a new pytest process imported them all again (12-19 CPU-s: torch,
    transformers, nbformat, hypothesis; issue 51)."""
    for name in ("WORKSHOP_TEST_PROFILE", "WORKSHOP_TEST_TIER"):
        monkeypatch.delenv(name, raising=False)
    listing = tmp_path / "listing.json"
    monkeypatch.setenv("WORKSHOP_TEST_PART", part)
    monkeypatch.setenv("WORKSHOP_SPLIT_LISTING", str(listing))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "tests.split_listing",
                      f"--basetemp={tmp_path / 'collect'}", "--ignore=tests/slurm", "tests"])
    out = capsys.readouterr().out
    assert rc == 0, out[-3000:]
    found = re.search(r"^(\d+)/(\d+) tests collected", out, re.M)
    assert found, out[-2000:]
    data = json.loads(listing.read_text())
    assert data["part"] == part and data["hook"] == data["parts"][part], (part, len(data["hook"]))
    assert [n for n in out.splitlines() if "::" in n] == data["hook"], out[-2000:]
    assert (len(data["hook"]), len(data["collected"])) == (int(found[1]), int(found[2])), out[-2000:]
    return {p: (data["parts"][p], len(data["collected"])) for p in LOCAL}


@pytest.mark.slow
def test_every_local_test_is_in_exactly_one_part_and_the_halves_end_together(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The dry listing of each of the four local parts, as scripts/test.sh selects it: disjoint, and together the
    whole collection; the rest's halves' profiled wall times within BALANCE of their sum (equal to the second on
    2026-11-29's profile: 764 and 764 s). A unit grown past it (the largest: RUNS, the files sharing training
    runs) is what to split next; in the course, tests/test_course.py already is."""
    listed = collect(tmp_path, monkeypatch, capsys)
    totals = {total for _, total in listed.values()}
    assert len(totals) == 1, totals
    seen: dict[str, str] = {}
    for part, (nodes, _) in listed.items():
        assert nodes, f"the part {part} holds no test"
        twice = [(n, seen[n], part) for n in nodes if n in seen]
        assert twice == [], twice[:5]
        seen.update(dict.fromkeys(nodes, part))
    assert len(seen) == totals.pop()
    assert all(n.startswith("tests/") and not n.startswith("tests/slurm/") for n in seen)
    walls = suite_split.test_walls(suite_split.committed_profile())
    halves = {part: sum(walls.get(n, suite_split.NEW_TEST_S) for n in listed[part][0]) for part in LOCAL}
    print(f"the halves by the committed profile (s of wall, the course run in neither course half): {halves}")
    assert abs(halves["rest1"] - halves["rest2"]) <= BALANCE * (halves["rest1"] + halves["rest2"]), halves
    # the course halves end together too, unless one file outweighs the rest (tests/test_course.py's grading: 516 s
    # of 894 on that profile); then the heavier half is that file alone
    files: dict[str, float] = {}
    for node in listed["course1"][0] + listed["course2"][0]:
        files[node.split("::")[0]] = files.get(node.split("::")[0], 0.0) + walls.get(node, suite_split.NEW_TEST_S)
    course = (halves["course1"], halves["course2"])
    assert max(course) <= max(max(files.values()), (1 + BALANCE) * sum(course) / 2), (course, files)
