"""The suite's own profile and each test's CPU budget (issue 51): a slow change shows in the next run, not in a
weekly profile (torchtitan's CI keeps a time budget per test).

Measured in CPU-seconds (this pytest process and the processes it waited for: training ranks, launchers,
kernels, nbgrader; and the ranks tests/warm_parent.py forked, by `add_cpu`), not wall time: a loaded 2-core
machine stretches wall time by a factor of two or more (the suite took 1,239 s quiet and 1,519 s with one core
kept busy on 2026-11-29, 3,531 s on a worse day), while the CPU a test's own work needs moves far less. A job that Slurm runs is slurmd's child, not ours: a test that
waits for the cluster costs what its own processes cost.

What a test costs (`own`): the setup of its function-scoped fixtures and its call (what the budget checks; the
profile adds its teardown). A module- or session-scoped fixture (the course run, the cluster) and a training run
of tests/runs.py's RunCache (made when a test first asks for it, `shared`) are shared: each is profiled under its
name and charged to no test, so whichever test asks first is not blamed for it.

A test whose own CPU exceeds `BUDGET_CPU_S` fails, unless it is marked `@pytest.mark.heavy(reason=...)` (a
larger `cpu_s=` or none). The budget is wide on purpose (a flaky budget would fail CI): of the 2026-11-26
profile's tests, the dearest one's own work took 183 s of wall time (marked heavy), the next 120 s: 2 cores for
120 s are at most 240 CPU-s.

`WORKSHOP_TEST_PROFILE=FILE` writes the profile (per test: setup, call, teardown, own, wall and CPU; per fixture:
scope, wall, CPU, the test that set it up) as JSON; scripts/test.sh writes one per part and prints the dearest.
`WORKSHOP_TEST_BUDGET=off` turns the check off (a profile of a change meant to be slow);
`WORKSHOP_TEST_BUDGET_CPU_S` sets the default budget (tests/test_suite_profile.py sets a tiny one)."""

from __future__ import annotations

import json
import os
import resource
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Generator, Iterator

import pytest

BUDGET_CPU_S = float(os.environ.get("WORKSHOP_TEST_BUDGET_CPU_S", "400"))   # the env: for tests/test_suite_profile.py


_ADDED_CPU_S = [0.0]    # CPU of processes that are not this process's children (add_cpu)


def cpu_now() -> float:
    """CPU-seconds of this process and of every child it has waited for (grandchildren waited by them count), and
    of the processes `add_cpu` reported."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + _ADDED_CPU_S[0]


def add_cpu(seconds: float) -> None:
    """Count CPU that rusage cannot see yet: a training rank forked by tests/warm_parent.py is the warm parent's
    child, not pytest's, and the parent is reaped only when pytest exits. The running test, fixture or shared run
    is charged with it as with its own children; a negative amount takes back what rusage now counts itself."""
    _ADDED_CPU_S[0] += seconds


@dataclass
class Cost:
    wall_s: float = 0.0
    cpu_s: float = 0.0

    def add(self, other: "Cost") -> None:
        self.wall_s += other.wall_s
        self.cpu_s += other.cpu_s


class Clock:
    """Wall and CPU time of a block: `with Clock() as c: ...; c.cost`."""

    def __enter__(self) -> "Clock":
        self.wall, self.cpu = time.perf_counter(), cpu_now()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cost = Cost(time.perf_counter() - self.wall, cpu_now() - self.cpu)


@dataclass
class Record:
    phases: dict[str, Cost] = field(default_factory=dict)
    shared: Cost = field(default_factory=Cost)        # module/session fixtures set up in this test's setup

    def own(self) -> Cost:
        """The test's own cost: every phase so far, less the shared fixtures it happened to set up first."""
        total = Cost()
        for cost in self.phases.values():
            total.add(cost)
        return Cost(total.wall_s - self.shared.wall_s, total.cpu_s - self.shared.cpu_s)


def budget_of(item: pytest.Item) -> float | None:
    """The test's CPU budget: BUDGET_CPU_S, or its `heavy` marker's `cpu_s` (None: no budget)."""
    mark = item.get_closest_marker("heavy")
    if mark is None:
        return BUDGET_CPU_S
    return mark.kwargs.get("cpu_s")


def heavy_without_reason(item: pytest.Item) -> bool:
    mark = item.get_closest_marker("heavy")
    return mark is not None and not str(mark.kwargs.get("reason") or (mark.args[0] if mark.args else "")).strip()


