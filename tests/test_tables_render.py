"""The exercise tables as the student reads them: rendered cells, the `workshop table` command's formats and
errors, and the speed notes beside a table naming each run as the reader knows it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from workshop.results import tables
from workshop.results.logs import parse_text

WINDOW = {"counted_steps": [[4, 8]], "excluded_steps": {"warmup": [1, 2], "tensor_memory": [3]}}


def timed_run(label: str, strategy: str, rates: list[float], table: float, window: dict = WINDOW) -> tables.ParsedLog:
    """A run whose steps 1-8 logged `rates` and whose summary says `table` samples/s over `window`."""
    lines = [f'WORKSHOP_METRICS {{"kind": "train", "step": {i + 1}, "loss": 5.0, "samples_per_s": {r}}}'
             for i, r in enumerate(rates)]
    summary = {"status": "completed", "sharding_applied": strategy, "train_samples_per_s": table,
               "throughput_window": window}
    return parse_text("\n".join([*lines, "WORKSHOP_SUMMARY " + json.dumps(summary)]) + "\n", label)


def test_cells_read_as_counts_rates_and_gaps() -> None:
    """Whole numbers without decimals (thousands grouped), other figures to 4 significant digits, a gap as NaN."""
    cells = [tables._cell(v) for v in (float("nan"), 2.0, 1234.0, -2048.0, 0.123456, 12.3456, 1234.5, 1e16, 7, "ok")]
    assert cells == ["NaN", "2", "1,234", "-2,048", "0.1235", "12.35", "1,234", "10,000,000,000,000,000", "7", "ok"]
    # thousands are grouped from 1,000 on, whole or not; below, up to 4 significant digits
    assert [tables._cell(v) for v in (1000.0, 1000.25, 999.0, 999.25)] == ["1,000", "1,000", "999", "999.2"]


def test_markdown_has_the_index_column_and_the_notes() -> None:
    df = pd.DataFrame({"samples_per_s": [1.5, 2.0]}, index=["a", "b"])
    df.attrs["notes"] = ["a: one note"]
    assert tables.to_markdown(df) == ("|  | samples_per_s |\n|---|---|\n| a | 1.5 |\n| b | 2 |\n\n- a: one note")
    df.index.name = "run"
    df.attrs["notes"] = []
    assert tables.to_markdown(df).splitlines() == ["| run | samples_per_s |", "|---|---|", "| a | 1.5 |", "| b | 2 |"]


def test_render_as_csv_json_or_markdown_and_nothing_else() -> None:
    df = pd.DataFrame({"samples_per_s": [1.5]}, index=pd.Index(["a"], name="run"))
    df.attrs["notes"] = ["a: one note"]
    assert tables.render(df, "csv") == "run,samples_per_s\na,1.5\n"
    assert json.loads(tables.render(df, "json")) == {"rows": [{"run": "a", "samples_per_s": 1.5}],
                                                     "notes": ["a: one note"]}
    assert tables.render(df, "json").startswith('{\n "rows": [\n  {\n   "run": "a",')     # one space per level
    assert tables.render(df) == tables.to_markdown(df)
    df.attrs.clear()                                                 # a frame made elsewhere, without notes
    assert json.loads(tables.render(df, "json"))["notes"] == [] and "- " not in tables.render(df)
    with pytest.raises(ValueError, match="unknown format 'html'"):
        tables.render(df, "html")


FS = [1, 1, 1, 18.0, 26.0, 21.0, 30.5, 24.0]        # full_shard's steps: 18.0-30.5 in the window, 22.7 in the table
OFF = [1, 1, 1, 25.0, 34.0, 22.0, 31.0, 36.0]       # offload's: 22.0-36.0, 29.8


def test_the_speed_notes_name_runs_by_label_else_strategy_else_place() -> None:
    """Step 3 judges each run's speed against full_shard's; two runs under one label are told apart by their
    strategy, and two of one strategy by their place in the table."""
    noise = "full_shard+offload vs full_shard: 29.8 vs 22.7 samples/s, each within the other run's own step-to-step"

    def second_note(a: tuple[str, str], b: tuple[str, str]) -> str:
        return tables.build("strategies", [timed_run(*a, FS, 22.7), timed_run(*b, OFF, 29.8)]).attrs["speed_notes"][1]

    assert second_note(("fs", "full_shard"), ("off", "full_shard+offload")).startswith(
        noise.replace("full_shard+offload vs full_shard", "off vs fs"))
    assert second_note(("job", "full_shard"), ("job", "full_shard+offload")).startswith(noise)
    assert second_note(("job", "full_shard"), ("job", "full_shard")).startswith(
        "run 2 (full_shard) vs run 1 (full_shard): 29.8 vs 22.7")


def test_step_2s_notes_judge_each_run_against_the_baseline() -> None:
    """--step fsdp: the first source is the baseline, every other run a row after it, judged against it."""
    fast = [1, 1, 1, 40.0, 44.0, 41.0, 45.0, 43.0]                  # every step faster than any of the baseline's
    df = tables.build("fsdp", [timed_run("base", "none", FS, 22.7), timed_run("a", "full_shard", fast, 42.6),
                               timed_run("b", "full_shard+offload", OFF, 29.8)])
    assert list(df.index) == ["base", "a", "b"]
    assert [n.split(":")[0] for n in df.attrs["speed_notes"][1:]] == ["b vs base"]


def test_runs_without_a_strategy_column_are_named_by_their_place() -> None:
    """The baseline table has no strategy: two runs under one label become run 1 and run 2."""
    other = {"counted_steps": [[5, 8]], "excluded_steps": {}}
    df = tables.build("baseline", [timed_run("job", "none", FS, 22.7), timed_run("job", "none", OFF, 29.8, other)])
    assert [n.split("; a log")[0] for n in df.attrs["speed_notes"]] == [
        "samples/s counts steps 4-8 (left out: warmup 1-2; tensor_memory 3) of run 1",
        "samples/s counts steps 5-8 of run 2"]


def test_the_table_command_says_what_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Missing files are named, all of them, bandwidth logs included; step 2 without an FSDP run says what it
    needs; a usage error starts with the command's own name."""
    log = tmp_path / "job.out"
    log.write_text('WORKSHOP_SUMMARY {"status": "completed", "train_samples_per_s": 4.0}\n')
    assert tables.main([str(log), "/no/a.out", "--bandwidth", "/no/bw.out"]) == 2
    assert capsys.readouterr().err == "workshop table: not found: /no/a.out, /no/bw.out\n"
    assert tables.main(["--step", "fsdp", str(log)]) == 2
    assert capsys.readouterr().err == ("workshop table: --step fsdp needs the baseline first, then at least one FSDP "
                                       "run\n")
    with pytest.raises(SystemExit):
        tables.main([str(log), "--step", "speed"])
    err = capsys.readouterr().err
    assert err.startswith("usage: workshop table ") and "invalid choice: 'speed'" in err
    with pytest.raises(SystemExit):
        tables.main([str(log), "--format", "html"])
    assert "argument --format: invalid choice: 'html'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tables.main([])                                             # at least one source
    assert "the following arguments are required: sources" in capsys.readouterr().err


