"""The line a student reads beside a job's state (issue 40, deliverable 4), on real logs made here: a
local-backend baseline job (profiler notes, records, end stamp at its end), a 2-process run refused by
its config, the bandwidth gate's real failure. The expected lines were read off the files by hand."""

from __future__ import annotations

from pathlib import Path

import workshop.results  # noqa: F401  (registers diagnose's titles for failed jobs)
from workshop.slurm.log_line import failure_line, last_meaningful_line
from workshop.slurm.pending import explain, pending_words

LOGS = Path(__file__).parent / "fixtures" / "logs"


def test_a_finished_jobs_last_line_is_its_last_step_not_its_records() -> None:
    text = (LOGS / "real_baseline_local_job.log").read_text()
    # the file ends: params_local, WORKSHOP_SUMMARY, WORKSHOP_DIGEST, [job] end; before them Trainer dicts
    assert text.rstrip().splitlines()[-1].startswith("[job] end ")
    assert last_meaningful_line(text) == ("[workshop] step 24/24 | loss 4.0450 | 12.118 samples/s | 2696 tok/s | "
                                          "mem 19.4 MB | rss 462 MB | mfu n/a")


def test_profiler_notes_are_never_the_last_line() -> None:
    lines = (LOGS / "real_baseline_local_job.log").read_text().splitlines()
    upto_profiler = "\n".join(lines[:13])          # line 13 is kineto's `USDT:... profiler_stop`
    assert "SyncActivityProfilerHandler" in lines[12]
    assert last_meaningful_line(upto_profiler) == ("[workshop] step 2/24 | loss 7.0077 | 5.563 samples/s | "
                                                   "1271 tok/s | mem 19.4 MB | rss 451 MB | mfu n/a")


def test_a_config_error_shows_diagnoses_title_not_torchruns_report() -> None:
    log = LOGS / "real_config_error_2proc.log"
    # the last readable line of the file is torchrun's report, which says nothing of the cause
    assert last_meaningful_line(log.read_text()).startswith("traceback : To enable traceback see")
    assert failure_line(log) == "Config error in field 'batch_size': must be >= 1, got 0"


def test_a_failed_gate_shows_one_line_and_the_jobs_own_error_when_diagnose_has_none(tmp_path: Path) -> None:
    gate = LOGS / "real_bandwidth_gate_failed_2proc.log"
    assert failure_line(gate) == "The bandwidth self-test is below its threshold: training would run, but slowly"
    plain = tmp_path / "slurm-9.out"
    plain.write_text("[job] start 2026-11-28T01:00:00+00:00 on n1\nsomething odd\n")
    assert failure_line(plain, "ValueError: no such partition") == "ValueError: no such partition"
    assert failure_line(tmp_path / "missing.out") == ""


def test_a_tqdm_redraw_gives_its_last_state_and_long_lines_are_shortened() -> None:
    assert last_meaningful_line("a\n 10%|#  | 1/10\r 50%|#####  | 5/10\n") == "50%|##### | 5/10"
    long = last_meaningful_line("x" * 500)
    assert len(long) == 160 and long.endswith("…")


def test_pending_reasons_in_a_students_words() -> None:
    assert pending_words("Resources").startswith("waiting for free nodes")
    assert explain("Resources").clears and explain("Priority").clears
    # a wait that does not end by itself says what to do
    held = explain("ReqNodeNotAvail, UnavailableNodes:n2")
    assert held is not None and not held.clears and held.reason == "ReqNodeNotAvail, UnavailableNodes:n2"
    assert "cancel" in str(held) and "instructor" in str(held)
    assert "QOSMaxJobsPerUser" in pending_words("QOSMaxJobsPerUser")
    assert "cancel" in pending_words("DependencyNeverSatisfied")
    assert pending_words("QOSGrpCpuLimit").startswith("the class's share")      # longest prefix: QOSGrp
    assert pending_words("None") == "" and pending_words("") == ""
    assert "squeue" in pending_words("SomethingNew")


def test_the_class_view_says_why_a_students_job_waits() -> None:
    from workshop.grading.classview import ClassJob, ClassView
    from workshop.slurm.records import JobState

    view = ClassView(jobs=[ClassJob("41", "ana", "multi_node", JobState.PENDING, "PENDING", "0:0", "/w", reason="Resources"),
                           ClassJob("42", "bo", "multi_node", JobState.PENDING, "PENDING", "0:0", "/w",
                                    reason="ReqNodeNotAvail, UnavailableNodes:n2"),
                           ClassJob("43", "bo", "baseline", JobState.COMPLETED, "COMPLETED", "0:0", "/w")],
                     selection="account fsdp-class")
    table = view.table()
    assert table.loc["ana", "multi_node"] == "wait"
    assert table.attrs["waiting"][0].startswith("ana multi_node job 41 PENDING: waiting for free nodes")
    assert "instructor" in table.attrs["waiting"][1] and "(ReqNodeNotAvail, UnavailableNodes:n2)" in table.attrs["waiting"][1]
    assert "waiting jobs:\n  ana multi_node job 41 PENDING: " in view.text()


def test_a_two_node_runs_rendezvous_shutdown_trace_after_its_records_is_not_the_last_line() -> None:
    text = (LOGS / "real_two_node_job_shutdown_trace.log").read_text()
    # after WORKSHOP_DIGEST: torch's TCPStore warning, 20-odd C++ frames, the rendezvous warning, [job] end
    assert "failed to shutdown the rendezvous" in text.rstrip().splitlines()[-2]
    assert last_meaningful_line(text) == ("[workshop] saved checkpoint-6 in "
                                          "/tmp/fsdp-workshop-root/checkpoints/multi_node-7ae6d7de13-1923e93c")
