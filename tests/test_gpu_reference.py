"""Beside a table of CPU runs, one line: the same run on a GPU, from the newest committed bench result
(issue #34, deliverable 4). Absent, and nothing fails, when no result exists or one cannot be read.

The results folders here are written by the test in the shape `workshop bench` writes (tests/test_bench.py holds
that shape to the real bench); the runs are the committed logs of real CPU jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.logs_fixtures import LOGS
from workshop.bench import gpu_reference
from workshop.bench.configs import PEER

CPU_LOG = LOGS / "real_baseline_local_job.log"


def row(name: str, sps: float, peak: float, vs_loop: float | None, status: str = "completed") -> dict:
    return {"name": name, "status": status, "samples_per_s": sps, "peak_mem_mb": peak, "vs_plain_loop": vs_loop}


def write_result(folder: Path, stem: str, device_name: str, created_at: str, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    path.write_text(json.dumps({"device": "cuda", "device_name": device_name, "date": created_at[:10],
                                "created_at": created_at, "model": "bloom-560m-random", "batch_size": 32,
                                "configs": rows}))
    return path


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """Two GPU results, the H200 one newer, and a file that is not one."""
    folder = tmp_path / "benchmarks" / "results"
    write_result(folder, "2026-12-01-nvidia-h100", "NVIDIA H100 80GB HBM3", "2026-12-01T10:00:00+00:00",
                 [row("baseline", 300.0, 9000.0, 0.9)])
    write_result(folder, "2026-12-02-nvidia-h200", "NVIDIA H200", "2026-12-02T09:00:00+00:00",
                 [row("baseline", 412.34, 14204.4, 0.93), row(PEER, 443.4, 14100.0, 1.0),
                  row("full_shard", 380.0, 12000.0, 0.857), row("offload", 0.0, 0.0, None, status="failed")])
    (folder / "2026-12-02-nvidia-h200-tests.json").write_text("not json")
    return folder


def test_each_table_gets_its_configurations_from_the_newest_result(results: Path) -> None:
    said = gpu_reference.line("baseline", results)
    assert said == ("the same run on NVIDIA H200, measured 2026-12-02 (BLOOM-560M shapes, batch 32; "
                    "benchmarks/results/2026-12-02-nvidia-h200.md): baseline 412.3 samples/s (0.93x a plain "
                    "PyTorch loop), peak 14,204 MB")
    fsdp = gpu_reference.line("fsdp", results)
    assert "baseline 412.3 samples/s" in fsdp and fsdp.endswith("full_shard 380.0 samples/s (0.86x a plain PyTorch "
                                                               "loop), peak 12,000 MB")
    # a failed configuration is left out, not shown as 0
    assert gpu_reference.line("strategies", results).count("samples/s") == 1
    assert "offload" not in gpu_reference.line("strategies", results)
    assert "full_shard 380.0" in gpu_reference.line("scaling", results)


def test_no_result_no_line_and_nothing_fails(tmp_path: Path) -> None:
    assert gpu_reference.line("baseline", tmp_path / "absent") is None
    empty = tmp_path / "benchmarks" / "results"
    empty.mkdir(parents=True)
    assert gpu_reference.line("baseline", empty) is None
    (empty / "broken.json").write_text("{")
    (empty / "cpu.json").write_text(json.dumps({"device": "cpu", "configs": []}))
    (empty / "odd.json").write_text(json.dumps({"device": "cuda", "configs": [{"name": "baseline"}]}))
    assert gpu_reference.line("baseline", empty) is None
    assert gpu_reference.line("unknown-kind", empty) is None


def test_the_lab_prints_the_line_under_a_table_of_cpu_runs(results: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from workshop.student.lab import Lab

    lab = Lab("local", jobs_dir=tmp_path / "jobs")
    capsys.readouterr()
    monkeypatch.setattr(gpu_reference, "RESULTS_DIR", results)
    table = lab.table("baseline", [CPU_LOG])
    assert len(table) == 1                                  # the table itself is the student's runs only
    assert "the same run on NVIDIA H200, measured 2026-12-02" in capsys.readouterr().out
    monkeypatch.setattr(gpu_reference, "RESULTS_DIR", tmp_path / "none")
    lab.table("baseline", [CPU_LOG])
    assert "the same run on" not in capsys.readouterr().out

