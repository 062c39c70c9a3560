"""Per-step training metrics every rank agrees on: throughput, memory, GPU utilisation and MFU.

MFU (model FLOPs utilisation) = achieved model FLOP/s / the device's peak FLOP/s, with the model
FLOPs of one trained token taken as (Kaplan et al. 2020; PaLM, Chowdhery et al. 2022, App. B):

    flops_per_token = 6 * N  +  12 * n_layer * hidden * seq_len

N counts every distinct parameter (BLOOM ties lm_head to the embedding, so the logits matmul is
counted once); the second term is attention's score and value matmuls at the batch's mean non-pad
length. Only non-pad tokens count. Activation checkpointing's recomputation is not counted: MFU
measures useful work, not hardware work. On a CPU there is no honest peak, so MFU is left empty.
"""

from __future__ import annotations

import json
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback

# Dense peak TFLOP/s by GPU name fragment and compute precision (vendor data sheets, SXM parts).
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "H100": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "A100": {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
    "V100": {"fp16": 125.0, "fp32": 15.7},
    "L40S": {"bf16": 362.0, "fp16": 362.0, "fp32": 91.6},
    "A10": {"bf16": 125.0, "fp16": 125.0, "fp32": 31.2},
}


def flops_per_token(n_params: int, n_layer: int, hidden: int, seq_len: float) -> float:
    return 6.0 * n_params + 12.0 * n_layer * hidden * seq_len


def peak_tflops(device: torch.device, precision: str) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for fragment, peaks in PEAK_TFLOPS.items():
        if fragment in name:
            return peaks.get(precision)
    return None


def peak_memory_mb(device: torch.device) -> tuple[float, float | None, str]:
    """(peak used, peak reserved or None, kind): CUDA allocator peaks on a GPU, peak RSS on a CPU."""
    if device.type == "cuda":
        return (torch.cuda.max_memory_allocated(device) / 2**20,
                torch.cuda.max_memory_reserved(device) / 2**20, "cuda_allocated")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, None, "rss"


def gpu_utilisation(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    try:
        return float(torch.cuda.utilization(device))
    except Exception:  # NVML missing or not permitted: report nothing rather than a guess
        return None


@dataclass
class StepCounter:
    """Samples and non-pad tokens this rank has trained on since the last log."""

    samples: int = 0
    tokens: int = 0
    totals: dict[str, float] = field(default_factory=lambda: {"samples": 0, "tokens": 0, "seconds": 0.0})

    def add(self, batch: dict[str, torch.Tensor]) -> None:
        self.samples += int(batch["input_ids"].shape[0])
        mask = batch.get("attention_mask")
        self.tokens += int(mask.sum()) if mask is not None else int(batch["input_ids"].numel())


def _all_reduce_sum(values: list[float]) -> list[float]:
    if not (dist.is_available() and dist.is_initialized()):
        return values
    t = torch.tensor(values, dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t)
    return t.cpu().tolist()


def _all_gather(value: Any) -> list[Any]:
    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


class MetricsCallback(TrainerCallback):
    """Writes metrics.jsonl and prints the step line; every rank joins the collectives in on_log."""

    def __init__(self, out_dir: Path, counter: StepCounter, device: torch.device, precision: str,
                 n_params: int, n_layer: int, hidden: int, is_main: bool) -> None:
        self.path = Path(out_dir) / "metrics.jsonl"
        self.counter, self.device, self.precision, self.is_main = counter, device, precision, is_main
        self.n_params, self.n_layer, self.hidden = n_params, n_layer, hidden
        self.peak = peak_tflops(device, precision)
        self.records: list[dict[str, Any]] = []
        self._last = time.perf_counter()
        self.on_train_begin_hooks: list[Any] = []

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
        for hook in self.on_train_begin_hooks:
            hook()
        self._last = time.perf_counter()

    def _emit(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if not self.is_main:
            return
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        print("WORKSHOP_METRICS " + json.dumps(record), flush=True)

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
        logs = logs or {}
        if "loss" in logs:
            now = time.perf_counter()
            elapsed, self._last = now - self._last, now
            samples, tokens = _all_reduce_sum([self.counter.samples, self.counter.tokens])
            self.counter.totals["samples"] += samples
            self.counter.totals["tokens"] += tokens
            self.counter.totals["seconds"] += elapsed
            self.counter.samples = self.counter.tokens = 0
            used, reserved, kind = peak_memory_mb(self.device)
            per_rank = _all_gather(round(used, 1))
            reserved_all = _all_gather(reserved)
            seq = tokens / samples if samples else 0.0
            tok_s = tokens / elapsed if elapsed > 0 else 0.0
            tflops = tok_s * flops_per_token(self.n_params, self.n_layer, self.hidden, seq) / 1e12
            world = len(per_rank)
            record = {
                "kind": "train", "step": state.global_step, "epoch": round(state.epoch or 0.0, 4),
                "loss": float(logs["loss"]), "learning_rate": float(logs.get("learning_rate", 0.0)),
                "grad_norm": float(logs["grad_norm"]) if "grad_norm" in logs else None,
                "step_time_s": round(elapsed / max(1, args.logging_steps), 4),
                "samples_per_s": round(samples / elapsed, 3) if elapsed > 0 else None,
                "tokens_per_s": round(tok_s, 1), "peak_mem_mb": max(per_rank),
                "peak_mem_mb_per_rank": per_rank, "mem_kind": kind,
                "peak_reserved_mb": max(r for r in reserved_all) if reserved is not None else None,
                "gpu_util_pct": gpu_utilisation(self.device), "tflops": round(tflops, 6),
                "mfu": round(tflops / (self.peak * world), 4) if self.peak else None,
            }
            self._emit(record)
            if self.is_main:
                mfu = f"{record['mfu']:.1%}" if record["mfu"] is not None else "n/a"
                print(f"[workshop] step {state.global_step}/{state.max_steps} | loss {record['loss']:.4f} | "
                      f"{record['samples_per_s']} samples/s | {record['tokens_per_s']:.0f} tok/s | "
                      f"mem {record['peak_mem_mb']:.0f} MB | mfu {mfu}", flush=True)
        elif "eval_loss" in logs:
            self._emit({"kind": "eval", "step": state.global_step, "epoch": round(state.epoch or 0.0, 4),
                        "eval_loss": float(logs["eval_loss"]),
                        "eval_samples_per_s": logs.get("eval_samples_per_second"),
                        "eval_runtime_s": logs.get("eval_runtime")})
            # evaluation time is not training time
            self._last = time.perf_counter()