def test_the_table_command_prints_the_step_asked_in_the_format_asked(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    base, fsdp = tmp_path / "base.out", tmp_path / "fsdp.out"
    for path, strategy, speed in ((base, "none", 10.0), (fsdp, "full_shard", 8.0)):
        path.write_text("WORKSHOP_SUMMARY " + json.dumps({"status": "completed", "sharding_applied": strategy,
                                                          "train_samples_per_s": speed}) + "\n")
    assert tables.main(["--step", "fsdp", str(base), str(fsdp), "--format", "csv"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].startswith("run,strategy,world_size,peak_mem_mb,") and rows[2].startswith("fsdp,full_shard,")
    assert float(rows[2].split(",")[7]) == pytest.approx(20.0)      # speed_cost_pct: 1 - 8 / 10
    assert tables.main([str(base)]) == 0                            # the baseline step, in markdown, unless told
    assert capsys.readouterr().out.startswith("| run | mean_train_loss | last_logged_loss |")


NCCL_LOG = Path(__file__).parent / "fixtures" / "logs" / "nccl_tests_all_reduce_perf.log"   # 4 ranks on 2 nodes


def test_step_5_takes_a_bandwidth_log_among_the_runs_as_bandwidth() -> None:
    """`workshop table --step multinode run.out bw.out`: a log with a bandwidth table and no summary is a bandwidth
    test, not a run; a run's row gets the figures of the test on its rank count."""
    two = parse_text('WORKSHOP_SUMMARY {"status": "completed", "world_size": 4, "nodes": 2, "global_batch": 8, '
                     '"train_samples_per_s": 15.0}\n', "2x2")
    df = tables.build("multinode", [two, NCCL_LOG])
    assert list(df.index) == ["2x2"] and df.loc["2x2", "avg_busbw_GBps"] == 11.0256
    assert tables.build("multinode", [two], [NCCL_LOG]).loc["2x2", "max_busbw_GBps"] == 26.34
    with pytest.raises(ValueError) as e:
        tables.build("speed", [two])
    assert str(e.value) == "unknown step 'speed'; choose one of baseline, fsdp, multinode, scaling, strategies"


def test_the_table_command_reads_bandwidth_logs_given_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "2x2.out"
    log.write_text('WORKSHOP_SUMMARY {"status": "completed", "world_size": 4, "nodes": 2, "train_samples_per_s": 15.0}\n')
    assert tables.main(["--step", "multinode", str(log), "--bandwidth", str(NCCL_LOG), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["avg_busbw_GBps"] == 11.0256


def test_step_5_keeps_every_run_whatever_else_its_log_holds() -> None:
    """A run whose job also measured bandwidth (a preflight) is a run; so is one that printed only the Trainer's
    dicts; only a log with a bandwidth table and no summary is a bandwidth test."""
    both = parse_text(NCCL_LOG.read_text() + 'WORKSHOP_SUMMARY {"status": "completed", "world_size": 4, "nodes": 2, '
                      '"train_samples_per_s": 15.0}\n', "preflighted")
    hf = parse_text("{'train_runtime': '10.0', 'train_samples_per_second': '8.0', 'train_loss': '5.5', "
                    "'epoch': '1.0'}\n", "hf")
    df = tables.build("multinode", [both, hf])
    assert list(df.index) == ["preflighted", "hf"]
    assert df.loc["preflighted", "samples_per_s"] == 15.0 and df.loc["hf", "samples_per_s"] == 8.0


def test_step_3_without_a_full_shard_run_has_no_reference_to_judge_by() -> None:
    df = tables.build("strategies", [timed_run("ddp", "ddp", FS, 22.7), timed_run("sgo", "shard_grad_op", OFF, 29.8)])
    assert len(df.attrs["speed_notes"]) == 1 and df.attrs["speed_notes"][0].startswith("samples/s counts steps 4-8")
    assert "no full_shard run given: the 'vs_full_shard' columns are NaN" in df.attrs["notes"]
