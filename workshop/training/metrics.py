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
import re
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from workshop.training.run_record import say

# Dense (no structured sparsity) peak TFLOP/s by the name torch.cuda.get_device_name() reports, most
# specific pattern first: an H100 PCIe or NVL is not an SXM, an A10G is not an A10. Sources, NVIDIA's
# data sheets (they print sparse figures with a *; the dense figure is half):
#   H100 SXM / NVL: "NVIDIA H100 Tensor Core GPU" data sheet (SXM 1,979* bf16, fp32 67; NVL 1,671*, fp32 60)
#   H100 PCIe:      the same data sheet's 2022 edition (PCIe 1,513* bf16, fp32 51)
#   H200 SXM / NVL: "NVIDIA H200 Tensor Core GPU" data sheet (SXM 1,979*, fp32 67; NVL 1,671*, fp32 60)
#   A100 SXM/PCIe:  "NVIDIA A100 Tensor Core GPU" data sheet (312 bf16/fp16 dense, fp32 19.5, both forms)
#   V100 SXM2/PCIe/V100S: "NVIDIA V100 Tensor Core GPU" data sheet (tensor 125 / 112 / 130, fp32 15.7 / 14 / 16.4)
#   L40S: "NVIDIA L40S" data sheet (362 | 733* bf16, fp32 91.6);  L4: "NVIDIA L4" data sheet (242* bf16, fp32 30.3)
#   A10:  "NVIDIA A10 Tensor Core GPU" data sheet (250* bf16/fp16, fp32 31.2)
# A10G (AWS G5): NVIDIA publishes no data sheet and it has fewer tensor FLOPs than an A10, so it has no
# entry: its MFU stays empty rather than wrong. Names that match nothing here get no MFU either.
PEAK_TFLOPS: list[tuple[str, dict[str, float]]] = [
    (r"H200.*NVL", {"bf16": 835.5, "fp16": 835.5, "fp32": 60.0}),
    (r"H200", {"bf16": 989.5, "fp16": 989.5, "fp32": 67.0}),
    (r"H100.*NVL", {"bf16": 835.5, "fp16": 835.5, "fp32": 60.0}),
    (r"H100.*PCIe", {"bf16": 756.5, "fp16": 756.5, "fp32": 51.0}),
    (r"H100", {"bf16": 989.5, "fp16": 989.5, "fp32": 67.0}),         # "H100 80GB HBM3", "H100 SXM5"
    (r"A100", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}),
    (r"V100S", {"fp16": 130.0, "fp32": 16.4}),
    (r"V100.*PCI", {"fp16": 112.0, "fp32": 14.0}),
    (r"V100", {"fp16": 125.0, "fp32": 15.7}),
    (r"L40S", {"bf16": 362.0, "fp16": 362.0, "fp32": 91.6}),
    (r"\bL4\b", {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3}),
    (r"\bA10G\b", {}),
    (r"\bA10\b", {"bf16": 125.0, "fp16": 125.0, "fp32": 31.2}),
]


def peak_for_name(name: str, precision: str) -> float | None:
    """The data-sheet peak for a GPU name and precision; None where no data sheet says (MFU left empty)."""
    for pattern, peaks in PEAK_TFLOPS:
        if re.search(pattern, name, re.I):
            return peaks.get(precision)
    return None


def flops_per_token(n_params: int, n_layer: int, hidden: int, seq_len: float) -> float:
    return 6.0 * n_params + 12.0 * n_layer * hidden * seq_len


def peak_tflops(device: torch.device, precision: str) -> float | None:
    if device.type != "cuda":
        return None
    return peak_for_name(torch.cuda.get_device_name(device), precision)


