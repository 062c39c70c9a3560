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

from workshop.training import log_records
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
    """(peak used, peak reserved or None, kind): the CUDA allocator's peaks since train start on a GPU (kept
    across the tracked step's counter reset by `tensor_memory.peaks`); on a CPU the tensor peak of the step
    `tensor_memory` (workshop.training.tensor_memory) measured, or peak RSS without it."""
    peaks = getattr(tensor_memory, "peaks", None)
    if device.type == "cuda" and peaks is not None:
        allocated, reserved = peaks.since_start()
        return allocated / 2**20, reserved / 2**20, "cuda_allocated"
    if device.type == "cuda":
        return (torch.cuda.max_memory_allocated(device) / 2**20,
                torch.cuda.max_memory_reserved(device) / 2**20, "cuda_allocated")
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


@dataclass
class StepCounter:
    """Samples and non-pad tokens this rank has trained on: since the last log (`samples`, `tokens`,
    reset by MetricsCallback) and since the run began (`seen_samples`, `seen_tokens`, which only grow:
    the throughput window and the batch probe read their differences).

    Counted on the host from the batch as the collator built it, before it moves to the GPU: the
    collator puts the non-pad token count in the batch (workshop.training.data.HOST_TOKENS), so no
    step waits for the device to sum an attention mask."""

    samples: int = 0
    tokens: int = 0
    seen_samples: int = 0
    seen_tokens: int = 0
    last_shape: tuple[int, ...] = ()
    # the steps the summary's throughput leaves out, by reason: see leave_out_of_throughput
    left_out: dict[str, list[int]] = field(default_factory=dict)

    def leave_out_of_throughput(self, step: int, reason: str) -> None:
        """THE one place a step leaves the summary's throughput: the warm-up steps
        (workshop.training.throughput.ThroughputWindow), the tensor-memory tracker's step
        (workshop.training.tensor_memory) and the recorded communication step
        (workshop.training.comm_recorder) all come through here, at train start, before the first step.
        The window then times only the steps nobody left out: a step run under a tracker or a profiler
        (a dispatch mode, a trace) is several times slower than training, and the first steps pay for
        start-up. `step` is 1-based over the run; `reason` is how summary.json names it."""
        steps = self.left_out.setdefault(reason, [])
        if step not in steps:
            steps.append(step)

    def left_out_steps(self) -> set[int]:
        """Every step left out, whatever the reason."""
        return {s for steps in self.left_out.values() for s in steps}

    def add(self, batch: dict[str, Any]) -> None:
        """Count one micro-batch and take the collator's token count out of it (the model never sees it)."""
        from workshop.training.data import HOST_TOKENS

        self.last_shape = tuple(batch["input_ids"].shape)  # what the memory measurement's step trained on
        samples = int(batch["input_ids"].shape[0])
        tokens = batch.pop(HOST_TOKENS, None)
        if tokens is None:  # a batch from another collator: count from its mask (a device sync on a GPU)
            mask = batch.get("attention_mask")
            tokens = int(mask.sum()) if mask is not None else int(batch["input_ids"].numel())
        self.samples += samples
        self.tokens += int(tokens)
        self.seen_samples += samples
        self.seen_tokens += int(tokens)


def _all_reduce_sum(values: list[float]) -> list[float]:
    if not (dist.is_available() and dist.is_initialized()):
        return values
    t = torch.tensor(values, dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t)
    return t.cpu().tolist()


def all_gather(value: Any) -> list[Any]:
    """`value` from every rank, in rank order (one process: `[value]`): the callbacks that report per-rank
    figures (memory, the batch probe, the recorded collectives) all gather the same way."""
    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def mem_text(peak_mb: float | None) -> str:
    """The step line's memory field; before the measured step on a CPU there is no tensor peak yet."""
    return f"mem {peak_mb:.1f} MB" if peak_mb is not None else "mem n/a"


class MetricsCallback(TrainerCallback):
    """Writes metrics.jsonl and prints the step line; every rank joins the collectives in on_log.

    Each record's throughput is over the steps since the previous record, for people watching the run;
    `counted` says whether the summary's throughput (workshop.training.throughput.ThroughputWindow,
    `window`) counts all of them."""

    def __init__(self, out_dir: Path, counter: StepCounter, device: torch.device, precision: str,
                 n_params: int, n_layer: int, hidden: int, is_main: bool) -> None:
        self.path = Path(out_dir) / "metrics.jsonl"
        self.counter, self.device, self.precision, self.is_main = counter, device, precision, is_main
        self.n_params, self.n_layer, self.hidden = n_params, n_layer, hidden
        self.peak = peak_tflops(device, precision)
        self.records: list[dict[str, Any]] = []
        self._last = time.perf_counter()
        self._last_step = 0
        self.on_train_begin_hooks: list[Any] = []
        self.tensor_memory: Any = None  # workshop.training.tensor_memory.TensorMemoryCallback, when the run measures
        self.window: Any = None  # workshop.training.throughput.ThroughputWindow: which steps the summary counts

    def flops_per_token(self, seq_len: float) -> float:
        return flops_per_token(self.n_params, self.n_layer, self.hidden, seq_len)

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001
        for hook in self.on_train_begin_hooks:
            hook()
        self._last = time.perf_counter()
        self._last_step = state.global_step

    def _emit(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if not self.is_main:
            return
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        log_records.write(log_records.METRICS, record)

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
        logs = logs or {}
        if "loss" in logs:
            now = time.perf_counter()
            elapsed, self._last = now - self._last, now
            first, self._last_step = self._last_step + 1, state.global_step
            samples, tokens = _all_reduce_sum([self.counter.samples, self.counter.tokens])
            self.counter.samples = self.counter.tokens = 0
            used, reserved, kind = peak_memory_mb(self.device, self.tensor_memory)
            per_rank = all_gather(round(used, 1) if used is not None else None)
            rss = max(all_gather(round(peak_rss_mb(), 1)))
            reserved_all = all_gather(reserved)
            seq = tokens / samples if samples else 0.0
            tok_s = tokens / elapsed if elapsed > 0 else 0.0
            tflops = tok_s * self.flops_per_token(seq) / 1e12
            world = len(per_rank)
            record = {
                "kind": "train", "step": state.global_step, "epoch": round(state.epoch or 0.0, 4),
                "loss": float(logs["loss"]), "learning_rate": float(logs.get("learning_rate", 0.0)),
                "grad_norm": float(logs["grad_norm"]) if "grad_norm" in logs else None,
                "step_time_s": round(elapsed / max(1, state.global_step - first + 1), 4),
                "samples_per_s": round(samples / elapsed, 3) if elapsed > 0 else None,
                "tokens_per_s": round(tok_s, 1),
                "peak_mem_mb": max(per_rank) if None not in per_rank else None,
                "peak_mem_mb_per_rank": per_rank, "mem_kind": kind, "rss_mb": rss,
                "peak_reserved_mb": max(r for r in reserved_all) if reserved is not None else None,
                "gpu_util_pct": gpu_utilisation(self.device), "tflops": round(tflops, 6),
                "mfu": round(tflops / (self.peak * world), 4) if self.peak else None,
                "counted": self.window.counted_in(first, state.global_step) if self.window is not None else None,
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
