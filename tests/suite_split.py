"""Which local part of the suite a test runs in (WORKSHOP_TEST_PART, tests/conftest.py; scripts/test.sh).

The local tests that do not read the course run were one pytest process, the suite's critical path (1,555 s of
wall time for 1,054 CPU-s in the 2026-11-29 CI profile): much of it waits (a replayed job, a hung rank's timeout,
a job's processes starting), and while one test waits the cores could run another. So they run as two processes,
`rest1` and `rest2`, their files assigned by a greedy bin-pack on the committed profile's wall time, so that the
halves end together. The assignment is by file and deterministic (the same tree gives the same halves), so a
file's module fixtures are made once. Files that ask tests/runs.py's RunCache for a training run stay together
(`RUNS`): a run two files share is then trained once, as in one process. A test the profile does not know (new
since it was measured) counts `NEW_TEST_S`. The tests that read the course run (`course_run`) are packed the same
way into `course1` and `course2` (the course part, 1,246 s of wall in that profile, was next on the critical
path); the course is run once for both (tests/course_share.py), so its run is charged to neither (`SHARED`).
The halves are of what was collected: scripts/test.sh collects all of tests/ but tests/slurm; a part narrowed by
arguments (a file, a folder) packs only those files. A new profile committed repacks them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence, TypeVar

import pytest

Item = TypeVar("Item", bound=pytest.Item)

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "benchmarks" / "cpu"
RESTS = ("rest1", "rest2")
COURSES = ("course1", "course2")        # the tests that read the course run, which both make once (course_share)
PARTS = ("course", "rest", *COURSES, *RESTS)    # `course`, `rest`: both halves in one process (a run by hand)
SHARED = ("course_run",)                # session fixtures every half of its kind waits for: charged to no file
RUNS = "tests/runs.py's RunCache"       # the unit of the files that share training runs
NEW_TEST_S = 2.0                        # a test the profile has not seen: about a median local test's wall


def committed_profile() -> Path | None:
    """The newest committed profile of a whole suite (its name sorts by date): the one the halves are packed by."""
    found = sorted(PROFILES.glob("suite_profile-*.json"))
    return found[-1] if found else None


def test_walls(profile: Path | None) -> dict[str, float]:
    """Each test's wall seconds in the profile: all its phases, with the module fixtures it set up first, but
    not the SHARED ones (the profile charges the course run to whichever test asked first; each course half waits
    for it, so it weighs on neither side of the pack)."""
    if profile is None:
        return {}
    data = json.loads(profile.read_text())
    walls = {node: sum(p["wall_s"] for p in t["phases"].values()) for node, t in data["tests"].items()}
    for fixture in data.get("fixtures", []):
        if fixture["fixture"] in SHARED and fixture["test"] in walls:
            walls[fixture["test"]] = max(0.0, walls[fixture["test"]] - fixture["wall_s"])
    return walls


def unit_of(nodeid: str, fixtures: Iterable[str]) -> str:
    """What is assigned whole: the test's file, or RUNS for a test that asks for a shared training run."""
    return RUNS if "runs" in fixtures else nodeid.split("::")[0]


def pack(costs: dict[str, float], bins: int = 2) -> dict[str, int]:
    """Greedy bin-pack (longest first, into the lightest bin; ties by name and by bin number): unit -> bin."""
    load = [0.0] * bins
    out = {}
    for unit in sorted(costs, key=lambda u: (-costs[u], u)):
        b = min(range(bins), key=lambda i: (load[i], i))
        out[unit], load[b] = b, load[b] + costs[unit]
    return out


def assign(tests: Sequence[tuple[str, Sequence[str]]], walls: dict[str, float]) -> dict[str, str]:
    """Each test's part: a course half if it reads the course run, else a rest half; each kind packed by unit.

    `tests`: (node id, fixture names) of every collected local test; `walls`: test_walls of the profile."""
    kinds: dict[tuple[str, ...], dict[str, str]] = {COURSES: {}, RESTS: {}}
    costs: dict[tuple[str, ...], dict[str, float]] = {COURSES: {}, RESTS: {}}
    for node, fixtures in tests:
        kind = COURSES if "course_run" in fixtures else RESTS
        unit = kinds[kind][node] = unit_of(node, fixtures)
        costs[kind][unit] = costs[kind].get(unit, 0.0) + walls.get(node, NEW_TEST_S)
    parts = {}
    for kind, units in kinds.items():
        bins = pack(costs[kind], len(kind))
        parts.update({node: kind[bins[unit]] for node, unit in units.items()})
    return {node: parts[node] for node, _ in tests}


def selected(part: str, assigned: str) -> bool:
    """Whether a test assigned to `assigned` runs in the part `part` (`course`, `rest`: both halves)."""
    return (assigned == part or (part == "rest" and assigned in RESTS)
            or (part == "course" and assigned in COURSES))


def keep(part: str, items: Sequence[Item]) -> list[Item]:
    """The collected items `WORKSHOP_TEST_PART=part` runs (tests/conftest.py), packed by the committed profile.

    The one selection the hook and tests/test_suite_split.py's single listing both call: the listing derives every
    part from one collection, so what it proves is what each part of scripts/test.sh runs."""
    walls = test_walls(committed_profile())
    parts = assign([(item.nodeid, getattr(item, "fixturenames", ())) for item in items], walls)
    return [item for item in items if selected(part, parts[item.nodeid])]
