"""The log parser reads every format a course job prints, and never crashes on anything else."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.logs_fixtures import LOGS, REAL_LOG, REAL_RUN, fixture_text
from workshop.results.logs import load, parse_log, parse_text, parse_trainer_dict, read_run_dir, split_lines


def test_hf4_float_dicts_through_tqdm_and_srun_labels_count_once() -> None:
    log = parse_log(LOGS / "hf4_trainer_srun_label.log")
    # 8 optimizer steps, each printed by both nodes, inside tqdm redraws: 8 records, not 16.
    assert [r.values["loss"] for r in log.train_records] == [6.1845, 5.9123, 5.6012, 5.3371, 5.102, 4.9876,
                                                             4.8532, 4.7711]
    assert [r.values["eval_loss"] for r in log.eval_records] == [5.1, 4.7]
    assert [r.epoch for r in log.eval_records] == [1.0, 2.0]
    assert log.final_record is not None and log.final_record.values["train_runtime"] == 12.3456
    assert log.final_record.values["train_loss"] == 5.34362
    assert log.succeeded


def test_hf5_string_dicts_are_numbers() -> None:
    log = parse_log(LOGS / "hf5_trainer_strings.log")
    assert [r.values["loss"] for r in log.train_records] == [6.18, 5.91]
    assert log.train_records[0].epoch == 0.25
    assert log.eval_records[0].values["eval_samples_per_second"] == 31.3
    assert log.final_record.values["train_samples_per_second"] == 15.2


def test_trainer_dict_with_nan_is_read_by_pairs() -> None:
    assert parse_trainer_dict("{'loss': nan, 'grad_norm': inf, 'epoch': 0.5}")["epoch"] == 0.5
    assert parse_trainer_dict("{'loss': '6.18', 'note': 'x'}") == {"loss": 6.18}
    assert parse_trainer_dict("{'a': [1, 2]}") is None


def test_real_run_log_matches_its_own_files() -> None:
    log = parse_log(REAL_LOG)
    run = read_run_dir(REAL_RUN)
    assert log.summary == run.summary
    assert [m.data for m in log.metrics] == [m.data for m in run.metrics]
    assert len(log.train_metrics) == 4 and len(log.eval_metrics) == 2
    assert [s.step for s in log.steps] == [1, 2, 3, 4]
    assert log.steps[0].values["loss"] == 6.9828 and log.steps[0].values["samples/s"] == 8.465
    assert run.config["sharding"] == "full_shard"
    assert log.missing == ["run args (WORKSHOP_RUN_ARGS / run_args.json)"] and run.missing == []  # an older log


def test_srun_label_and_torch_rank_prefixes() -> None:
    lines = split_lines("0: hello\n 12: x\n[rank3]: boom\n1: [rank1]: both\nplain\r\n")
    assert [(ln.rank, ln.text) for ln in lines] == [(0, "hello"), (12, "x"), (3, "boom"), (1, "both"), (None, "plain")]


def test_per_rank_facts_are_kept_per_rank_but_records_deduplicated() -> None:
    text = "\n".join([
        "0: [workshop rank 0 host n1] params_local=100 holds half",
        "1: [workshop rank 1 host n2] params_local=100 holds half",
        "1: [workshop rank 1 host n2] params_local=100 holds half",
        '0: WORKSHOP_METRICS {"kind": "train", "step": 1, "loss": 2.0}',
        '1: WORKSHOP_METRICS {"kind": "train", "step": 1, "loss": 2.0}',
    ])
    log = parse_text(text)
    assert [(f.rank, f.host, f.values["params_local"]) for f in log.rank_facts] == [(0, "n1", 100), (1, "n2", 100)]
    assert len(log.metrics) == 1


def test_nccl_tests_table_with_in_place_columns() -> None:
    bw = parse_log(LOGS / "nccl_tests_all_reduce_perf.log").bandwidth
    assert bw is not None
    assert len(bw.rows) == 6 and bw.avg_busbw_GBps == 11.0256
    last = bw.rows[-1]
    assert (last.size_bytes, last.count, last.dtype, last.busbw_GBps, last.inplace_busbw_GBps) == (
        134217728, 33554432, "float", 26.32, 26.34)
    assert bw.n_ranks == 4 and bw.hosts == ["n1", "n1", "n2", "n2"]
    assert bw.max_busbw_GBps == 26.34


def test_real_bandwidth_self_test_logs() -> None:
    ok = parse_log(LOGS / "real_bandwidth_pass_2proc.log").bandwidth
    assert ok.passed is True and ok.failures == [] and ok.n_ranks == 2 and ok.n_nodes == 1
    assert len(ok.rows) == 9 and ok.rows[0].inplace_time_us is not None and ok.avg_busbw_GBps == 0.07
    bad = parse_log(LOGS / "real_bandwidth_gate_failed_2proc.log").bandwidth
    assert bad.passed is False and "below the site's minimum 1000 GB/s" in bad.failures[0]


def test_our_bandwidth_table_out_of_place_only_and_na() -> None:
    text = ("#  size  count  type  redop  root  time  algbw  busbw  #wrong\n"
            "  1048576  262144  float  sum  -1  100.0  10.49  15.73  N/A\n"
            "# Avg bus bandwidth : 15.73\n")
    bw = parse_text(text).bandwidth
    assert bw.rows[0].busbw_GBps == 15.73 and bw.rows[0].wrong is None and bw.rows[0].inplace_time_us is None


def test_slurm_messages() -> None:
    kinds = {name: [e.kind for e in parse_log(LOGS / name).slurm] for name in (
        "slurm_timeout.log", "slurm_cancelled.log", "slurm_node_failure.log", "slurm_oom_kill.log")}
    assert kinds["slurm_timeout.log"][0] == "time_limit"
    assert "cancelled" in kinds["slurm_cancelled.log"] and "time_limit" not in kinds["slurm_cancelled.log"]
    assert set(kinds["slurm_node_failure.log"]) == {"node_failure"}
    assert kinds["slurm_oom_kill.log"][0] == "oom_kill"
    ev = parse_log(LOGS / "slurm_timeout.log").slurm[0]
    assert (ev.job_id, ev.node, ev.reason) == ("4242", "n1", "TIME LIMIT")
    other = parse_text("slurmstepd: error: *** JOB 9 ON n3 CANCELLED AT 2026-01-01T00:00:00 DUE to SIGNAL Terminated ***")
    assert other.slurm[0].kind == "cancelled" and other.slurm[0].reason == "SIGNAL Terminated"


def test_missing_lists_what_is_absent() -> None:
    log = parse_text("nothing useful here\n")
    assert "summary (WORKSHOP_SUMMARY / summary.json)" in log.missing
    assert "train loss records" in log.missing
    assert not log.succeeded


def test_load_accepts_paths_dirs_text_and_parsed() -> None:
    assert load(REAL_RUN).summary["world_size"] == 2
    assert load(str(REAL_LOG)).summary["world_size"] == 2
    parsed = load("{'loss': 1.5}\n")
    assert load(parsed) is parsed and parsed.train_records[0].values["loss"] == 1.5


def test_bad_json_lines_are_reported_not_raised() -> None:
    log = parse_text('WORKSHOP_METRICS {"kind": "train", "step": \nWORKSHOP_SUMMARY [1, 2]\n')
    assert log.bad_lines == [1, 2] and log.summary is None


def test_a_line_another_node_spliced_into_ours_keeps_our_record(tmp_path) -> None:
    """Seen in a two-node job: the other node's Trainer dict written between our JSON and its newline."""
    from workshop.results.verify import read_log

    record = {"kind": "train", "step": 4, "loss": 6.81, "samples_per_s": 51.2}
    text = ("[job] id 4 name x nodes 2: a,b\n"
            f"WORKSHOP_METRICS {json.dumps(record)}{{'loss': '6.814', 'epoch': '0.6667'}}\n\n")
    assert [m.data for m in parse_text(text).metrics] == [record]
    (tmp_path / "job.out").write_text(text)
    assert read_log(tmp_path / "job.out").metrics == [record]


