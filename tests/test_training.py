"""The course's promises about training, checked with real torch.distributed processes on gloo."""

from __future__ import annotations

import json

import pytest

from tests.runs import RunCache

pytestmark = pytest.mark.slow
RTOL = 1e-3


def eval_losses(runs: RunCache, *flags: str, nproc: int = 2, nnodes: int = 1) -> list[float]:
    return runs.get(*flags, nproc=nproc, nnodes=nnodes).summary["eval_losses"]


@pytest.mark.parametrize("flags", [
    ("--sharding", "full_shard"),
    ("--sharding", "shard_grad_op"),
    ("--sharding", "full_shard", "--offload"),
], ids=["full_shard", "shard_grad_op", "offload"])
def test_fsdp_strategy_matches_ddp_at_2_ranks(runs: RunCache, flags: tuple[str, ...]) -> None:
    ddp = eval_losses(runs, "--sharding", "ddp")
    fsdp = eval_losses(runs, *flags)
    assert len(ddp) == len(fsdp) == 2
    assert fsdp == pytest.approx(ddp, rel=RTOL)


def test_hsdp_2x2_matches_ddp_at_4_ranks(runs: RunCache) -> None:
    ddp = eval_losses(runs, "--sharding", "ddp", nproc=4)
    hsdp = runs.get("--sharding", "hybrid_shard", "--hybrid-replicas", "2", nproc=4).summary
    assert hsdp["sharding_applied"] == "hybrid_shard" and hsdp["mesh"] == [2, 2]
    assert hsdp["eval_losses"] == pytest.approx(ddp, rel=RTOL)


def test_fsdp1_hybrid_shard_zero2_keeps_parameters_gathered_until_backward(runs: RunCache) -> None:
    """FSDP1's _HYBRID_SHARD_ZERO2 is HYBRID_SHARD with SHARD_GRAD_OP inside each shard group: a 2-D
    mesh and reshard_after_forward=False, read back from the wrapped model; same losses as DDP."""
    ddp = eval_losses(runs, "--sharding", "ddp", nproc=4)
    zero2 = runs.get("--sharding", "_hybrid_shard_zero2", "--hybrid-replicas", "2", nproc=4).summary
    assert zero2["sharding_requested"] == zero2["sharding_applied"] == "hybrid_shard_grad_op"
    assert zero2["mesh"] == [2, 2] and zero2["reshard_after_forward"] is False
    assert zero2["eval_losses"] == pytest.approx(ddp, rel=RTOL)


def test_ddp_does_not_search_for_unused_parameters(runs: RunCache) -> None:
    run = runs.get("--sharding", "ddp", nproc=2)
    assert run.summary["sharding_applied"] == "ddp"
    assert "find_unused_parameters" not in run.log          # DDP warns when it searched and found none