class SuiteProfile:
    """The pytest plugin: times each phase and fixture, fails a test over its budget, writes the profile."""

    def __init__(self, path: Path | None, enforce: bool) -> None:
        self.path, self.enforce = path, enforce
        self.tests: dict[str, Record] = {}
        self.fixtures: list[dict[str, Any]] = []
        self.current: str | None = None
        self.started = time.time()

    def _phase(self, item: pytest.Item, when: str) -> Generator[None, None, None]:
        self.current = item.nodeid
        with Clock() as clock:
            yield
        self.tests.setdefault(item.nodeid, Record()).phases[when] = clock.cost

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        yield from self._phase(item, "setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        yield from self._phase(item, "call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        yield from self._phase(item, "teardown")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Generator[None, None, None]:
        with Clock() as clock:
            yield
        self.record(fixturedef.argname, fixturedef.scope, clock.cost)

    def record(self, name: str, scope: str, cost: Cost) -> None:
        """A fixture's (or a shared run's) setup: profiled under its name; unless function-scoped, charged to no
        test."""
        self.fixtures.append({"fixture": name, "scope": scope, "test": self.current,
                              **{k: round(v, 2) for k, v in asdict(cost).items()}})
        if scope != "function" and self.current is not None:
            self.tests.setdefault(self.current, Record()).shared.add(cost)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Generator[None, None, None]:
        outcome = yield
        report = outcome.get_result()
        if report.when != "call" or not report.passed:
            return
        if heavy_without_reason(item):
            report.outcome, report.longrepr = "failed", (
                "marked heavy without a reason: @pytest.mark.heavy(reason='why this test costs what it does')")
            return
        budget = budget_of(item)
        record = self.tests.get(item.nodeid)
        own = record.own() if record is not None else Cost()
        if self.enforce and budget is not None and own.cpu_s > budget:
            report.outcome, report.longrepr = "failed", (
                f"over its CPU budget: this test's own work (its call and function-scoped fixtures; shared fixtures "
                f"are charged to none) took {own.cpu_s:.0f} CPU-s in {own.wall_s:.0f} s, its budget is {budget:g} "
                f"CPU-s (tests/suite_profile.py). Make it cheaper (share a run: tests/runs.py, `course_run`), or "
                f"mark it @pytest.mark.heavy(reason=..., cpu_s=...) with the reason it must cost this much.")

    def summary(self) -> dict[str, Any]:
        tests = {node: {"phases": {w: {k: round(v, 2) for k, v in asdict(c).items()} for w, c in r.phases.items()},
                        "own": {k: round(v, 2) for k, v in asdict(r.own()).items()}}
                 for node, r in self.tests.items()}
        return {"what": "the suite's own profile (tests/suite_profile.py): per test its phases and own cost, "
                        "per fixture its setup; wall and CPU seconds (this pytest and the processes it waited for)",
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
                "part": os.environ.get("WORKSHOP_TEST_PART", ""), "budget_cpu_s": BUDGET_CPU_S,
                "wall_s": round(time.time() - self.started, 1), "cpu_s": round(cpu_now(), 1),
                "tests": tests, "fixtures": sorted(self.fixtures, key=lambda f: -f["cpu_s"])}

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.summary(), indent=1) + "\n")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.path is None:
            return
        top = sorted(self.fixtures, key=lambda f: -f["cpu_s"])[:8]
        own = sorted(((r.own().cpu_s, n) for n, r in self.tests.items()), reverse=True)[:8]
        terminalreporter.section("the dearest fixtures and tests (CPU-s, tests/suite_profile.py)")
        for f in top:
            terminalreporter.write_line(f"{f['cpu_s']:8.1f} CPU-s {f['wall_s']:8.1f} s  fixture {f['fixture']} "
                                        f"({f['scope']}, set up for {f['test']})")
        for cpu, node in own:
            terminalreporter.write_line(f"{cpu:8.1f} CPU-s  own  {node}")
        terminalreporter.write_line(f"profile written to {self.path}")


_ACTIVE: list[SuiteProfile] = []


@contextmanager
def shared(name: str, scope: str = "session") -> Iterator[None]:
    """Profile a shared thing made lazily inside a test (tests/runs.py's RunCache makes each training run when a
    test first asks for it): profiled as a fixture of `scope`, charged to no test."""
    with Clock() as clock:
        yield
    for profile in _ACTIVE[-1:]:
        profile.record(name, scope, clock.cost)


def configure(config: pytest.Config) -> None:
    """Register the `heavy` marker and the plugin (tests/conftest.py calls this)."""
    config.addinivalue_line("markers", "heavy(reason, cpu_s=None): a test known to cost more than the per-test "
                                       "CPU budget (tests/suite_profile.py), with the reason; cpu_s is its own budget "
                                       "(None: none)")
    path = os.environ.get("WORKSHOP_TEST_PROFILE")
    enforce = os.environ.get("WORKSHOP_TEST_BUDGET", "on") != "off"
    profile = SuiteProfile(Path(path) if path else None, enforce)
    # the innermost session's: a pytest.main run inside a test (tests/test_suite_split.py collects the suite in its
    # own process) is active while it runs, and the outer session's profile again after it
    _ACTIVE.append(profile)
    config.add_cleanup(lambda: _ACTIVE.remove(profile))
    config.pluginmanager.register(profile, "workshop-suite-profile")


def join(out: Path, parts: list[Path]) -> dict[str, Any]:
    """The parts' profiles as one (scripts/test.sh runs five pytest processes side by side): the suite's CPU is
    their sum, its wall time the longest."""
    docs = [json.loads(p.read_text()) for p in parts if p.is_file()]
    joined = {"what": docs[0]["what"] if docs else "", "budget_cpu_s": BUDGET_CPU_S,
              "parts": {d["part"] or "slurm": {"wall_s": d["wall_s"], "cpu_s": d["cpu_s"], "tests": len(d["tests"])}
                        for d in docs},
              "cpu_s": round(sum(d["cpu_s"] for d in docs), 1), "wall_s": max((d["wall_s"] for d in docs), default=0),
              "tests": {k: v for d in docs for k, v in d["tests"].items()},
              "fixtures": sorted((f for d in docs for f in d["fixtures"]), key=lambda f: -f["cpu_s"])}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(joined, indent=1) + "\n")
    return joined


if __name__ == "__main__":
    import sys

    if len(sys.argv) < 3 or sys.argv[1] != "join":
        sys.exit("usage: python -m tests.suite_profile join OUT.json PROFILE.json...")
    done = join(Path(sys.argv[2]), [Path(a) for a in sys.argv[3:]])
    print(f"the suite's profile: {done['cpu_s']:.0f} CPU-s (the pytest processes and what they waited for; the test "
          f"cluster's jobs are slurmd's, not counted) over {done['wall_s']:.0f} s; per test and per fixture in "
          f"{sys.argv[2]}")
