"""Test data for the log/table/diagnose/memory tests: the committed fixtures (see fixtures/logs/README.md).

Real runs come from the session's shared `runs` fixture (tests/conftest.py, tests/runs.py), so a
slow test here reuses the run another test already made instead of training again.
"""

from __future__ import annotations

from pathlib import Path

LOGS = Path(__file__).parent / "fixtures" / "logs"
RUNS = Path(__file__).parent / "fixtures" / "runs"
REAL_LOG = LOGS / "real_tiny_full_shard_2proc.log"
REAL_RUN = RUNS / "tiny_full_shard_2proc"


def fixture_text(name: str) -> str:
    return (LOGS / name).read_text()
