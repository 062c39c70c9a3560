"""`workshop diagnose` on an NCCL timeout runs PyTorch's flight-recorder analyser (torchfrtrace) on the
job's dumps and names the first mismatched collective and the rank at fault (issue #35, item 4); the
gloo path keeps the log's diagnosis. The dumps: tests/fixtures/flight_recorder/README.md."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import workshop.results.diagnose as diagnose_module
from workshop.results.diagnose import diagnose, flight_recorder_dir, read_torchfrtrace
from workshop.results.logs import load, parse_text

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


# ---------------------------------------------------------------- the analyser's report, read (no process started)
REPORT = (FIXTURES / "flight_recorder" / "nccl_timeout.torchfrtrace.txt").read_text()
ERROR_LINE = ("error msg: Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH, Expected collective type: "
              "'all_reduce' does not match found collective type: 'broadcast'")


def test_the_recorded_report_names_the_first_mismatch_and_its_culprit() -> None:
    """torchfrtrace's own output on the committed dumps: sequence 2, the collective, its group, the error line and
    the culprit rank as the missing one (the report lists no `missing ranks` line for a type mismatch)."""
    report = read_torchfrtrace(REPORT, 0)
    first = report["first_error"]
    assert (first["seq"], first["collective"], first["group"]) == (2, "gloo:all_reduce", "0:default_pg")
    assert first["error"] == ERROR_LINE.removeprefix("error msg: ") and first["missing_ranks"] == [1]
    assert first["lines"] == [ln for ln in REPORT.splitlines()[1:] if ln.strip()][:8]
    assert first["lines"][0] == "Collective sequence number: 2 has errors"
    assert report["returncode"] == 0 and report["output_tail"] == REPORT and "error" not in report


def test_a_missing_ranks_line_names_every_missing_rank() -> None:
    """torch logs `missing ranks: {…}` (flight_recorder/components/types.py) when ranks never scheduled the
    collective: those ranks are the ones named, not the culprit of the error line."""
    text = REPORT.replace("collective: gloo:all_reduce\n", "collective: gloo:all_reduce\nmissing ranks: {1, 3}\n")
    assert read_torchfrtrace(text, 0)["first_error"]["missing_ranks"] == [1, 3]
    assert read_torchfrtrace(text.replace("{1, 3}", "[2]"), 0)["first_error"]["missing_ranks"] == [2]


def test_only_the_first_mismatch_is_read() -> None:
    """A report of several mismatched collectives: the first is the one that hung the job; the block ends where
    the next begins."""
    second = REPORT[REPORT.index("Collective sequence"):].replace("number: 2", "number: 5").replace("rank 1;", "rank 0;")
    first = read_torchfrtrace(REPORT + second, 0)["first_error"]
    assert first["seq"] == 2 and first["missing_ranks"] == [1]
    assert not any("number: 5" in ln for ln in first["lines"])


def test_a_report_without_a_mismatch_is_no_finding_unless_the_analyser_failed() -> None:
    """Clean dumps (exit 0) add nothing; a failed analyser (KeyError on gloo's group names, torch 2.13) says how it
    failed in its last line, and an analyser that printed nothing says so."""
    clean = read_torchfrtrace("tabulate is not installed. Proceeding without it.\n", 0)
    assert clean == {"returncode": 0, "output_tail": "tabulate is not installed. Proceeding without it.\n"}
    failed = read_torchfrtrace("Traceback (most recent call last):\n  ...\nKeyError: ('0', 0)\n", 1)
    assert failed["error"] == "torchfrtrace exited 1: KeyError: ('0', 0)" and "first_error" not in failed
    assert read_torchfrtrace("", 2)["error"] == "torchfrtrace exited 2: (no output)"
    long = read_torchfrtrace("x" * 5000, 1)          # what is kept of a long output: its end, its last line's start
    assert long["output_tail"] == "x" * 4000 and long["error"] == "torchfrtrace exited 1: " + "x" * 300


def test_the_dumps_are_found_beside_the_log_or_in_its_run_folder(tmp_path: Path) -> None:
    """rank_<N> files in flight_recorder/ next to the log, or one folder up (a log inside the run folder); a folder
    without rank files, or a log given as text, has none."""
    log = tmp_path / "job" / "run" / "job.out"
    log.parent.mkdir(parents=True)
    log.write_text("x\n")
    assert flight_recorder_dir(load(log)) is None
    up = tmp_path / "job" / "flight_recorder"
    up.mkdir()
    assert flight_recorder_dir(load(log)) is None                 # an empty folder: NCCL dumped nothing
    (up / "rank_0").write_bytes(b"")
    assert flight_recorder_dir(load(log)) == up
    here = log.parent / "flight_recorder"
    here.mkdir()
    (here / "rank_1").write_bytes(b"")
    assert flight_recorder_dir(load(log)) == here and flight_recorder_dir(load(log.parent)) == here
    assert flight_recorder_dir(parse_text("x\n")) is None


def test_a_log_given_as_text_has_no_dumps_even_beside_the_working_directory(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Text has no folder: dumps in the folder the command runs in belong to some other job."""
    (tmp_path / "flight_recorder").mkdir()
    (tmp_path / "flight_recorder" / "rank_0").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert flight_recorder_dir(parse_text("x\n")) is None


def test_the_timeout_finding_carries_the_analysers_first_mismatch(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """With dumps beside an NCCL timeout's log, the finding's title names the mismatched collective and the
    missing rank, and quotes the report; the analyser's run is replaced by its recorded report."""
    job = tmp_path / "job"
    shutil.copytree(FIXTURES / "flight_recorder" / "nccl_timeout", job)
    shutil.copy(FIXTURES / "logs" / "nccl_watchdog.log", job / "job.out")
    seen: list[Path] = []
    monkeypatch.setattr(diagnose_module, "analyse_flight_recorder",
                        lambda folder: seen.append(folder) or read_torchfrtrace(REPORT, 0))
    [finding] = [f for f in diagnose(job / "job.out") if f.kind == "nccl_timeout"]
    assert seen == [job / "flight_recorder"]
    assert finding.title == ("A collective timed out after 600 s in _ALLGATHER_BASE at step 13: rank 1 waited for a "
                             f"rank that never joined. PyTorch's flight recorder (torchfrtrace on "
                             f"{job / 'flight_recorder'}): the first mismatched collective is #2 gloo:all_reduce in "
                             "group 0:default_pg, missing rank(s) 1")
    assert finding.evidence[2:] == [ln for ln in REPORT.splitlines()[1:] if ln.strip()][:4]
    assert finding.facts["flight_recorder"] == read_torchfrtrace(REPORT, 0)


def test_an_analyser_that_failed_is_quoted_as_evidence(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """When torchfrtrace fails, the log's own diagnosis stands and the evidence says why the analyser did not
    help; a report without a missing rank names none."""
    job = tmp_path / "job"
    shutil.copytree(FIXTURES / "flight_recorder" / "nccl_timeout", job)
    shutil.copy(FIXTURES / "logs" / "nccl_watchdog.log", job / "job.out")
    monkeypatch.setattr(diagnose_module, "analyse_flight_recorder", lambda folder: {"error": "torchfrtrace exited 1"})
    [finding] = [f for f in diagnose(job / "job.out") if f.kind == "nccl_timeout"]
    assert finding.evidence[-1] == "flight recorder: torchfrtrace exited 1" and "flight recorder" not in finding.title
    no_culprit = REPORT.replace("Culprit rank 1; ", "")
    monkeypatch.setattr(diagnose_module, "analyse_flight_recorder", lambda folder: read_torchfrtrace(no_culprit, 0))
    [finding] = [f for f in diagnose(job / "job.out") if f.kind == "nccl_timeout"]
    assert finding.title.endswith("in group 0:default_pg")
    two = REPORT.replace("collective: gloo:all_reduce\n", "collective: gloo:all_reduce\nmissing ranks: {1, 3}\n")
    monkeypatch.setattr(diagnose_module, "analyse_flight_recorder", lambda folder: read_torchfrtrace(two, 0))
    [finding] = [f for f in diagnose(job / "job.out") if f.kind == "nccl_timeout"]
    assert finding.title.endswith("in group 0:default_pg, missing rank(s) 1, 3")