def peak_rss_mb() -> float:
    """The process's peak resident memory: interpreter, libraries and tensors together."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_memory_mb(device: torch.device, tensor_memory: Any = None) -> tuple[float | None, float | None, str]:
    """(peak used, peak reserved or None, kind): the CUDA allocator's peaks over training on a GPU; on a CPU
    the tensor peak of the step `tensor_memory` (workshop.training.tensor_memory) measured, or peak RSS without it."""
    if device.type == "cuda":
        # the tracker's measured step resets the allocator's peak counters; it keeps what they held before
        allocated, reserved = (tensor_memory.allocator_peaks() if tensor_memory is not None else
                               (torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)))
        return allocated / 2**20, reserved / 2**20, "cuda_allocated"
    if tensor_memory is not None:
        return tensor_memory.peak_so_far_mb(), None, "tensor"
    return peak_rss_mb(), None, "rss"


def gpu_utilisation(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    try:
        return float(torch.cuda.utilization(device))
    except Exception:  # NVML missing or not permitted: report nothing rather than a guess
        return None


def warmup_steps(max_steps: int) -> int:
    """Steps left out of the throughput window: the first ones pay for CUDA context and allocator
    growth, NCCL communicator set-up and FSDP's lazy initialisation, not for training. 10 % of the
    run, at least 1 and at most 10 steps."""
    return max(1, min(10, max_steps // 10))


@dataclass
class StepCounter:
    """Samples and non-pad tokens this rank has trained on since the last log; `totals` sums the
    throughput window (logs after the warm-up steps), `warmup` the logs before it."""

    samples: int = 0
    tokens: int = 0
    last_shape: tuple[int, ...] = ()
    totals: dict[str, float] = field(default_factory=lambda: {"samples": 0, "tokens": 0, "seconds": 0.0})
    warmup: dict[str, float] = field(default_factory=lambda: {"samples": 0, "tokens": 0, "seconds": 0.0})
    window: dict[str, Any] = field(default_factory=lambda: {"warmup_steps": 0, "from_step": 0, "to_step": 0})
    # instrumented steps since the last log, and every one so far: see leave_out_of_throughput
    left_out: dict[str, float] = field(default_factory=lambda: {"samples": 0, "tokens": 0, "seconds": 0.0})
    left_out_steps: list[int] = field(default_factory=list)

    def leave_out_of_throughput(self, step: int, seconds: float, samples: int, tokens: int) -> None:
        """THE place where an instrumented optimizer step leaves the throughput window: its time (the
        instrumentation's own work included) and this rank's samples and tokens are taken out of the
        next log's interval before it is added to the window. Summary throughput counts steady steps only:
        a step run under a profiler or a tracker is not one (workshop.training.comm_recorder calls this)."""
        self.left_out["seconds"] += seconds
        self.left_out["samples"] += samples
        self.left_out["tokens"] += tokens
        self.left_out_steps.append(step)

    def take_left_out(self) -> dict[str, float]:
        """What leave_out_of_throughput put aside since the last log, and reset it."""
        taken, self.left_out = self.left_out, {"samples": 0, "tokens": 0, "seconds": 0.0}
        return taken

    def close_window(self) -> None:
        """A run too short to leave the warm-up: count its warm-up steps, and say so in `window`."""
        if not self.totals["seconds"] and self.warmup["seconds"]:
            self.totals.update(self.warmup)
            self.window["from_step"], self.window["warmup_steps"] = 1, 0

    def add(self, batch: dict[str, torch.Tensor]) -> None:
        self.last_shape = tuple(batch["input_ids"].shape)  # what the memory measurement's step trained on
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


def mem_text(peak_mb: float | None) -> str:
    """The step line's memory field; before the measured step on a CPU there is no tensor peak yet."""
    return f"mem {peak_mb:.1f} MB" if peak_mb is not None else "mem n/a"


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
        self.warmup_until = 0
        self.on_train_begin_hooks: list[Any] = []
        self.tensor_memory: Any = None  # workshop.training.tensor_memory.TensorMemoryCallback, when the run measures

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
        for hook in self.on_train_begin_hooks:
            hook()
        # after a resume the first steps warm up again: the window starts after them too
        self.warmup_until = state.global_step + warmup_steps(state.max_steps)
        self.counter.window.update(warmup_steps=warmup_steps(state.max_steps), from_step=0, to_step=0)
        self._last = time.perf_counter()

    def on_train_end(self, args, state, control, **kwargs):  # noqa: ANN001
        self.counter.close_window()

    def _emit(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if not self.is_main:
            return
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        say("WORKSHOP_METRICS " + json.dumps(record))

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
        logs = logs or {}
        if "loss" in logs:
            now = time.perf_counter()
            elapsed, self._last = now - self._last, now
            left = self.counter.take_left_out()
            samples, tokens, left_samples, left_tokens = _all_reduce_sum(
                [self.counter.samples, self.counter.tokens, left["samples"], left["tokens"]])
            warm = state.global_step <= self.warmup_until
            sums = self.counter.warmup if warm else self.counter.totals
            # the record below shows the whole interval; the window leaves instrumented steps out
            sums["samples"] += samples - left_samples
            sums["tokens"] += tokens - left_tokens
            sums["seconds"] += max(0.0, elapsed - left["seconds"])
            if not warm:
                window = self.counter.window
                window["from_step"] = window["from_step"] or state.global_step - args.logging_steps + 1
                window["to_step"] = state.global_step
            if self.counter.left_out_steps:
                self.counter.window["left_out_steps"] = sorted(set(self.counter.left_out_steps))
            self.counter.samples = self.counter.tokens = 0
            used, reserved, kind = peak_memory_mb(self.device, self.tensor_memory)
            per_rank = _all_gather(round(used, 1) if used is not None else None)
            rss = max(_all_gather(round(peak_rss_mb(), 1)))
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
                "tokens_per_s": round(tok_s, 1),
                "peak_mem_mb": max(per_rank) if None not in per_rank else None,
                "peak_mem_mb_per_rank": per_rank, "mem_kind": kind, "rss_mb": rss,
                "peak_reserved_mb": max(r for r in reserved_all) if reserved is not None else None,
                "gpu_util_pct": gpu_utilisation(self.device), "tflops": round(tflops, 6),
                "mfu": round(tflops / (self.peak * world), 4) if self.peak else None,
                "warmup": warm,
            }
            self._emit(record)
            if self.is_main:
                mfu = f"{record['mfu']:.1%}" if record["mfu"] is not None else "n/a"
                say(f"[workshop] step {state.global_step}/{state.max_steps} | loss {record['loss']:.4f} | "
                    f"{record['samples_per_s']} samples/s | {record['tokens_per_s']:.0f} tok/s | "
                    f"{mem_text(record['peak_mem_mb'])} | rss {rss:.0f} MB | mfu {mfu}")
        elif "eval_loss" in logs:
            self._emit({"kind": "eval", "step": state.global_step, "epoch": round(state.epoch or 0.0, 4),
                        "eval_loss": float(logs["eval_loss"]),
                        "eval_samples_per_s": logs.get("eval_samples_per_second"),
                        "eval_runtime_s": logs.get("eval_runtime")})
            # evaluation time is not training time
            self._last = time.perf_counter()
