"""Exercise tables: every number comes from the runs' own records; what is missing is NaN with a note."""

from __future__ import annotations

import json
import math

import pytest

from tests.logs_fixtures import LOGS, REAL_LOG, REAL_RUN
from workshop.results import tables
from workshop.results.logs import parse_text
from workshop.results.memory import estimate_config


def run(label: str, **summary: object) -> "tables.ParsedLog":
    """A parsed log holding one WORKSHOP_SUMMARY line (the numbers are the test's own)."""
    log = parse_text("WORKSHOP_SUMMARY " + json.dumps({"status": "completed", **summary}) + "\n", label)
    return log


def test_baseline_from_a_real_run_folder() -> None:
    df = tables.baseline_table([REAL_RUN])
    summary = json.loads((REAL_RUN / "summary.json").read_text())
    row = df.iloc[0]
    assert row["mean_train_loss"] == summary["train_loss"]
    assert [row["eval_loss_epoch1"], row["eval_loss_epoch2"]] == summary["eval_losses"]
    assert row["train_samples_per_s"] == summary["train_samples_per_s"]
    assert row["steps_per_epoch"] == summary["steps_per_epoch"] and row["peak_mem_mb"] == summary["peak_mem_mb"]
    assert math.isnan(row["gpu_util_pct"])  # CPU run: NaN, and the note says why
    notes = " ".join(df.attrs["notes"])
    assert "gpu_util_pct is NaN — no GPU utilisation" in notes and "RSS" in notes
    # the memory model for its config (tiny, full_shard on 2, fp32, 4 x 256 tokens), worked by hand: the fp32
    # shard 644,736 + the gathered embedding 393,216 + AdamW 1,289,472 + activations 2 x (64·x·h + 4·b·a·s²)
    # = 20,971,520 and 12·x·h + 64·x + 8·x·V = 9,633,792 (x = 1024) + the loss's gradient 4·x·V = 4,194,304
    assert row["predicted_mem_mb"] == pytest.approx(37_127_040 / 2**20)


def test_baseline_from_the_log_alone_matches_the_folder_except_prediction() -> None:
    a = tables.baseline_table([REAL_LOG]).iloc[0]
    b = tables.baseline_table([REAL_RUN]).iloc[0]
    assert a.drop(["predicted_mem_mb", "gpu_util_pct"]).equals(b.drop(["predicted_mem_mb", "gpu_util_pct"]))
    assert math.isnan(a["predicted_mem_mb"])


def test_baseline_from_hf_dicts_only_leaves_gaps_as_nan_with_notes() -> None:
    df = tables.baseline_table([LOGS / "hf4_trainer_srun_label.log"])
    row = df.iloc[0]
    assert row["mean_train_loss"] == 5.34362 and row["train_samples_per_s"] == 10.368
    assert row["eval_loss_epoch1"] == 5.1 and row["eval_loss_epoch2"] == 4.7
    assert row["eval_samples_per_s"] == 33.25
    for col in ("steps_per_epoch", "peak_mem_mb", "em", "f1"):
        assert math.isnan(row[col])
    assert any("peak_mem_mb is NaN — not in the log" in n for n in df.attrs["notes"])


def test_fsdp_vs_baseline_by_hand() -> None:
    base = run("base", sharding_applied="none", world_size=1, peak_mem_mb=1000.0, train_samples_per_s=10.0)
    fsdp = run("fsdp", sharding_applied="full_shard", world_size=2, peak_mem_mb=600.0, train_samples_per_s=8.0)
    df = tables.fsdp_vs_baseline_table(base, [fsdp], predicted_mem_mb=False)
    r = df.loc["fsdp"]
    assert r["mem_saved_mb"] == 400.0  # 1000 - 600
    assert r["mem_saved_pct"] == pytest.approx(40.0)  # 400 / 1000
    assert r["speed_cost_pct"] == pytest.approx(20.0)  # 1 - 8/10
    assert df.loc["base", "mem_saved_mb"] == 0


def test_strategies_relative_to_full_shard() -> None:
    runs = [run("fs", sharding_applied="full_shard", peak_mem_mb=500.0, train_samples_per_s=10.0, train_tokens_per_s=1000.0),
            run("sgo", sharding_applied="shard_grad_op", peak_mem_mb=750.0, train_samples_per_s=12.0, train_tokens_per_s=1200.0),
            run("off", sharding_applied="full_shard", offload_applied=True, peak_mem_mb=250.0, train_samples_per_s=5.0)]
    df = tables.strategies_table(runs, predicted_mem_mb=False)
    assert list(df["strategy"]) == ["full_shard", "shard_grad_op", "full_shard+offload"]
    assert df.loc["sgo", "peak_mem_mb_vs_full_shard"] == 1.5 and df.loc["sgo", "samples_per_s_vs_full_shard"] == 1.2
    assert df.loc["off", "peak_mem_mb_vs_full_shard"] == 0.5
    assert math.isnan(df.loc["off", "tokens_per_s"]) and any("off: train_tokens_per_s" in n for n in df.attrs["notes"])
    no_ref = tables.strategies_table(runs[1:], predicted_mem_mb=False)
    assert any("no full_shard run" in n for n in no_ref.attrs["notes"])


