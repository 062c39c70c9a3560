"""`workshop diagnose` on an NCCL timeout runs PyTorch's flight-recorder analyser (torchfrtrace) on the
job's dumps and names the first mismatched collective and the rank at fault (issue #35, item 4); the
gloo path keeps the log's diagnosis. The dumps: tests/fixtures/flight_recorder/README.md."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from workshop.results.diagnose import diagnose

FIXTURES = Path(__file__).with_name("fixtures")


@pytest.mark.slow   # runs torchfrtrace, a process
def test_an_nccl_timeout_with_dumps_names_the_first_mismatched_collective(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(FIXTURES / "flight_recorder" / "nccl_timeout", job)
    shutil.copy(FIXTURES / "logs" / "nccl_watchdog.log", job / "job.out")
    [finding] = [f for f in diagnose(job / "job.out") if f.kind == "nccl_timeout"]
    first = finding.facts["flight_recorder"]["first_error"]
    # by hand from make_dump.py: sequence 1 matched; sequence 2 is rank 0's all_reduce, rank 1 broadcast
    assert (first["seq"], first["collective"], first["group"]) == (2, "gloo:all_reduce", "0:default_pg")
    assert first["missing_ranks"] == [1] and "COLLECTIVE_TYPE_MISMATCH" in first["error"]
    assert "first mismatched collective is #2 gloo:all_reduce in group 0:default_pg, missing rank(s) 1" in finding.title


def test_without_dumps_the_timeout_is_diagnosed_from_the_log_alone(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "logs" / "nccl_watchdog.log", tmp_path / "job.out")
    [finding] = [f for f in diagnose(tmp_path / "job.out") if f.kind == "nccl_timeout"]
    assert "flight_recorder" not in finding.facts and "flight recorder" not in finding.title