def test_throughput_counts_the_steady_steps_only(runs: RunCache) -> None:
    """12 steps at 2 ranks: step 1 is the warm-up, step 2 the tensor-memory tracker's, step 3 the one whose
    collectives were recorded; all three reach the window through StepCounter.leave_out_of_throughput.
    The figure is steps 4..12's samples over exactly the time recorded for the segments that hold them.
    (The mechanism, not the clock: a timing-based equality between two clocks fails on a busy machine.)"""
    import json

    run = runs.get("--sharding", "full_shard", nproc=2)
    s = run.summary
    window = s["throughput_window"]
    assert window["counted_steps"] == [[4, 12]] and window["steps_counted"] == 9
    assert window["excluded_steps"] == {"comm": [3], "tensor_memory": [2], "warmup": [1]}
    assert s["comm"]["step"] == 3
    # the segments cover the counted steps and nothing else (an epoch's end cuts them: 6 steps an epoch)
    covered = [step for first, last, _ in window["segments"] for step in range(first, last + 1)]
    assert covered == list(range(4, 13)) and [seg[:2] for seg in window["segments"]] == [[4, 6], [7, 12]]
    assert window["seconds"] == pytest.approx(sum(seg[2] for seg in window["segments"]), abs=1e-5)
    assert window["samples"] == 9 * s["global_batch"]          # both ranks' samples of the counted steps
    assert s["train_samples_per_s"] == pytest.approx(window["samples"] / window["seconds"], abs=1e-3)
    assert s["train_tokens_per_s"] == pytest.approx(window["tokens"] / window["seconds"], abs=0.1)
    assert 0 < window["seconds"] < s["train_runtime_s"]
    records = [json.loads(x) for x in (run.out_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train" and not r["counted"]] == [1, 2, 3]


def test_two_node_launch_matches_ddp_at_2_ranks(runs: RunCache) -> None:
    ddp = eval_losses(runs, "--sharding", "ddp")
    two_nodes = runs.get("--sharding", "full_shard", nproc=1, nnodes=2, torchrun=True).summary   # c10d rendezvous
    assert two_nodes["nodes"] == 2 and two_nodes["world_size"] == 2
    assert sorted(set(two_nodes["hosts"])) == ["node1", "node2"]     # two distinct nodes, one rank each
    assert two_nodes["eval_losses"] == pytest.approx(ddp, rel=RTOL)


def test_equality_tests_are_not_vacuous(runs: RunCache) -> None:
    """Guards the equality tests above: training moves the loss far more than the tolerance, and a
    different seed (other init, other data order) lands somewhere else."""
    ddp = eval_losses(runs, "--sharding", "ddp")
    other = eval_losses(runs, "--sharding", "ddp", "--seed", "7")
    initial = 6.93  # ln(vocab 1024): an untrained model's loss
    assert ddp[-1] < initial * (1 - 20 * RTOL)
    assert abs(other[-1] - ddp[-1]) > 5 * RTOL * ddp[-1]


@pytest.mark.parametrize("sharding,reshard", [("full_shard", True), ("shard_grad_op", False)])
def test_full_shard_leaves_each_rank_half_the_parameters(runs: RunCache, sharding: str, reshard: bool) -> None:
    s = runs.get("--sharding", sharding, nproc=2).summary
    total = s["params_total"]
    assert len(s["params_local_per_rank"]) == 2
    for local in s["params_local_per_rank"]:
        assert local == pytest.approx(total / 2, rel=0.01)
    assert s["reshard_after_forward"] is reshard


@pytest.mark.parametrize("flags", [("--sharding", "full_shard"), ("--sharding", "shard_grad_op"),
                                   ("--sharding", "full_shard", "--offload")])
def test_asking_for_fsdp_never_yields_ddp(runs: RunCache, flags: tuple[str, ...]) -> None:
    s = runs.get(*flags, nproc=2).summary
    assert s["wrapper"] == "FSDPBloomForCausalLM"
    assert s["sharding_applied"] == s["sharding_requested"]
    assert s["offload_applied"] is ("--offload" in flags)


def test_ddp_holds_full_replicas(runs: RunCache) -> None:
    s = runs.get("--sharding", "ddp", nproc=2).summary
    assert s["wrapper"] == "DistributedDataParallel"
    assert s["params_local_per_rank"] == [s["params_total"]] * 2


def test_a_longer_run_learns_the_training_answers(runs: RunCache) -> None:
    s = runs.get("--train-size", "16", "--eval-size", "16", "--eval-split", "train", "--epochs", "40",
                 "--learning-rate", "5e-3", "--eval-generate", nproc=1).summary
    assert s["f1_after"] > s["f1_before"]
    assert s["final_eval_loss"] < s["eval_losses"][0]


def test_run_leaves_its_records(runs: RunCache) -> None:
    import json

    run = runs.get("--sharding", "full_shard", nproc=2)
    args = json.loads((run.out_dir / "run_args.json").read_text())
    assert args["config"]["sharding"] == "full_shard" and args["config"]["world_size"] == 2
    assert args["versions"]["torch"].startswith("2.13.0")
    lines = [json.loads(x) for x in (run.out_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in lines if r["kind"] == "train"]
    assert train and all(r["tokens_per_s"] > 0 and len(r["peak_mem_mb_per_rank"]) == 2 for r in train)
    assert [r["eval_loss"] for r in lines if r["kind"] == "eval"] == run.summary["eval_losses"]
    assert "WORKSHOP_SUMMARY " in run.log and "[workshop] step" in run.log


def test_a_job_log_alone_says_what_ran_and_predicts_its_memory(runs: RunCache) -> None:
    from workshop.results.logs import parse_log
    from workshop.results.tables import strategies_table

    run = runs.get("--sharding", "full_shard", nproc=2)
    parsed = parse_log(run.out_dir / "job.log")
    assert parsed.config["sharding"] == "full_shard" and parsed.config["world_size"] == 2
    assert sorted(f.rank for f in parsed.rank_facts) == [0, 1]
    table = strategies_table([run.out_dir / "job.log"])
    assert table.iloc[0]["predicted_mem_mb"] > 0


def test_one_process_without_sharding_is_a_plain_model(runs: RunCache) -> None:
    """torchrun with one process and sharding=none must not pay for a one-rank DDP wrapper."""
    s = runs.get("--train-size", "16", "--eval-size", "16", "--eval-split", "train", "--epochs", "40",
                 "--learning-rate", "5e-3", "--eval-generate", nproc=1).summary
    assert s["wrapper"] == "BloomForCausalLM" and s["sharding_applied"] == "none"


def test_one_process_fsdp_without_torchrun_equals_the_torchrun_run(runs: RunCache) -> None:
    """A one-process job starts with plain python (slurm/templates/launch-process.sh): the run gives
    itself torchrun's environment, still shards, and trains exactly as under torchrun."""
    direct = runs.get("--sharding", "full_shard", nproc=1).summary                 # plain python (tests/runs.py)
    launched = runs.get("--sharding", "full_shard", nproc=1, torchrun=True).summary
    assert direct["wrapper"] == launched["wrapper"] == "FSDPBloomForCausalLM"
    assert direct["sharding_applied"] == "full_shard" and direct["world_size"] == 1
    assert direct["process_group_backend"] == launched["process_group_backend"] == "gloo"   # FSDP2 makes a one-rank group
    assert direct["eval_losses"] == pytest.approx(launched["eval_losses"], rel=RTOL)


def test_the_fixture_path_never_imports_datasets() -> None:
    """transformers.trainer imports `datasets` (and pandas, pyarrow) whenever it is installed; the
    fixture path hides it, any other dataset keeps it (data.load_examples loads SQuAD with it)."""
    import importlib.util
    import subprocess
    import sys

    from workshop.training.config import RunConfig
    from workshop.training.train import skip_datasets_unless_needed

    skip_datasets_unless_needed(RunConfig(dataset="squad"))
    assert importlib.util.find_spec("datasets") is not None
    probe = ("import sys; from workshop.training.config import RunConfig; from workshop.training.train import skip_datasets_unless_needed; "
             "skip_datasets_unless_needed(RunConfig(dataset='fixture')); import workshop.training.trainer; "
             "from transformers.utils import is_datasets_available; "
             "print(is_datasets_available(), sorted(m for m in ('datasets', 'pandas', 'pyarrow') if sys.modules.get(m)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.splitlines()[-1] == "False []"


@pytest.mark.parametrize("loss", ["answer_only"])
def test_answer_only_loss_matches_the_full_loss_under_full_shard_at_2_ranks(runs: RunCache, loss: str) -> None:
    """The answer-only loss, computed inside the FSDP2 root with the tied lm_head, trains the same model:
    the same training loss and eval losses at every evaluation, far fewer logits."""
    full = runs.get("--sharding", "full_shard", nproc=2).summary
    small = runs.get("--sharding", "full_shard", "--loss", loss, nproc=2).summary
    assert (full["loss"], small["loss"]) == ("full", loss)
    assert small["train_loss"] == pytest.approx(full["train_loss"], rel=1e-5)
    assert small["eval_losses"] == pytest.approx(full["eval_losses"], rel=1e-5)
    assert full["eval_losses"][0] - full["eval_losses"][-1] > 0.1   # the runs trained: equality is not vacuous
    for f, a in zip(full["logits_mb_per_rank"], small["logits_mb_per_rank"]):
        assert 0 < 10 * a < f


# What a forked rank and a torchrun rank may differ in: the clock (the tracker's overhead is timed), the process's RSS
TIMED = ("train_samples_per_s", "train_tokens_per_s", "eval_samples_per_s", "train_runtime_s", "rss_mb",
         "throughput_window", "comm", "tensor_mem_overhead_pct")
# The tensor tracker's activations (and so its peak) hold what an async collective had not freed yet when it looked:
# 13.106 against 12.827 MB on one rank of a loaded CI run. Its parameters, gradients and optimizer state are exact.
TRACKED = ("tensor_mem_mb_per_rank", "peak_mem_mb", "peak_mem_mb_per_rank")


def test_a_forked_run_is_the_torchrun_run(runs: RunCache) -> None:
    """tests/warm_parent.py forks the tests' ranks with the environment torchrun's agent gives a rank (copied from
    torch's local_elastic_agent): the same flags under a real torchrun give the same summary, every field but the
    clock's and the launcher's, so a fork never stands in for a run the launcher would have made differently."""
    forked = runs.get("--sharding", "full_shard", nproc=2).summary
    launched = runs.get("--sharding", "full_shard", nproc=2, torchrun=True).summary
    differ = sorted(k for k in forked.keys() | launched.keys()
                    if k not in TIMED + TRACKED and forked.get(k) != launched.get(k))
    assert differ == [], {k: (forked.get(k), launched.get(k)) for k in differ}
    exact = ("params", "grads", "optimizer")
    assert [{k: r[k] for k in exact} for r in forked["tensor_mem_mb_per_rank"]] == \
        [{k: r[k] for k in exact} for r in launched["tensor_mem_mb_per_rank"]]
    assert forked["world_size"] == 2 and forked["eval_losses"][0] != forked["eval_losses"][-1]
