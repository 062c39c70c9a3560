"""benchmarks/compat_report.py reads scripts/compat_check.sh's step logs into the dated report: the counts are
pytest's own (JUnit XML), a job that completed without measuring a feature is listed as not measured, and a
report with any failure or unmeasured job does not pass (the supported range rests on `passed`)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.compat_report import build, markdown

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1"
skipped="1" tests="4"><testcase classname="tests.test_a" name="test_one"/><testcase classname="tests.test_a"
name="test_two"/><testcase classname="tests.test_b" name="test_three"><failure message="AssertionError: 1 != 2">
trace</failure></testcase><testcase classname="tests.test_b" name="test_four"><skipped message="needs X"/>
</testcase></testsuite></testsuites>"""


def logs_and_results(tmp_path: Path, comm_second: str) -> tuple[Path, Path]:
    logs, results = tmp_path / "logs", tmp_path / "results"
    logs.mkdir()
    (logs / "fast_tier.xml").write_text(JUNIT)
    (logs / "fast_tier.status").write_text("1 200\n")
    (logs / "gpu_collect.status").write_text("0 30\n")
    (logs / "gpu_collect.log").write_text("...\n30 tests collected in 24.22s\n")
    (logs / "notebooks_02_03.status").write_text("0 500\n")
    (logs / "notebooks_02_03.log").write_text("[1/2] 02_x: done in 70 s, 4 job(s)\n[2/2] 03_y: done in 90 s, 6 job(s)\n")
    (logs / "versions.log").write_text(json.dumps([{"name": "torch", "version": "2.11.0+cu130"}]) + "\n")
    for job, comm in (("a-1", "measured"), ("b-2", comm_second)):
        run = results / "02_x" / "jobs" / job / "run"
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps({"status": "completed", "world_size": 2, "mem_kind": "tensor",
                                                      "sharding_applied": "full_shard",
                                                      "comm": {"status": comm, "reason": "why" if comm != "measured"
                                                               else None}}))
    return logs, results


def test_counts_are_pytests_and_a_failure_or_an_unmeasured_job_fails_the_report(tmp_path: Path) -> None:
    logs, results = logs_and_results(tmp_path, "not measured")
    report = build(logs, 0, ["torch==2.11.0"], results)
    fast = report["steps"]["fast_tier"]
    assert (fast["tests"], fast["passed"], fast["failed"], fast["skipped"]) == (4, 2, 1, 1)
    assert fast["failures"] == [{"test": "tests/test_b.py::test_three", "message": "AssertionError: 1 != 2"}]
    assert report["steps"]["gpu_collect"]["collected"] == 30
    assert report["steps"]["notebooks_02_03"]["notebooks"] == [("02_x", "done in 70 s, 4 job(s)"),
                                                               ("03_y", "done in 90 s, 6 job(s)")]
    assert report["versions"]["torch"] == "2.11.0+cu130"
    assert [j["comm"] for j in report["jobs"]] == ["measured", "not measured"]
    assert any("1 of the notebooks' 2 jobs" in n["what"] for n in report["not_measured"])
    assert report["passed"] is False
    text = markdown(report)
    assert "| fast_tier | 1 | 200 | 2 passed, 1 failed, 0 errors, 1 skipped of 4 |" in text
    assert "- `tests/test_b.py::test_three`: AssertionError: 1 != 2" in text


def test_every_step_clean_and_every_job_measured_passes(tmp_path: Path) -> None:
    logs, results = logs_and_results(tmp_path, "measured")
    (logs / "fast_tier.status").write_text("0 200\n")
    report = build(logs, 0, [], results)
    assert report["passed"] is True


def test_an_environment_that_does_not_build_measures_nothing(tmp_path: Path) -> None:
    (tmp_path / "build.log").write_text("ERROR: No matching distribution found for torch==2.11.0\n")
    report = build(tmp_path, 1, ["torch==2.11.0"])
    assert report["steps"] == {} and "passed" not in report
    assert report["not_measured"][0]["what"] == "every step" and "pip exit 1" in report["not_measured"][0]["why"]
    assert "No matching distribution" in report["build"]["log_tail"]
