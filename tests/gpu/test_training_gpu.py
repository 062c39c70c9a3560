"""The training script on CUDA: every configuration completes and reads back what it applied; FSDP2 at
world size 1 trains the same model as no FSDP; MFU comes from the data sheet of this GPU."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.gpu.conftest import PRECISIONS, RUNS, GpuRun

MP_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)


@pytest.mark.parametrize("name", RUNS)
def test_run_completes_on_cuda_and_reads_back_its_strategy(gpu_runs: dict[str, GpuRun], figures: Any,
                                                           name: str) -> None:
    run = gpu_runs[name]
    strategy, precision = name.rsplit("-", 1)
    s = run.summary
    figures.put(f"run[{name}]", exit=run.returncode, wall_s=round(run.wall_s, 1), status=s.get("status"),
                device_name=s.get("device_name"), sharding_applied=s.get("sharding_applied"), wrapper=s.get("wrapper"),
                offload_applied=s.get("offload_applied"), mp_param_dtype=s.get("mp_param_dtype"),
                activation_checkpointing_applied=s.get("activation_checkpointing_applied"),
                grad_scaler=s.get("grad_scaler"), steps=s.get("steps"), final_eval_loss=s.get("final_eval_loss"),
                peak_mem_mb=s.get("peak_mem_mb"), peak_reserved_mb=s.get("peak_reserved_mb"))
    assert run.returncode == 0 and s["status"] == "completed", run.log[-3000:]
    assert s["device"] == "cuda" and s["device_name"] == _device_name()
    assert s["precision"] == precision and s["mem_kind"] == "cuda_allocated"
    assert s["steps"] == s["steps_per_epoch"] and math.isfinite(s["final_eval_loss"])
    fsdp = strategy != "none"
    assert s["sharding_applied"] == ("full_shard" if fsdp else "none"), s["wrapper"]
    assert s["wrapper"].startswith("FSDP") == fsdp, s["wrapper"]
    assert bool(s["offload_applied"]) == (strategy == "offload")
    assert s["activation_checkpointing_applied"] == (strategy == "activation_checkpointing")
    if fsdp:  # accelerate's MixedPrecisionPolicy computes every unit in the run's precision
        assert s["mp_param_dtype"] == MP_DTYPE[precision] and s["blocks_wrapped"] == s["n_layer"]
    scaler = s.get("grad_scaler")
    if precision == "fp16":   # fp16 trains only with loss scaling, with FSDP2 as without
        assert scaler and scaler["type"].endswith("GradScaler") and scaler["enabled"], scaler
    else:
        assert not (scaler and scaler.get("enabled")), f"bf16 needs no gradient scaler, yet one ran: {scaler}"


def _train_losses(run: GpuRun) -> list[float]:
    return [r["loss"] for r in run.records if r.get("kind") == "train"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_fsdp2_matches_no_fsdp_at_world_size_one(gpu_runs: dict[str, GpuRun], figures: Any, precision: str) -> None:
    """Same seed, same data, one GPU: FULL_SHARD over a world of one trains the model no FSDP trains.
    They differ only in how they compute in 16 bits (autocast vs MixedPrecisionPolicy), so the losses
    agree within the precision's tolerance (workshop.grading.consistency), not bit for bit."""
    from workshop.grading.consistency import consistency_tolerance, losses_consistent

    plain, fsdp = gpu_runs[f"none-{precision}"].summary, gpu_runs[f"full_shard-{precision}"].summary
    a, b = _train_losses(gpu_runs[f"none-{precision}"]), _train_losses(gpu_runs[f"full_shard-{precision}"])
    tol = consistency_tolerance(plain, fsdp)
    step_rel = [abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in zip(a, b)]
    ok, sentence = losses_consistent(plain, fsdp)
    figures.put(f"fsdp2_vs_none[{precision}]", tolerance=tol, eval_none=plain["eval_losses"],
                eval_full_shard=fsdp["eval_losses"], train_none=a, train_full_shard=b,
                worst_step_rel=max(step_rel, default=None), scaler_none=plain.get("grad_scaler"),
                scaler_full_shard=fsdp.get("grad_scaler"), verdict=sentence)
    assert len(a) == len(b) > 0, f"train records: {len(a)} without FSDP, {len(b)} with"
    assert ok, sentence
    assert max(step_rel) <= tol, f"a training step's loss differs by {max(step_rel):.2e} (relative), tolerance {tol:.1e}"


def test_mfu_from_the_summary_uses_this_gpus_peak(gpu_runs: dict[str, GpuRun], figures: Any) -> None:
    """MFU = the run's model FLOP/s over the data-sheet peak of this GPU (workshop.training.metrics).
    The tier's runs share the GPU, so the figure itself is no benchmark (workshop bench measures alone):
    this checks that the peak table knows the GPU and that every record's MFU is its own TFLOP/s over it."""
    from workshop.training.metrics import flops_per_token, peak_for_name
    from workshop.training.models import BLOOM_560M

    run = gpu_runs["none-bf16"]
    s = run.summary
    peak = peak_for_name(s["device_name"], "bf16")
    records = [r for r in run.records if r.get("kind") == "train"]
    window = [r for r in records if r.get("counted")]      # records whose steps the summary's throughput counts
    figures.put("mfu", device_name=s["device_name"], peak_tflops_bf16=peak, summary_mfu=s.get("mfu"),
                record_mfu=[r.get("mfu") for r in window], record_tflops=[r.get("tflops") for r in window],
                note="tier runs share the GPU: see the bench for the measured MFU")
    assert peak is not None, (f"no data-sheet peak for {s['device_name']!r} in workshop.training.metrics.PEAK_TFLOPS: "
                              "add the GPU's dense bf16/fp16/fp32 TFLOP/s from its data sheet")
    assert window and s["mfu"] is not None
    for r in window:
        seq = r["tokens_per_s"] / r["samples_per_s"]      # mean non-pad tokens per sample of that record
        flops = r["tokens_per_s"] * flops_per_token(s["params_total"], s["n_layer"], BLOOM_560M["hidden_size"], seq)
        assert r["tflops"] == pytest.approx(flops / 1e12, rel=1e-3), r
        assert r["mfu"] == pytest.approx(r["tflops"] / peak, abs=1e-4), r
    assert 0 < s["mfu"] < 1
    assert min(r["mfu"] for r in window) - 1e-4 <= s["mfu"] <= max(r["mfu"] for r in window) + 1e-4
