"""The fast tier (`make test-fast`): which tests start no process, so that the inner loop takes minutes.

A test is *not* fast when it needs the Slurm test cluster, a GPU, an executed course, a training run or any
other process: by marker (`slurm`, `slow`, `gpu`), by folder (tests/slurm, tests/gpu), by fixture (`runs`,
`course_run`, the cluster), or because its code reaches something that starts a process (`subprocess`,
`multiprocessing`, papermill, a Jupyter kernel, tests/runs.py's launchers, workshop's local backend ...).
The reach is read from the code itself at collection (the names a function uses, followed through the
functions and fixtures of tests/ and workshop/ they name), so a new test is classified without anyone
remembering to mark it. tests/conftest.py gives every other test the marker `fast`: `pytest -m fast`.

Reading code cannot follow everything (a method called on an object, a callback): at run time a fast test
that starts a process anyway fails and says so (`ProcessGuard`), and the way out is the `slow` marker.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
import types
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parent.parent
SLOW_MARKERS = ("slurm", "slow", "gpu")
SLOW_FOLDERS = (ROOT / "tests" / "slurm", ROOT / "tests" / "gpu")
# fixtures that are a training run, an executed course or the test cluster (each starts processes)
SLOW_FIXTURES = frozenset({"runs", "course_run", "slurm_cluster", "cluster"})
# modules whose use starts a process: a name bound to one of these in a test's reach makes it not fast
LAUNCHING_MODULES = frozenset({
    "subprocess", "multiprocessing", "torch.multiprocessing", "concurrent.futures.process", "papermill",
    "nbclient", "jupyter_client", "pexpect", "torch.distributed.run", "torch.distributed.launcher",
    "nbgrader.apps", "nbgrader.apps.api",
})
# a name importing one of these inside a function (`import papermill`) makes it not fast
LAUNCHING_ROOTS = frozenset({"subprocess", "multiprocessing", "papermill", "nbclient", "jupyter_client", "pexpect"})
# functions and classes that start a process without importing one of the modules above under that name
LAUNCHING_OBJECTS = frozenset({
    "os.system", "os.popen", "os.fork", "os.spawnv", "os.execv", "os.posix_spawn", "nbgrader.apps.api.NbGraderAPI",
    "papermill.execute.execute_notebook",
    # workshop's entry points that start a job, a course run or a benchmark (each reaches a process deep inside)
    "workshop.slurm.jobs.submit", "workshop.slurm.group.submit_all",
    "workshop.slurm.local_backend.submit", "workshop.slurm.slurm_backend.submit", "workshop.bench.harness.main",
    "workshop.bench.harness.run_bench", "workshop.grading.run_all.main", "workshop.grading.run_all.run_notebook",
    "workshop.grading.release.generate",
})
# only code of these trees is read further (the standard library and torch are judged by the lists above)
READ_INTO = (ROOT / "tests", ROOT / "workshop")
MAX_DEPTH = 8


def _qualname(obj: Any) -> str:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', getattr(obj, '__name__', ''))}"


def _ours(obj: Any) -> bool:
    try:
        path = Path(inspect.getfile(obj)).resolve()
    except (TypeError, OSError):
        return False
    return any(path.is_relative_to(top) for top in READ_INTO)


def _codes(code: types.CodeType) -> list[types.CodeType]:
    """A function's code and every code nested in it (lambdas, inner functions, comprehensions)."""
    out = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out += _codes(const)
    return out


def _launcher(obj: Any) -> str | None:
    obj = inspect.unwrap(obj) if inspect.isfunction(obj) else obj
    if isinstance(obj, types.ModuleType):
        name = obj.__name__
        return name if name in LAUNCHING_MODULES or name.split(".")[0] in ("subprocess", "papermill") else None
    name = _qualname(obj)
    if name in LAUNCHING_OBJECTS:
        return name
    module = getattr(obj, "__module__", "") or ""
    return module if module in LAUNCHING_MODULES else None


