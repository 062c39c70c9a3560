"""The exercise tables in the cases notebooks 03-05 meet, worked by hand: a scaling table whose
smallest world is 2 (notebook 05's first layout is 1 node x 2), and memory columns from ranks that
measured different batch shapes (dynamic padding gives each rank its own sequence length)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from workshop.results import tables
from workshop.results.logs import parse_text
from workshop.results.memory import MB, estimate_config


def run(label: str, run_args: dict | None = None, **summary: object) -> "tables.ParsedLog":
    lines = [f"WORKSHOP_RUN_ARGS {json.dumps({'config': run_args})}"] if run_args else []
    lines.append("WORKSHOP_SUMMARY " + json.dumps({"status": "completed", **summary}))
    return parse_text("\n".join(lines) + "\n", label)


def test_efficiency_is_relative_to_the_smallest_world_of_2() -> None:
    """1 node x 2, 2 x 2, 4 x 2 at 20, 36 and 64 samples/s: speed-ups 1, 1.8, 3.2 over the 2-rank run,
    efficiencies 1.8 / (4 / 2) = 0.9 and 3.2 / (8 / 2) = 0.8 (not 1.8 / 4 = 0.45)."""
    runs = [run(f"{n}x2", world_size=2 * n, nodes=n, global_batch=16, train_samples_per_s=s)
            for n, s in ((4, 64.0), (1, 20.0), (2, 36.0))]
    df = tables.multinode_table(runs, [], predicted_mem_mb=False)
    assert list(df.index) == ["1x2", "2x2", "4x2"]
    assert list(df["speedup"]) == pytest.approx([1.0, 1.8, 3.2])
    assert list(df["efficiency"]) == pytest.approx([1.0, 0.9, 0.8])
    assert "speed-up relative to 1x2 (world size 2)" in df.attrs["notes"]
    assert not any("above perfect scaling" in n for n in df.attrs["notes"])
    # the same through the scaling table notebook 04 plots
    assert list(tables.scaling_table(runs, predicted_mem_mb=False)["efficiency"]) == pytest.approx([1.0, 0.9, 0.8])


def test_superlinear_is_judged_against_the_smallest_world_too() -> None:
    """2.5 x the 2-rank throughput on 4 ranks is 125 % efficiency: above the 115 % noise bound, named."""
    runs = [run("1x2", world_size=2, nodes=1, global_batch=8, train_samples_per_s=20.0),
            run("2x2", world_size=4, nodes=2, global_batch=8, train_samples_per_s=50.0)]
    notes = tables.scaling_table(runs, predicted_mem_mb=False).attrs["notes"]
    assert [n for n in notes if "above perfect scaling" in n] == [
        "2x2: efficiency 125% is above perfect scaling, which no run reaches: 1x2 was slowed (a busy machine?) "
        "and every speed-up over it is inflated; rerun 1x2 (resubmit=True) and compute again"]
    runs[1] = run("2x2", world_size=4, nodes=2, global_batch=8, train_samples_per_s=22.0)   # 110 %: noise
    assert not any("above perfect scaling" in n for n in tables.scaling_table(runs, False).attrs["notes"])


# The tiny model, full_shard on 2 ranks, fp32 (run_args' config as a run writes it).
CONFIG = {"model": "tiny", "sharding": "full_shard", "precision": "fp32", "nodes": 1, "procs_per_node": 2,
          "world_size": 2, "batch_size": 2, "max_length": 256, "grad_acc": 1, "global_batch": 0,
          "offload": False, "activation_checkpointing": False, "hybrid_replicas": 0, "replicas": 1, "shard_size": 2}


def test_memory_columns_from_ranks_that_measured_different_batch_shapes() -> None:
    """Rank 0 trained a 2 x 40 step, rank 1 a 2 x 56 one. Each category's column is its largest rank's
    (the one that must fit), the prediction is the model at the longer shape: the tiny model's peak at
    2 x 56 worked out in tests/test_memory_by_hand.py, 5,416,832 bytes (4,493,184 at 2 x 40)."""
    ranks = [{"params": 0.99, "grads": 0.61, "optimizer": 1.23, "activations": 1.75, "other": 1.60, "peak": 4.30,
              "batch_shape": [2, 40], "micro_batches": 1},
             {"params": 0.98, "grads": 0.62, "optimizer": 1.23, "activations": 2.51, "other": 1.40, "peak": 5.17,
              "batch_shape": [2, 56], "micro_batches": 1}]
    log = run("fs2", CONFIG, sharding_applied="full_shard", world_size=2, peak_mem_mb=5.17, mem_kind="tensor",
              rss_mb=530.0, tensor_mem_mb_per_rank=ranks, train_samples_per_s=4.0)
    df = tables.strategies_table([log])
    row = df.loc["fs2"]
    assert (row["params_mb"], row["grads_mb"], row["optimizer_mb"], row["activations_mb"], row["other_mb"]) == (
        0.99, 0.62, 1.23, 2.51, 1.60)
    assert row["host_mb"] == 0 and row["rss_mb"] == 530.0
    assert row["predicted_mem_mb"] == pytest.approx(5_416_832 / MB)
    # one rank only: the prediction follows its shape
    alone = run("fs2", CONFIG, sharding_applied="full_shard", world_size=2, peak_mem_mb=4.3,
                tensor_mem_mb_per_rank=[ranks[0], None])
    assert tables.strategies_table([alone]).loc["fs2", "predicted_mem_mb"] == pytest.approx(4_493_184 / MB)


def test_offloaded_ranks_add_their_host_memory() -> None:
    ranks = [{"params": 0.5, "grads": 0.0, "optimizer": 0.0, "activations": 1.8, "other": 1.5, "peak": 3.0,
              "host": 2.46, "batch_shape": [2, 40]},
             {"params": 0.5, "grads": 0.0, "optimizer": 0.0, "activations": 2.5, "other": 1.4, "peak": 3.6,
              "host": 2.45, "batch_shape": [2, 56]}]
    df = tables.strategies_table([run("off", None, sharding_applied="full_shard", offload_applied=True,
                                      tensor_mem_mb_per_rank=ranks)], predicted_mem_mb=False)
    assert df.loc["off", "host_mb"] == 2.46 and df.loc["off", "activations_mb"] == 2.5
    assert df.loc["off", "strategy"] == "full_shard+offload"


def test_a_run_without_measured_memory_is_nan_with_its_reason() -> None:
    df = tables.strategies_table([run("old", None, sharding_applied="full_shard", peak_mem_mb=500.0)],
                                 predicted_mem_mb=False)
    assert all(math.isnan(df.loc["old", c]) for c in ("params_mb", "grads_mb", "optimizer_mb", "activations_mb",
                                                       "other_mb", "host_mb"))
    assert any("old: memory by category is NaN — the run measured no tensor memory" in n for n in df.attrs["notes"])


def test_fsdp_table_from_the_trainers_own_figures_when_there_is_no_summary() -> None:
    """Logs without WORKSHOP_SUMMARY (an HF run printed only its dicts): throughput from the final dict."""
    base = parse_text("{'train_runtime': '10.0', 'train_samples_per_second': '10.0', 'train_loss': '2.0', "
                      "'epoch': '1.0'}\n", "base")
    fsdp = parse_text("{'train_runtime': '12.5', 'train_samples_per_second': '8.0', 'train_loss': '2.0', "
                      "'epoch': '1.0'}\n", "fsdp")
    df = tables.fsdp_vs_baseline_table(base, [fsdp], predicted_mem_mb=False)
    assert df.loc["fsdp", "samples_per_s"] == 8.0
    assert df.loc["fsdp", "speed_cost_pct"] == pytest.approx(20.0)     # 1 - 8 / 10


def test_the_baseline_from_trainer_records_alone() -> None:
    """No summary, no final dict: the last train record's loss under its own name, no mean the run never
    reported (a mean of the logged windows is not the Trainer's mean), and EM/F1 from the summary."""
    log = parse_text("{'loss': '6.5', 'epoch': '0.5'}\n{'loss': '5.75', 'epoch': '1.0'}\n{'loss': '5.25', 'epoch': '1.5'}\n"
                     "{'eval_loss': '5.0', 'epoch': '1.0'}\n", "hf")
    table = tables.baseline_table([log], predicted_mem_mb=False)
    row = table.loc["hf"]
    assert row["last_logged_loss"] == 5.25 and row["eval_loss_epoch1"] == 5.0
    assert math.isnan(row["mean_train_loss"]) and any("train_loss is NaN" in n for n in table.attrs["notes"])
    # with the Trainer's final dict: its train_loss is the run's mean, beside the last logged loss (issue 49:
    # the course run's "final_train_loss" was its mean, 5.54, while its last logged loss was 4.05)
    log = parse_text("{'loss': '6.5', 'epoch': '0.5'}\n{'loss': '5.25', 'epoch': '1.0'}\n"
                     "{'train_runtime': '10.0', 'train_samples_per_second': '8.0', 'train_loss': '5.875', "
                     "'epoch': '1.0'}\n", "both")
    row = tables.baseline_table([log], predicted_mem_mb=False).loc["both"]
    assert (row["mean_train_loss"], row["last_logged_loss"]) == (5.875, 5.25)
    assert "final_train_loss" not in row.index
    done = run("done", em_after=12.5, f1_after=30.25, train_loss=2.0)
    row = tables.baseline_table([done], predicted_mem_mb=False).loc["done"]
    assert (row["em"], row["f1"]) == (12.5, 30.25)


def test_offload_is_what_the_summary_read_back_over_what_the_config_asked() -> None:
    asked = {**CONFIG, "offload": True}
    not_applied = run("off?", asked, sharding_applied="full_shard", offload_applied=False)
    unknown = run("off", asked, sharding_applied="full_shard")          # an older summary without the field
    df = tables.strategies_table([not_applied, unknown], predicted_mem_mb=False)
    assert list(df["strategy"]) == ["full_shard", "full_shard+offload"]


def test_scaling_from_logs_without_a_summary() -> None:
    """The config (WORKSHOP_RUN_ARGS) and the train records (WORKSHOP_METRICS) fill what a summary would."""
    text = (f"WORKSHOP_RUN_ARGS {json.dumps({'config': {**CONFIG, 'effective_grad_acc': 2, 'effective_global_batch': 8}})}\n"
            'WORKSHOP_METRICS {"kind": "train", "step": 1, "loss": 6.0, "peak_mem_mb": 4.5}\n'
            'WORKSHOP_METRICS {"kind": "train", "step": 2, "loss": 5.0, "peak_mem_mb": 4.75}\n')
    df = tables.build("scaling", [parse_text(text, "w2")])
    assert list(df.columns) == ["nodes", "world_size", "batch_size", "grad_acc", "global_batch",
                                "global_batch_measured", "steps", "samples_per_s", "peak_mem_mb_per_gpu",
                                "predicted_mem_mb"]
    row = df.loc["w2"]
    assert (row["world_size"], row["batch_size"], row["grad_acc"], row["global_batch"]) == (2, 2, 2, 8)
    assert row["predicted_mem_mb"] == pytest.approx(estimate_config(CONFIG).total_mb)   # tiny, full_shard x 2, 2 x 256
    assert row["peak_mem_mb_per_gpu"] == 4.75
    # no run with a known world size and throughput: speed-up and efficiency are NaN, with nothing to divide by
    none = tables.scaling_table([run("?", sharding_applied="full_shard")], predicted_mem_mb=False)
    assert math.isnan(none.loc["?", "speedup"]) and math.isnan(none.loc["?", "efficiency"])


def test_eval_losses_from_workshop_records_by_epoch() -> None:
    """Without a summary or the Trainer's eval dicts: WORKSHOP_METRICS eval records, ordered by their epoch."""
    text = ('WORKSHOP_METRICS {"kind": "eval", "step": 12, "epoch": 2.0, "eval_loss": 4.5}\n'
            'WORKSHOP_METRICS {"kind": "eval", "step": 6, "epoch": 1.0, "eval_loss": 5.5}\n')
    row = tables.baseline_table([parse_text(text, "m")], predicted_mem_mb=False).loc["m"]
    assert (row["eval_loss_epoch1"], row["eval_loss_epoch2"]) == (5.5, 4.5)


def test_the_strategy_is_what_was_applied_else_asked_else_configured() -> None:
    """A summary from before sharding_applied names sharding_requested; a log with only its config, the config's."""
    requested = run("asked", None, sharding_requested="shard_grad_op", activation_checkpointing=True)
    configured = parse_text(f"WORKSHOP_RUN_ARGS {json.dumps({'config': {**CONFIG, 'offload': True}})}\n", "cfg")
    df = tables.strategies_table([requested, configured], predicted_mem_mb=False)
    assert list(df["strategy"]) == ["shard_grad_op+ac", "full_shard+offload"]
    assert df.loc["cfg", "world_size"] == 2 and math.isnan(df.loc["asked", "world_size"])   # from the config, or NaN


def test_strategies_from_the_trainers_figures_when_the_summary_has_none() -> None:
    """No WORKSHOP_SUMMARY: samples/s from the Trainer's final dict, tokens/s from the last train record."""
    text = ('WORKSHOP_RUN_ARGS {"config": {"sharding": "full_shard", "world_size": 2}}\n'
            'WORKSHOP_METRICS {"kind": "train", "step": 1, "loss": 6.0, "tokens_per_s": 800.0}\n'
            'WORKSHOP_METRICS {"kind": "train", "step": 2, "loss": 5.5, "tokens_per_s": 900.0}\n'
            'WORKSHOP_METRICS {"kind": "train", "step": 3, "loss": 5.0, "tokens_per_s": 1000.0}\n'
            "{'train_runtime': '10.0', 'train_samples_per_second': '8.0', 'train_loss': '5.5', 'epoch': '1.0'}\n")
    df = tables.strategies_table([parse_text(text, "fs")], predicted_mem_mb=False)
    row = df.loc["fs"]
    assert (row["strategy"], row["world_size"]) == ("full_shard", 2)
    assert (row["samples_per_s"], row["tokens_per_s"]) == (8.0, 1000.0)
    assert (row["samples_per_s_vs_full_shard"], row["tokens_per_s_vs_full_shard"]) == (1.0, 1.0)
    alone = tables.strategies_table([run("ddp", None, sharding_applied="ddp")], predicted_mem_mb=False)
    assert "no full_shard run given: the 'vs_full_shard' columns are NaN" in alone.attrs["notes"]


def test_the_fsdp_table_names_its_baseline_and_predicts_unless_told() -> None:
    """Step 2's columns for each run, the baseline first; a baseline that recorded 0 MB or 0 samples/s leaves
    the relative columns NaN (nothing to divide by) instead of failing."""
    base = run("base", CONFIG, sharding_applied="none", world_size=1, peak_mem_mb=0.0, train_samples_per_s=0.0)
    fsdp = run("fs2", CONFIG, sharding_applied="full_shard", world_size=2, peak_mem_mb=4.3, train_samples_per_s=4.0,
               tensor_mem_mb_per_rank=[{"peak": 4.3, "batch_shape": [2, 40]}])
    df = tables.fsdp_vs_baseline_table(base, [fsdp])
    assert list(df.index) == ["base", "fs2"] and df.attrs["notes"][-1] == "baseline: base"
    row = df.loc["fs2"]
    assert (row["strategy"], row["world_size"], row["peak_mem_mb"], row["mem_saved_mb"]) == ("full_shard", 2, 4.3, -4.3)
    assert math.isnan(row["mem_saved_pct"]) and math.isnan(row["speed_cost_pct"])
    assert row["predicted_mem_mb"] == pytest.approx(4_493_184 / MB)   # the tiny full_shard x 2 at 2 x 40, by hand


def test_a_run_stopped_at_a_checkpoint_reads_from_its_step_lines() -> None:
    """A job stopped by the time limit at a checkpoint (no summary yet): its figures are NaN until it is resumed,
    and the note says how; what its step lines printed (steps, memory) is shown."""
    text = (f"WORKSHOP_RUN_ARGS {json.dumps({'config': {**CONFIG, 'activation_checkpointing': True}})}\n"
            "[workshop] step 1/40 | loss 6.1 | 4.0 samples/s | mem 300 MB\n"
            "[workshop] step 2/40 | loss 6.0 | 4.0 samples/s | mem 320 MB\n"
            "[workshop] step 3/40 | loss 5.9 | 4.0 samples/s | mem 310 MB\n"
            'WORKSHOP_CHECKPOINT {"step": 3}\n')
    df = tables.build("scaling", [parse_text(text, "cut")])
    assert (df.loc["cut", "steps"], df.loc["cut", "peak_mem_mb_per_gpu"]) == (3, 310.0)
    assert (df.loc["cut", "nodes"], df.loc["cut", "world_size"], df.loc["cut", "batch_size"]) == (1, 2, 2)   # config
    assert math.isnan(df.loc["cut", "samples_per_s"])
    assert ("cut: stopped at a checkpoint at step 3 before the time limit (job exit 75, CHECKPOINTED): its figures "
            "are NaN until it is resumed (resume=True, or `workshop submit ... --resume`)") in df.attrs["notes"]
    assert tables.strategies_table([parse_text(text, "cut")], False).loc["cut", "strategy"] == "full_shard+ac"


def test_scaling_orders_runs_by_world_size_then_nodes_and_unknown_last() -> None:
    """1 node x 4 before 2 nodes x 2 before 4 x 1, all 4 ranks; a run whose size is unknown comes last."""
    runs = [run(name, world_size=w, nodes=n, global_batch=8, train_samples_per_s=10.0)
            for name, w, n in (("4x1", 4, 4), ("?", None, 1), ("1x4", 4, 1), ("2x2", 4, 2), ("1x2", 2, 1))]
    assert list(tables.scaling_table(runs, predicted_mem_mb=False).index) == ["1x2", "1x4", "2x2", "4x1", "?"]


def test_the_trainers_final_dict_gives_the_scaling_tables_throughput() -> None:
    text = ("{'loss': '6.0', 'epoch': '1.0'}\n"
            "{'train_runtime': '10.0', 'train_samples_per_second': '8.0', 'train_loss': '5.5', 'epoch': '1.0'}\n")
    df = tables.scaling_table([parse_text(text, "hf")], predicted_mem_mb=False)
    assert df.loc["hf", "samples_per_s"] == 8.0
    notes = tables.scaling_table([run("old", world_size=1, global_batch_measured=None)], False).attrs["notes"]
    assert "old: global_batch_measured is NaN — a run from before the batch was counted" in notes


NCCL_LOG = Path(__file__).parent / "fixtures" / "logs" / "nccl_tests_all_reduce_perf.log"   # 4 ranks on n1, n2


def test_bus_bandwidth_from_the_same_nodes_when_no_test_ran_on_as_many_ranks() -> None:
    """2 nodes x 1 rank beside nccl-tests on the same 2 nodes with 4 ranks: that test's figures, said so."""
    runs = [run("2x1", world_size=2, nodes=2, global_batch=8, train_samples_per_s=10.0)]
    df = tables.multinode_table(runs, [NCCL_LOG], predicted_mem_mb=False)
    assert tuple(df.loc["2x1", ["avg_busbw_GBps", "max_busbw_GBps", "large_busbw_GBps"]]) == (11.0256, 26.34, 26.34)
    assert ("bus bandwidth for world size 2 is from a test on the same 2 node(s), not the same rank count"
            in df.attrs["notes"])


def test_a_bandwidth_log_without_its_layout_serves_when_it_is_the_only_one(tmp_path: Path) -> None:
    """nccl-tests' table without the device lines says neither ranks nor nodes: the one such log is used for
    every run; a log with no bandwidth table is named."""
    unsized = tmp_path / "bw.out"
    unsized.write_text("\n".join(line for line in NCCL_LOG.read_text().splitlines() if "Rank" not in line
                                 and "nThread" not in line) + "\n")
    empty = tmp_path / "empty.out"
    empty.write_text("nothing measured\n")
    runs = [run("1x2", world_size=2, nodes=1, global_batch=8, train_samples_per_s=10.0)]
    df = tables.multinode_table(runs, [unsized, empty], predicted_mem_mb=False)
    assert df.loc["1x2", "avg_busbw_GBps"] == 11.0256 and df.loc["1x2", "large_busbw_GBps"] == 26.34
    assert "empty: no bandwidth table in this log" in df.attrs["notes"]


def test_each_gap_says_where_the_figure_was_looked_for() -> None:
    """A key the summary holds as null: the run recorded no value (or the reason given); a key the summary lacks:
    not in the log's summary; no summary at all: not in the log."""
    with_summary = tables.Facts(run("s", None, steps_per_epoch=None, gpu_util_pct=None))
    for key, why in (("steps_per_epoch", None), ("gpu_util_pct", "no GPU was measured"), ("train_loss", "unused")):
        assert math.isnan(with_summary.get(key, why=why))
    assert with_summary.notes == ["s: steps_per_epoch is NaN — the run recorded no value",
                                  "s: gpu_util_pct is NaN — no GPU was measured",
                                  "s: train_loss is NaN — not in the log's summary"]
    no_summary = tables.Facts(parse_text("{'loss': '6.0', 'epoch': '1.0'}\n", "hf"))
    assert math.isnan(no_summary.get("train_loss")) and no_summary.notes == ["hf: train_loss is NaN — not in the log"]
    assert math.isnan(tables.Facts(run("n", None, world_size=True)).world_size())   # a flag is not a count


def test_what_a_peak_memory_figure_measured_is_said_beside_it() -> None:
    tensor = tables.Facts(run("cpu", None, peak_mem_mb=5.0, mem_kind="tensor"))
    assert tensor.peak_mem() == 5.0 and tensor.notes == [
        "cpu: peak_mem_mb is the tensor memory of one CPU rank (PyTorch's memory tracker on one step); rss_mb is the "
        "whole process"]
    rss = tables.Facts(run("rss", None, peak_mem_mb=500.0, mem_kind="rss"))
    rss.peak_mem(), rss.peak_mem()
    assert rss.notes == ["rss: peak_mem_mb is the peak RSS of a CPU process (mem_kind rss), not GPU memory"]   # once


def test_the_prediction_says_why_it_is_missing() -> None:
    facts = tables.Facts(run("nocfg", None))
    assert math.isnan(facts.predicted())
    assert facts.notes == ["nocfg: predicted_mem_mb is NaN — the run folder's run_args.json (batch size, sequence "
                           "length) was not given"]
    bad = tables.Facts(run("gpt", {**CONFIG, "model": "gpt-5"}))
    assert math.isnan(bad.predicted())
    assert bad.notes[-1].startswith("gpt: predicted_mem_mb is NaN — unknown model profile 'gpt-5'; use one of ")


def test_the_baseline_from_workshop_records_and_the_trainers_eval_dicts() -> None:
    """No summary: the last logged loss is the last WORKSHOP_METRICS train record's; eval losses by epoch from
    the Trainer's eval dicts (in the order of their epochs, a dict without one after those before it), the
    eval throughput from the last of them."""
    text = ('WORKSHOP_METRICS {"kind": "train", "step": 1, "loss": 6.0}\n'
            'WORKSHOP_METRICS {"kind": "train", "step": 2, "loss": 5.0}\n'
            'WORKSHOP_METRICS {"kind": "train", "step": 3, "loss": 4.5}\n'
            "{'eval_loss': '4.9', 'eval_samples_per_second': '31.5', 'epoch': '2.0'}\n"
            "{'eval_loss': '5.2', 'eval_samples_per_second': '30.0', 'epoch': '1.0'}\n"
            "{'eval_loss': '4.7', 'eval_samples_per_second': '32.0'}\n")
    row = tables.baseline_table([parse_text(text, "m")], predicted_mem_mb=False).loc["m"]
    assert row["last_logged_loss"] == 4.5 and row["eval_samples_per_s"] == 32.0
    assert (row["eval_loss_epoch1"], row["eval_loss_epoch2"], row["eval_loss_epoch3"]) == (5.2, 4.9, 4.7)


def test_memory_by_category_is_the_largest_ranks_and_host_memory_zero_without_offload() -> None:
    ranks = [{"params": 1.0, "activations": 2.0}, None, {"params": 0.5, "activations": 3.0, "host": 1.5}]
    cols = tables.Facts(run("r", None, tensor_mem_mb_per_rank=ranks, rss_mb=400.0)).memory_columns()
    assert (cols["params_mb"], cols["activations_mb"], cols["host_mb"], cols["rss_mb"]) == (1.0, 3.0, 1.5, 400.0)
    assert math.isnan(cols["grads_mb"])                             # no rank measured it
    assert tables.Facts(run("r", None, tensor_mem_mb_per_rank=ranks[:1])).memory_columns()["host_mb"] == 0


def test_the_baseline_of_a_summary_without_evaluation() -> None:
    """The summary's own last logged loss; no eval record: one eval-loss column, NaN, and the note says why."""
    df = tables.baseline_table([run("noeval", train_loss=5.5, last_logged_loss=4.25)], predicted_mem_mb=False)
    assert (df.loc["noeval", "mean_train_loss"], df.loc["noeval", "last_logged_loss"]) == (5.5, 4.25)
    assert [c for c in df.columns if c.startswith("eval_loss")] == ["eval_loss_epoch1"]
    assert math.isnan(df.loc["noeval", "eval_loss_epoch1"])
    assert "noeval: eval loss is NaN — no eval record in the log" in df.attrs["notes"]
    evaluated = tables.baseline_table([run("eval", eval_losses=[5.0])], predicted_mem_mb=False)
    assert not any("eval loss is NaN" in n for n in evaluated.attrs["notes"])


def test_a_log_that_names_no_strategy_shows_a_question_mark() -> None:
    df = tables.strategies_table([parse_text("{'loss': '6.0', 'epoch': '1.0'}\n", "bare")], predicted_mem_mb=False)
    assert df.loc["bare", "strategy"] == "?"
    assert "bare: strategy unknown — no summary or config in the log" in df.attrs["notes"]


BW_2RANKS = Path(__file__).parent / "fixtures" / "logs" / "real_bandwidth_pass_2proc.log"   # 2 ranks, 1 node


def test_each_run_gets_the_bandwidth_measured_on_its_own_rank_count() -> None:
    """Average, peak and large-message bus bandwidth, each from its own column (0.07, 0.33, 0.23 GB/s on 2 ranks);
    a rank count a test ran on needs no note, one no test ran on is NaN with the note; a run of unknown size too.
    The multinode table predicts memory unless told (here: no config, so NaN with its note)."""
    runs = [run("1x2", world_size=2, nodes=1, global_batch=8, train_samples_per_s=10.0),
            run("2x2", world_size=4, nodes=3, global_batch=8, train_samples_per_s=15.0),
            run("?", nodes=5, global_batch=8, train_samples_per_s=15.0)]
    df = tables.multinode_table(runs, [BW_2RANKS])
    assert tuple(df.loc["1x2", ["avg_busbw_GBps", "max_busbw_GBps", "large_busbw_GBps"]]) == (0.07, 0.33, 0.23)
    assert all(math.isnan(v) for v in df.loc[["2x2", "?"], "avg_busbw_GBps"])
    notes = df.attrs["notes"]
    assert "bus bandwidth is NaN where no bandwidth log ran on that many ranks" in notes
    assert not any("not the same rank count" in n for n in notes)
    assert "predicted_mem_mb" in df.columns and "predicted_mem_mb" not in tables.multinode_table(runs, [], False)
    assert "no bandwidth log given: bus bandwidth columns are NaN (run `workshop bandwidth`)" in \
        tables.multinode_table(runs, [], False).attrs["notes"]


def test_a_log_without_a_table_does_not_hide_the_logs_after_it(tmp_path: Path) -> None:
    """The transport NCCL chose is said beside the figures; a test on one rank serves no 2-rank run."""
    empty, one_rank, nccl = tmp_path / "empty.out", tmp_path / "one.out", tmp_path / "nccl.out"
    empty.write_text("nothing measured\n")
    one_rank.write_text("\n".join(line for line in NCCL_LOG.read_text().splitlines() if "Rank" not in line) + "\n")
    nccl.write_text("n1:1:1 [0] NCCL INFO Channel 00/02 : 0[0] -> 1[1] via P2P/IPC\n" + BW_2RANKS.read_text())
    runs = [run("1x2", world_size=2, nodes=1, global_batch=8, train_samples_per_s=10.0)]
    df = tables.multinode_table(runs, [empty, one_rank, nccl], predicted_mem_mb=False)
    assert df.loc["1x2", "avg_busbw_GBps"] == 0.07
    assert "nccl: transport: inside a node P2P/IPC" in df.attrs["notes"]
    assert math.isnan(tables.multinode_table(runs, [one_rank], False).loc["1x2", "avg_busbw_GBps"])


def test_notes_say_why_memory_and_em_f1_are_missing() -> None:
    df = tables.baseline_table([run("old", em_after=None, f1_after=None)], predicted_mem_mb=False)
    notes = df.attrs["notes"]
    assert "old: em_after is NaN — EM/F1 generation was off (eval_generate=false)" in notes
    assert "old: f1_after is NaN — EM/F1 generation was off (eval_generate=false)" in notes
    assert ("old: memory by category is NaN — the run measured no tensor memory (a run from before the tracker, or "
            "one that stopped before its measured step)") in notes


def test_a_table_without_speed_comparisons_still_has_its_speed_notes() -> None:
    """Step 5 mixes runs and bandwidth logs, and no runs at all is an empty table: no speed notes, an empty list."""
    two = run("2x2", world_size=4, nodes=2, global_batch=8, train_samples_per_s=15.0)
    assert tables.build("multinode", [two, NCCL_LOG]).attrs["speed_notes"] == []
    empty = tables.build("baseline", [])
    assert empty.empty and empty.attrs["speed_notes"] == [] and empty.attrs["notes"] == []


def test_a_run_without_throughput_is_not_the_scaling_reference() -> None:
    """The smallest world with a throughput is the reference: 1 rank recorded none, so 2 ranks is it."""
    runs = [run("w1", world_size=1, nodes=1, global_batch=8), run("w2", world_size=2, nodes=1, global_batch=8,
                                                                   train_samples_per_s=10.0),
            run("w4", world_size=4, nodes=1, global_batch=8, train_samples_per_s=18.0)]
    df = tables.scaling_table(runs, predicted_mem_mb=False)
    assert list(df.loc[["w2", "w4"], "speedup"]) == pytest.approx([1.0, 1.8])
    assert "speed-up relative to w2 (world size 2)" in df.attrs["notes"]


def test_the_scaling_tables_columns_and_its_notes_in_full() -> None:
    """Notebook 05's table: speed-up and efficiency beside the batch; every run's notes kept, each once; runs of
    unknown size at the end with NaN speed-ups; exactly 115 % efficiency is still noise."""
    runs = [run("w1", world_size=1, nodes=1, global_batch=8, train_samples_per_s=10.0),
            run("w2", world_size=2, nodes=1, global_batch=16, train_samples_per_s=23.0),
            run("?a", nodes=1, global_batch=8), run("?b", nodes=1, global_batch=8)]
    df = tables.scaling_table(runs, predicted_mem_mb=False)
    assert list(df.columns) == ["nodes", "world_size", "global_batch", "samples_per_s", "speedup", "efficiency",
                                "peak_mem_mb_per_gpu"]
    assert df.loc["w2", "efficiency"] == 1.15 and math.isnan(df.loc["?b", "speedup"])
    notes = df.attrs["notes"]
    assert not any("above perfect scaling" in n for n in notes)
    assert "global batch differs between runs ([8.0, 16.0]): this is not a constant-batch scaling comparison; keep " \
           "batch_size x grad_acc x world_size equal" in notes
    assert {f"{r}: world_size is NaN — not in the log's summary" for r in ("?a", "?b")} <= set(notes)
    assert len(notes) == len(set(notes))


def test_a_table_of_one_task_of_several_says_it_reads_global_rank_0() -> None:
    text = ("0: {'train_runtime': '4.0', 'train_samples_per_second': '5.0', 'train_loss': '2.0', 'epoch': '2.0'}\n"
            "1: {'train_runtime': '4.0', 'train_samples_per_second': '9.0', 'train_loss': '2.0', 'epoch': '2.0'}\n"
            '1: WORKSHOP_SUMMARY {"status": "completed", "train_samples_per_s": 9.0}\n')
    notes = tables.baseline_table([parse_text(text, "two")], predicted_mem_mb=False).attrs["notes"]
    assert notes[0].startswith("two: figures from global rank 0 only (the lines labelled 1:)")


def test_odd_counts_print_as_integers_too() -> None:
    df = tables.scaling_table([run(f"w{w}", world_size=w, nodes=w, global_batch=6, train_samples_per_s=3.0 * w)
                               for w in (1, 3)], predicted_mem_mb=False)
    assert [str(df[c].dtype) for c in ("nodes", "world_size", "global_batch")] == ["int64"] * 3
