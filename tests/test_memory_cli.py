"""`workshop estimate`: what the command prints for each of its flags, and how it refuses what it cannot
predict. The figures are the memory model's, worked by hand in tests/test_memory_by_hand.py; here each flag
must reach it."""

from __future__ import annotations

import json

import pytest

from workshop.results import memory
from workshop.results.memory import MB

P_TINY = 322_368        # the tiny model's parameters (tests/test_memory.py)


def test_a_usage_error_names_the_command_and_the_strategies(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse refuses a strategy the training config does not know, before the model is asked."""
    with pytest.raises(SystemExit) as e:
        memory.main(["--sharding", "zero3"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("usage: workshop estimate ")
    assert "argument --sharding: invalid choice: 'zero3' (choose from " in err and "'hybrid_shard'" in err


def test_hybrid_shard_keeps_one_replica_unless_told(capsys: pytest.CaptureFixture[str]) -> None:
    """--replicas defaults to 1: hybrid_shard on 4 then shards over all 4; 2 replicas shard over 2 each."""
    assert memory.main(["--model", "tiny", "--sharding", "hybrid_shard", "--world-size", "4"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"parameters: {P_TINY:,} (sharded over 4)"
    assert memory.main(["--model", "tiny", "--sharding", "hybrid_shard", "--world-size", "4", "--replicas", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"parameters: {P_TINY:,} (sharded over 2)"


def test_json_carries_the_model_its_parameters_and_every_category(capsys: pytest.CaptureFixture[str]) -> None:
    """The tiny model, full_shard on 2, fp32, 2 x 32: with --grad-acc 2 every unit keeps its fp32 unsharded
    gradient (4P); with --activation-checkpointing the activations are 1,085,440 B (a block's inputs, the
    mask, the outside terms and one block recomputed, tests/test_memory.py)."""
    tiny = ["--model", "tiny", "--sharding", "full_shard", "--world-size", "2", "--precision", "fp32",
            "--batch-size", "2", "--max-length", "32", "--json"]
    assert memory.main([*tiny, "--grad-acc", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "tiny" and data["n_params"] == P_TINY
    assert data["unsharded_grads"] == pytest.approx(4 * P_TINY / MB)
    assert {"params", "grads", "optimizer", "activations", "other", "peak", "gpu_peak", "host"} <= set(data)
    assert memory.main([*tiny, "--activation-checkpointing"]) == 0
    assert json.loads(capsys.readouterr().out)["activations"] == pytest.approx(1_085_440 / MB)


def fit_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("largest BLOOM-shaped model")]


def test_what_fits_is_said_for_the_unsharded_baseline_and_the_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    """One GPU: the baseline is one process ("none"); bloom-3b (3,002,557,440 parameters) fits 79 GiB."""
    assert memory.main(["--sharding", "none", "--fit-gpu-gb", "79"]) == 0
    assert fit_lines(capsys.readouterr().out) == [
        "largest BLOOM-shaped model in 79 GiB with none on 1 GPU(s): 3.00 B params (hidden 2560, 30 layers)"] * 2


def test_offload_and_checkpointing_reach_the_fit_but_not_the_ddp_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    """8 GPUs of 40 GiB, bf16, 8 x 512: DDP fits bloom-1b1 whatever the flags (DDP cannot offload: the
    baseline is asked without it, where it once raised "offload needs an FSDP strategy"); full_shard fits
    bloom-3b, with checkpointing the 13.87 B rung, with offload too the largest, 176.25 B."""
    ddp = "largest BLOOM-shaped model in 40 GiB with ddp on 8 GPU(s): 1.07 B params (hidden 1536, 24 layers)"
    full = "largest BLOOM-shaped model in 40 GiB with full_shard on 8 GPU(s): {}"
    for flags, fits in (((), "3.00 B params (hidden 2560, 30 layers)"),
                        (("--activation-checkpointing",), "13.87 B params (hidden 5120, 40 layers)"),
                        (("--activation-checkpointing", "--offload"), "176.25 B params (hidden 14336, 70 layers)")):
        assert memory.main(["--world-size", "8", "--fit-gpu-gb", "40", *flags]) == 0
        assert fit_lines(capsys.readouterr().out) == [ddp, full.format(fits)], flags


def test_hybrid_replicas_reach_the_fit(capsys: pytest.CaptureFixture[str]) -> None:
    """hybrid_shard on 8 GPUs of 24 GiB, 1 x 256 tokens: sharded over all 8 (1 replica) bloom-7b1 fits, over
    4 ranks (2 replicas) bloom-3b."""
    hybrid = ["--sharding", "hybrid_shard", "--world-size", "8", "--batch-size", "1", "--max-length", "256",
              "--fit-gpu-gb", "24"]
    assert memory.main(hybrid) == 0
    assert fit_lines(capsys.readouterr().out)[1].endswith("7.07 B params (hidden 4096, 30 layers)")
    assert memory.main([*hybrid, "--replicas", "2"]) == 0
    assert fit_lines(capsys.readouterr().out)[1].endswith("3.00 B params (hidden 2560, 30 layers)")


def test_the_course_table_follows_the_flags_it_is_given(capsys: pytest.CaptureFixture[str]) -> None:
    assert memory.main(["--course", "--model", "bloom-1b1", "--precision", "fp32", "--batch-size", "2",
                        "--max-length", "256"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "bloom-1b1, fp32, batch 2 x 256 tokens per GPU (MB per GPU):"
    assert out == memory.course_table("bloom-1b1", "fp32", 2, 256) + "\n"