@functools.lru_cache(maxsize=None)
def _reach(obj: Any, depth: int = 0, inside: int = 0) -> str | None:
    """What `obj` (a function or class of tests/ or workshop/) starts a process through, or None.

    tests/ code is read to any depth; workshop/ code only one level in (`inside`): the function a test calls
    is read, not what that calls, because workshop's modules reach a launcher through branches a test never
    takes (verify reads `sacct` only for Slurm jobs). workshop's entry points that start jobs are named in
    LAUNCHING_OBJECTS instead, and the run-time guard catches what both miss."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(obj, type):
        for member in vars(obj).values():
            member = getattr(member, "__func__", member)
            if isinstance(member, property):
                member = member.fget
            if inspect.isfunction(member) and (why := _reach(member, depth + 1, inside)):
                return f"{obj.__qualname__} -> {why}"
        return None
    func = inspect.unwrap(obj) if callable(obj) else obj
    if not inspect.isfunction(func):
        return None
    scope = {**func.__globals__, **{k: c.cell_contents for k, c in zip(func.__code__.co_freevars,
                                                                         func.__closure__ or ()) if _filled(c)}}
    for code in _codes(func.__code__):
        names = (*code.co_names, *code.co_freevars)
        for name in names:
            if name.split(".")[0] in LAUNCHING_ROOTS or name in LAUNCHING_MODULES:     # an import inside the function
                return name
            if name in scope:
                target = scope[name]
            elif name.split(".")[0] in ("workshop", "tests") and (module := _module(name)) is not None:
                target = module                         # `from workshop.slurm import submit` inside the function
            else:
                continue
            if (why := _launcher(target)) is not None:
                return why
            if isinstance(target, types.ModuleType) and _ours(target):
                # `local_backend.submit(...)`: the attributes this code reads of a module of ours
                for attr in names:
                    member = getattr(target, attr, None)
                    if (why := _launcher(member) if member is not None else None) is not None:
                        return why
                    if (why := _follow(member, depth, inside)) is not None:
                        return f"{name}.{attr} -> {why}"
            elif target is not func and (why := _follow(target, depth, inside)) is not None:
                return f"{name} -> {why}"
    return None


def _follow(target: Any, depth: int, inside: int) -> str | None:
    if not (inspect.isfunction(target) or isinstance(target, type)) or not _ours(target):
        return None
    workshop = Path(inspect.getfile(target)).resolve().is_relative_to(ROOT / "workshop")
    if workshop and inside >= 1:
        return None
    return _reach(target, depth + 1, inside + workshop)


def _module(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def slow_reason(item: pytest.Item) -> str | None:
    """Why `item` is not in the fast tier, or None when it is."""
    for marker in SLOW_MARKERS:
        if item.get_closest_marker(marker) is not None:
            return f"marker {marker}"
    path = Path(str(item.path)).resolve()
    for folder in SLOW_FOLDERS:
        if path.is_relative_to(folder):
            return f"in {folder.relative_to(ROOT)}"
    names = set(getattr(item, "fixturenames", ()))
    if hit := sorted(names & SLOW_FIXTURES):
        return f"fixture {hit[0]}"
    info = getattr(item, "_fixtureinfo", None)
    for name in sorted(names):
        for fixdef in (info.name2fixturedefs.get(name, ()) if info else ()):
            if _ours(fixdef.func) and (why := _reach(fixdef.func)):
                return f"fixture {name}: {why}"
    function = getattr(item, "function", None)
    if function is not None and (why := _reach(function)):
        return why
    return None


class ProcessGuard:
    """At run time, a test of the fast tier that starts a process fails, naming the command: the reading of
    the code missed it, and the test belongs with the others (mark it `slow`). Python's audit events see every
    process start (subprocess, os.fork, os.posix_spawn, os.system) without changing how one runs."""

    EVENTS = ("subprocess.Popen", "os.fork", "os.posix_spawn", "os.spawn", "os.system", "os.exec")

    def __init__(self) -> None:
        self.active = False
        self.pid = os.getpid()
        self.started: list[str] = []
        sys.addaudithook(self._hook)

    # quick local tools, not jobs: platform.processor() runs `uname -p`, a report reads the commit from git, and
    # verify expands a Slurm host list with `scontrol show hostnames` (no controller asked)
    ALLOWED = frozenset({("git",), ("uname",), ("scontrol", "show", "hostnames")})

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.active and event in self.EVENTS and os.getpid() == self.pid and not self._allowed(event, args):
            self.started.append(f"{event} {_argv(event, args)}")

    def _allowed(self, event: str, args: tuple[Any, ...]) -> bool:
        argv = args[1] if event == "subprocess.Popen" and len(args) > 1 else None
        if isinstance(argv, (list, tuple)) and argv:
            words = (Path(str(argv[0])).name, *map(str, argv[1:]))
            return any(words[:len(allowed)] == allowed for allowed in self.ALLOWED)
        return False

    def watch(self) -> None:
        self.pid, self.active, self.started = os.getpid(), True, []

    def stop(self) -> list[str]:
        self.active = False
        return self.started


def _argv(event: str, args: tuple[Any, ...]) -> str:
    if event == "subprocess.Popen" and len(args) > 1:
        argv = args[1]
        return " ".join(map(str, argv)) if isinstance(argv, (list, tuple)) else str(argv)
    return " ".join(map(str, args))[:200]


def failure(started: list[str]) -> str:
    return ("this test was classified fast (tests/tiers.py) but started a process: " + "; ".join(started[:3])
            + ". The fast tier is for tests that start none: mark it @pytest.mark.slow, or use the fixture that "
              "shares the run (`runs`, `course_run`).")


def classify(items: list[pytest.Item], mark: Callable[[pytest.Item], None]) -> None:
    for item in items:
        if slow_reason(item) is None:
            mark(item)