# ---------------------------------------------------------------------------------------- robustness

_REAL = REAL_LOG.read_text()
_ALL = "\n".join(fixture_text(p.name) for p in sorted(LOGS.glob("*.log")))


def test_truncation_at_every_position_of_a_real_log() -> None:
    full = parse_text(_REAL)
    for i in range(len(_REAL) + 1):
        log = parse_text(_REAL[:i])
        assert len(log.metrics) <= len(full.metrics)
        assert log.summary in (None, full.summary)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_random_bytes_never_crash(data: bytes) -> None:
    parse_text(data.decode("utf-8", errors="replace"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_ALL.splitlines() + ["\r", "0: ", "{'", "WORKSHOP_METRICS {", "# Avg bus bandwidth :",
                                                     "***", "\x00", "  8 2 float sum -1 1 2 3 x"]), max_size=40),
       st.text(max_size=50))
def test_shuffled_and_spliced_log_lines_never_crash(lines: list[str], noise: str) -> None:
    log = parse_text(noise.join(lines))
    json.dumps(log.missing)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300))
def test_random_text_after_markers_never_crashes(tail: str) -> None:
    for marker in ("WORKSHOP_SUMMARY ", "WORKSHOP_METRICS ", "{'loss': ", "[workshop rank 1 host ", "[workshop] step ",
                   "slurmstepd: error: *** JOB ", "srun: error: ", "   8  2  float  sum  -1 "):
        parse_text(marker + tail)
