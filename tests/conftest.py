"""Shared fixtures: real training runs (tests/runs.py), made once per session."""

from __future__ import annotations

import pytest

from tests.runs import RunCache


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> RunCache:
    return RunCache(tmp_path_factory.mktemp("runs"))
