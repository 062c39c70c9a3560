"""Shared fixtures: real training runs (tests/runs.py), made once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runs import RunCache


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> RunCache:
    return RunCache(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="session")
def course_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The main job: every solution notebook executed with papermill on the local backend."""
    from workshop.course import main

    out = tmp_path_factory.mktemp("course") / "results"
    assert main(["--output", str(out), "--profile", "local"]) == 0
    return out