def test_scaling_speedup_and_efficiency_by_hand() -> None:
    runs = [run(f"w{w}", world_size=w, nodes=max(1, w // 2), global_batch=32, train_samples_per_s=s,
                peak_mem_mb_per_rank=[m] * w)
            for w, s, m in ((4, 32.0, 300.0), (1, 10.0, 900.0), (2, 18.0, 500.0))]
    df = tables.scaling_table(runs, predicted_mem_mb=False)
    assert list(df.index) == ["w1", "w2", "w4"]  # sorted by world size
    assert list(df["speedup"]) == pytest.approx([1.0, 1.8, 3.2])  # 18/10, 32/10
    assert list(df["efficiency"]) == pytest.approx([1.0, 0.9, 0.8])  # 1.8/2, 3.2/4
    assert list(df["peak_mem_mb_per_gpu"]) == [900.0, 500.0, 300.0]
    assert not any("global batch differs" in n for n in df.attrs["notes"])
    runs.append(run("w8", world_size=8, nodes=4, global_batch=64, train_samples_per_s=50.0))
    assert any("global batch differs" in n for n in tables.scaling_table(runs, False).attrs["notes"])


def test_a_speedup_above_the_gpu_count_is_named_as_a_slowed_reference_run(capsys: pytest.CaptureFixture) -> None:
    """Superlinear scaling on a busy machine means the smallest run was slowed: the table and plot say so."""
    from workshop.results import plots

    runs = [run(f"w{w}", world_size=w, nodes=1, global_batch=8, train_samples_per_s=s) for w, s in ((1, 10.0), (2, 23.5))]
    notes = tables.scaling_table(runs, False).attrs["notes"]
    assert [n for n in notes if "above perfect scaling" in n] == [
        "w2: efficiency 118% is above perfect scaling, which no run reaches: w1 was slowed (a busy machine?) "
        "and every speed-up over it is inflated; rerun w1 (resubmit=True) and compute again"]
    plots.scaling_plot(runs)
    assert "note: w2: efficiency 118% is above perfect scaling" in capsys.readouterr().out
    runs[1] = run("w2", world_size=2, nodes=1, global_batch=8, train_samples_per_s=22.5)   # 112 %: noise
    assert not any("above perfect scaling" in n for n in tables.scaling_table(runs, False).attrs["notes"])
    assert not any("above perfect scaling" in n for n in tables.build("scaling", runs).attrs["notes"])


def test_notebook_04s_table_shows_the_raw_figures_and_the_batch_each_run_trained() -> None:
    """The student derives speed-up and efficiency: the exercise table (kind "scaling") must not print them."""
    runs = [run(f"w{w}", world_size=w, nodes=1, global_batch=8, global_batch_measured=8, batch_size=2,
                grad_acc=8 // (2 * w), steps=6, train_samples_per_s=s) for w, s in ((1, 10.0), (4, 15.0))]
    df = tables.build("scaling", runs)
    assert "speedup" not in df.columns and "efficiency" not in df.columns
    assert list(df["grad_acc"]) == [4, 1] and list(df["global_batch_measured"]) == [8, 8] and list(df["steps"]) == [6, 6]
    assert list(df["batch_size"]) == [2, 2]                             # the summary's micro-batch
    assert not any("speed-up" in n for n in df.attrs["notes"])


def test_multinode_adds_bus_bandwidth_from_the_log_with_the_same_ranks() -> None:
    runs = [run("n1", world_size=2, nodes=1, global_batch=8, train_samples_per_s=10.0),
            run("n2", world_size=4, nodes=2, global_batch=8, train_samples_per_s=15.0)]
    df = tables.multinode_table(runs, [LOGS / "nccl_tests_all_reduce_perf.log"], predicted_mem_mb=False)
    assert df.loc["n2", "avg_busbw_GBps"] == 11.0256 and df.loc["n2", "max_busbw_GBps"] == 26.34
    assert math.isnan(df.loc["n1", "avg_busbw_GBps"])  # no bandwidth log on 2 ranks: NaN, with a note
    assert any("no bandwidth log ran on that many ranks" in n for n in df.attrs["notes"])
    assert any("no bandwidth log given" in n for n in tables.multinode_table(runs, [], False).attrs["notes"])


@pytest.mark.parametrize("fmt", ["markdown", "csv", "json"])
def test_cli_formats(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert tables.main([str(REAL_RUN), "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert "6.896" in out or "6.896447" in out
    if fmt == "json":
        data = json.loads(out)
        assert data["rows"][0]["mean_train_loss"] == 6.896447 and data["notes"]
    if fmt == "markdown":
        assert out.startswith("| run |") and "- fs2: gpu_util_pct is NaN" in out


def test_cli_steps_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert tables.main(["--step", "fsdp", str(REAL_RUN)]) == 2
    assert tables.main(["/nonexistent"]) == 2
    assert tables.main(["--step", "multinode", str(REAL_RUN), str(LOGS / "nccl_tests_all_reduce_perf.log")]) == 0
    assert "avg_busbw_GBps" in capsys.readouterr().out
    assert tables.main(["--step", "scaling", str(REAL_RUN), str(REAL_LOG)]) == 0


def test_multinode_matches_our_bandwidth_test_by_rank_count() -> None:
    runs = [run("two", world_size=2, nodes=1, global_batch=8, train_samples_per_s=10.0)]
    df = tables.multinode_table(runs, [LOGS / "real_bandwidth_pass_2proc.log"], predicted_mem_mb=False)
    assert df.loc["two", "avg_busbw_GBps"] == 0.07


@pytest.mark.slow
def test_tables_from_real_runs_in_this_session(runs) -> None:  # noqa: ANN001
    """The shared real runs (made by tests/runs.py): one node x 2 and two nodes x 1, full_shard."""
    one = runs.get("--sharding", "full_shard", nproc=2)
    two = runs.get("--sharding", "full_shard", nproc=1, nnodes=2, torchrun=True)   # two torchruns' own output
    base = tables.baseline_table([one.out_dir]).iloc[0]
    assert base["mean_train_loss"] == one.summary["train_loss"]
    # Two torchruns' output in one log: every record counted once.
    from workshop.results.logs import parse_text as parse

    log = parse(two.log)
    assert len(log.eval_metrics) == len(two.summary["eval_losses"])
    assert [m.step for m in log.train_metrics] == sorted({m.step for m in log.train_metrics})
    df = tables.multinode_table([one.out_dir, two.out_dir], [], predicted_mem_mb=True)
    assert list(df["nodes"]) == [1, 2] and list(df["world_size"]) == [2, 2]
    assert not df["predicted_mem_mb"].isna().any()


def test_count_columns_print_as_integers() -> None:
    import pandas as pd

    from workshop.results.tables import integer_columns, to_markdown

    df = integer_columns(pd.DataFrame({"run": ["a", "b"], "world_size": [2.0, 4.0], "nodes": [1.0, float("nan")],
                                       "samples_per_s": [3.0, 4.5]}).set_index("run"))
    assert str(df["world_size"].dtype) == "int64" and "world_size" in df.to_string()
    assert "2.0" not in df["world_size"].to_string() and df.loc["a", "world_size"] == 2
    assert str(df["nodes"].dtype) == "float64"          # a NaN keeps the column float (its note says why)
    assert "| a | 2 |" in to_markdown(df)


@pytest.mark.slow
@pytest.mark.parametrize("rank0_task", [0, 1])
def test_two_nodes_printing_the_same_metrics_give_global_rank_0s(runs, rank0_task: int) -> None:  # noqa: ANN001
    """A real two-node run's output as `srun --label` writes it (`0: {...}`, `1: {...}`, interleaved): the
    table reads the node that holds global rank 0, and its notes say so. With c10d rendezvous rank 0 may
    be on either task: the task that printed the rank-0 lines (WORKSHOP_*, `[workshop]`) is the one read."""
    from workshop.results.logs import parse_text as parse

    two = runs.get("--sharding", "full_shard", nproc=1, nnodes=2, torchrun=True)   # two torchruns' own output
    rank0 = next(x for x in two.node_logs if "WORKSHOP_SUMMARY" in x)   # only global rank 0 prints it
    other = next(x for x in two.node_logs if x is not rank0)
    tasks = ((rank0_task, rank0), (1 - rank0_task, other))
    labelled = [[f"{task}: {line}" for line in text.splitlines()] for task, text in sorted(tasks)]
    interleaved = [line for pair in zip(*labelled) for line in pair]
    interleaved += labelled[0][len(labelled[1]):] + labelled[1][len(labelled[0]):]
    throughput = [parse(t).final_record.values["train_samples_per_second"] for t in (rank0, other)]
    assert throughput[0] != throughput[1], "each node prints its own Trainer figures"
    # without the summary line only the Trainer's dicts are left: the other task's must not be read
    trainer_only = "\n".join(x for x in interleaved if "WORKSHOP_" not in x)
    for text, expected in ((trainer_only, throughput[0]), ("\n".join(interleaved), two.summary["train_samples_per_s"])):
        df = tables.baseline_table([parse(text, "two_nodes")], predicted_mem_mb=False)
        assert df.iloc[0]["train_samples_per_s"] == expected
        assert any("global rank 0 only" in n for n in df.attrs["notes"]), df.attrs["notes"]


def test_rank_0_is_the_task_that_printed_the_summary() -> None:
    """`srun --label` numbers tasks, not global ranks: here task 1 holds rank 0 (it alone prints the
    WORKSHOP_SUMMARY line), so its Trainer dict and its summary are the run's, not task 0's."""
    text = ("0: {'train_runtime': '4.0', 'train_samples_per_second': '5.0', 'train_loss': '2.0', 'epoch': '2.0'}\n"
            "1: {'train_runtime': '4.0', 'train_samples_per_second': '9.0', 'train_loss': '2.0', 'epoch': '2.0'}\n"
            '1: WORKSHOP_SUMMARY {"status": "completed", "train_samples_per_s": 9.0}\n')
    log = parse_text(text, "rank0_on_task1")
    assert log.summary == {"status": "completed", "train_samples_per_s": 9.0}
    assert log.final_record.values["train_samples_per_second"] == 9.0
    assert log.rank_note is not None and log.rank_note.startswith("figures from global rank 0 only (the lines labelled 1:)")


def gpu_run(label: str, sharding: str, world: int, mem_kind: str = "cuda_allocated") -> "tables.ParsedLog":
    """The log of a GPU run of BLOOM-560M as the training script writes it: its config, and a summary whose
    memory column is the CUDA allocator's peak (the figures are the test's own: no GPU run is committed)."""
    config = {"model": "bloom-560m", "sharding": sharding, "world_size": world, "nodes": 1, "procs_per_node": world,
              "precision": "bf16", "batch_size": 4, "max_length": 512, "grad_acc": 1}
    summary = {"status": "completed", "world_size": world, "sharding_applied": sharding, "mem_kind": mem_kind,
               "peak_mem_mb": 20000.0, "peak_mem_mb_per_rank": [20000.0] * world, "train_samples_per_s": 10.0,
               "tensor_mem_mb_per_rank": [{"peak": 15000.0, "batch_shape": [4, 300]}] * world}
    text = ("WORKSHOP_RUN_ARGS " + json.dumps({"config": config}) + "\n"
            + "WORKSHOP_SUMMARY " + json.dumps(summary) + "\n")
    return parse_text(text, label)


def test_beside_a_gpu_allocator_peak_the_prediction_holds_what_the_allocator_holds() -> None:
    """On a GPU, peak_mem_mb is torch.cuda.max_memory_allocated, which counts DDP's gradient buckets (made
    in C++ when DDP wraps the model: the tracker never sees them). The prediction beside it is the model's
    gpu_peak, not the tracker's peak: for DDP on BLOOM-560M the two differ by ~2.1 GB (4 B per parameter)."""
    from workshop.results.memory import MB

    ddp, fsdp = gpu_run("ddp", "ddp", 4), gpu_run("full_shard", "full_shard", 4)
    df = tables.strategies_table([ddp, fsdp])
    for name, log in (("ddp", ddp), ("full_shard", fsdp)):
        predicted = estimate_config(log.config, [4, 300])
        assert df.loc[name, "predicted_mem_mb"] == pytest.approx(predicted.gpu_peak / MB)
    buckets = estimate_config(ddp.config, [4, 300]).ddp_buckets / MB
    assert buckets == pytest.approx(4 * 559_214_592 / MB, rel=1e-6)          # ~2,133 MB, "about 2.2 GB"
    assert df.loc["ddp", "predicted_mem_mb"] - estimate_config(ddp.config, [4, 300]).total_mb == pytest.approx(buckets)
    assert ("ddp: peak_mem_mb is the CUDA allocator's peak since train start (reset after the generation run, not at "
            "process start; the CUDA context is not in it); predicted_mem_mb beside it is the memory model's gpu_peak, "
            "which adds DDP's gradient buckets to the tracker's peak") in df.attrs["notes"]
    # beside the tracker's measurement (a CPU run), the tracker's own peak stays the prediction
    cpu = tables.strategies_table([gpu_run("ddp", "ddp", 4, mem_kind="tensor")])
    assert cpu.loc["ddp", "predicted_mem_mb"] == pytest.approx(estimate_config(ddp.config, [4, 300]).total_mb)
