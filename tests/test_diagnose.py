"""`workshop diagnose` names the cause, quotes the evidence and says the one thing to change."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.logs_fixtures import LOGS, REAL_LOG, REAL_RUN
from workshop.results.diagnose import diagnose, main
from workshop.results.logs import parse_text


def kinds(name: str) -> list[str]:
    return [f.kind for f in diagnose(LOGS / name)]


def test_cuda_oom_with_numbers_step_and_fix() -> None:
    (f,) = diagnose(LOGS / "cuda_oom.log")
    assert f.kind == "cuda_oom"
    assert f.facts["tried_gib"] == 3.83 and f.facts["total_gib"] == 79.19 and f.facts["allocated_gib"] == 73.52
    assert f.facts["last_step"] == 2 and "step 3" in f.title and "rank 0" in f.title
    assert "batch_size" in f.fix and "grad_acc" in f.fix and "full_shard" in f.fix
    assert "Tried to allocate 3.83 GiB" in f.evidence[0]


def test_oom_fix_names_half_the_batch_when_the_log_knows_it() -> None:
    text = (LOGS / "cuda_oom_legacy.log").read_text() + "\nsubmitted with --batch-size 16\n"
    (f,) = diagnose(parse_text(text))
    assert "batch_size to 8" in f.fix
    assert f.facts["total_gib"] == 15.78 and f.facts["last_step"] == 1


@pytest.mark.parametrize(("name", "kind"), [
    ("nccl_watchdog.log", "nccl_timeout"),
    ("nccl_error.log", "nccl_error"),
    ("rendezvous_failure.log", "rendezvous"),
    ("slurm_timeout.log", "time_limit"),
    ("slurm_cancelled.log", "cancelled"),
    ("slurm_node_failure.log", "node_failure"),
    ("slurm_oom_kill.log", "host_oom"),
    ("hub_offline.log", "hub_offline"),
    ("config_error.log", "config_error"),
])
def test_each_failure_gets_its_own_finding(name: str, kind: str) -> None:
    found = diagnose(LOGS / name)
    assert found[0].kind == kind, [f.title for f in found]
    assert found[0].evidence and found[0].fix and "\n" not in found[0].fix


def test_config_error_names_the_field_and_its_fix() -> None:
    (f,) = diagnose(LOGS / "config_error.log")
    assert f.facts["field"] == "batch_size" and "grad_acc" in f.fix
    printed = parse_text("error: config field 'sharding': unknown strategy 'fulll'. Fix: choose one of none, ddp\n")
    (g,) = diagnose(printed)
    assert g.kind == "config_error" and g.fix == "choose one of none, ddp"


def test_plain_traceback_reports_last_frame_and_message() -> None:
    text = ("Traceback (most recent call last):\n  File \"a.py\", line 3, in <module>\n    f()\n"
            "  File \"b.py\", line 9, in f\n    1 / 0\nZeroDivisionError: division by zero\n")
    (f,) = diagnose(parse_text(text))
    assert f.kind == "traceback" and "division by zero" in f.title
    assert 'File "b.py", line 9, in f' in f.evidence[0]


def test_bandwidth_gate_failure() -> None:
    text = (LOGS / "nccl_tests_all_reduce_perf.log").read_text() + "FAIL: bus bandwidth 11.03 GB/s is below the 20 GB/s gate\n"
    assert [f.kind for f in diagnose(parse_text(text))] == ["bandwidth_gate"]


def test_real_bandwidth_gate_failure_is_one_finding() -> None:
    (f,) = diagnose(LOGS / "real_bandwidth_gate_failed_2proc.log")  # not also a ChildFailedError traceback
    assert f.kind == "bandwidth_gate" and "NCCL_SOCKET_IFNAME" in f.fix
    missing_node = parse_text("# FAILED: expected 2 node(s), but the ranks ran on 1 host(s) (n1)\n")
    assert "--nnodes" in diagnose(missing_node)[0].fix
    assert diagnose(LOGS / "real_bandwidth_pass_2proc.log") == []


def test_successful_runs_exit_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert diagnose(REAL_LOG) == [] and diagnose(REAL_RUN) == []
    assert main([str(REAL_LOG)]) == 0
    assert main([str(LOGS / "nccl_tests_all_reduce_perf.log")]) == 0
    assert main([str(LOGS / "cuda_oom.log")]) == 1
    assert "change:" in capsys.readouterr().out


def test_truncated_log_is_unfinished() -> None:
    text = REAL_LOG.read_text()
    (f,) = diagnose(parse_text(text[: len(text) // 2]))
    assert f.kind == "unfinished"


def test_missing_file_exits_2() -> None:
    assert main(["/nonexistent/job.out"]) == 2


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=500))
def test_diagnose_never_crashes(text: str) -> None:
    diagnose(parse_text("Traceback (most recent call last):\n" + text))


@pytest.mark.slow
def test_a_real_run_diagnoses_clean(runs) -> None:  # noqa: ANN001
    run = runs.get("--sharding", "full_shard", nproc=2, torchrun=True)   # torchrun's own lines in the log too
    assert diagnose(run.out_dir) == [] and main([str(run.out_dir / "job.log")]) == 0
