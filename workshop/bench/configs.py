"""The bench's configurations: each course configuration as the RunConfig changes that define it, and the run
config the bench builds from one for a model, device and batch (`workshop bench`, workshop.bench.harness).

Why its own module: which configurations there are, and how one becomes a job, is what a reader of a results
file asks first; the harness launches and measures them, the report (workshop.bench.report) judges them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workshop.training.config import RunConfig, load_config

SEQ_LEN = 512  # the course's max_length for SQuAD, and the seed recipe's fixed width


FIXTURE_TRAIN = 50  # examples in workshop/assets/squad_fixture/train.json


PEER = "plain-loop"


@dataclass(frozen=True)
class BenchConfig:
    """One course configuration: the RunConfig changes that define it, and why it is in the table."""

    name: str
    why: str
    changes: dict[str, Any]
    pad_to: int = 0  # > 0: every batch padded to this many tokens (the seed recipe)
    course_batch: bool = True  # use the bench's --batch-size (False: the recipe fixes its own batch)
    fit_batch: bool = False  # on a GPU: the largest micro-batch the memory model says fits the card
    peer: bool = False  # the plain PyTorch loop (workshop.bench.plain_loop), not the course's training script


CONFIGS: dict[str, BenchConfig] = {c.name: c for c in (
    BenchConfig("seed-recipe", "the seed course's KAUST baseline: pad to 512, batch 1, grad acc 4, fp16, no sharding",
                dict(precision="fp16", sharding="none", batch_size=1, grad_acc=4, pad_to_max_length=True,
                     max_length=SEQ_LEN), pad_to=SEQ_LEN,
                course_batch=False),
    BenchConfig("baseline", "the course baseline: bf16, dynamic padding, no sharding",
                dict(precision="bf16", sharding="none")),
    BenchConfig(PEER, "the peer: a plain PyTorch loop on the same shapes, batch and lengths (bf16 autocast, fused "
                "AdamW, clipping at 1.0; no Trainer, no FSDP, none of the course's code)",
                dict(precision="bf16", sharding="none"), peer=True),
    BenchConfig("full_shard", "FSDP2 reshard_after_forward=True (FSDP1 FULL_SHARD)",
                dict(precision="bf16", sharding="full_shard")),
    BenchConfig("shard_grad_op", "FSDP2 reshard_after_forward=False (FSDP1 SHARD_GRAD_OP)",
                dict(precision="bf16", sharding="shard_grad_op")),
    BenchConfig("offload", "FSDP2 full_shard with CPU offload of params, grads and AdamW state",
                dict(precision="bf16", sharding="full_shard", offload=True)),
    BenchConfig("activation_checkpointing", "FSDP2 full_shard with activation checkpointing per BloomBlock",
                dict(precision="bf16", sharding="full_shard", activation_checkpointing=True)),
    BenchConfig("answer_only", "FSDP2 full_shard, logits only at answer positions (loss=answer_only), at the "
                "largest micro-batch the memory model says fits the GPU",
                dict(precision="bf16", sharding="full_shard", loss="answer_only"), fit_batch=True),
)}


# answer_only's batch search assumes this many answer positions per example (the fixture's answers
# with EOS are 2 to 12 tokens); the run itself reads back the positions it projected
FIT_ANSWER_TOKENS = 12


def fitting_batch(changes: dict[str, Any], model: str, gpu_bytes: int, limit: int = 1024) -> int:
    """The largest micro-batch whose predicted GPU peak (memory.estimate, at SEQ_LEN) fits `gpu_bytes`,
    less the CUDA context; at least 1."""
    from workshop.results import memory

    def predict(batch: int) -> Any:
        return memory.estimate(model, changes.get("sharding", "none"), 1, changes.get("precision", "bf16"), batch,
                               SEQ_LEN, loss=changes.get("loss", "full"), answer_tokens=batch * FIT_ANSWER_TOKENS)

    return max(1, min(limit, memory.largest_micro_batch(predict, gpu_bytes - memory.CUDA_CONTEXT)))


def length_distribution(model: str, max_length: int, n: int = FIXTURE_TRAIN) -> dict[str, Any]:
    """Non-pad tokens per fixture example, encoded exactly as training encodes them."""
    from workshop.training import data, models

    tok = models.load_tokenizer(model)
    in_order = [len(data.encode_for_training(tok, ex, max_length)["input_ids"])
                for ex in data.load_examples("fixture", "train", n)]
    lengths = sorted(in_order)
    p95 = lengths[min(len(lengths) - 1, math.ceil(0.95 * len(lengths)) - 1)]
    return {"source": "workshop/assets/squad_fixture/train.json", "examples": len(lengths),
            "tokenizer": f"{type(tok).__name__}, vocab {len(tok)}" + (
                " (the offline BLOOM-shaped BPE: more tokens per word than BLOOM's 250k vocabulary)"
                if len(tok) < 10_000 else ""),
            "max_length": max_length, "mean": round(statistics.mean(lengths), 1),
            "p50": statistics.median(lengths), "p95": p95, "min": lengths[0], "max": lengths[-1],
            "lengths": in_order}  # in fixture order: a run on train_size=k trains on the first k


def train_size_for(global_batch: int, max_steps: int, available: int = FIXTURE_TRAIN) -> int:
    """Whole batches only (no short last batch in the timings), and no more examples than the run
    trains on, so every example (the longest one included) is seen and sets the measured peak."""
    usable = available - available % global_batch
    if usable < global_batch:
        raise ValueError(f"global batch {global_batch} is larger than the fixture ({available} examples)")
    return min(usable, max_steps * global_batch)


def steps_to_measure(warmup: int, measure: int) -> int:
    """Steps to run for `measure` records after the warm-up that are not an instrumented step (the memory
    tracker's and the communication recorder's: the run's summary and steady_state leave them out)."""
    from workshop.training.counted_steps import INSTRUMENTED_STEPS

    steps = warmup + measure
    while sum(1 for s in range(warmup + 1, steps + 1) if s not in INSTRUMENTED_STEPS.values()) < measure:
        steps += 1
    return steps


def run_config(bc: BenchConfig, model: str, device: str, batch_size: int, warmup: int, measure: int,
               out_dir: Path, gpu_bytes: int | None = None) -> RunConfig:
    """The RunConfig of one configuration, validated; on a CPU every precision becomes fp32 (fp16
    needs a GPU, bf16 on CPU measures nothing the course cares about). `gpu_bytes`: the card's memory for a
    fitted batch (default: the visible GPU's), so a CPU test can build what an H100 or an H200 would run."""
    changes = dict(bc.changes)
    if bc.course_batch:
        changes.update(batch_size=batch_size, grad_acc=1)
    if bc.fit_batch and device == "cuda":
        if gpu_bytes is None:
            import torch

            gpu_bytes = torch.cuda.get_device_properties(0).total_memory
        # no larger than the fixture: a batch of more examples than it holds has no whole step to time
        changes.update(batch_size=fitting_batch(changes, model, gpu_bytes, limit=FIXTURE_TRAIN), grad_acc=1)
    if device == "cpu":
        changes["precision"] = "fp32"
    max_steps = warmup + measure if bc.peer else steps_to_measure(warmup, measure)   # the loop instruments no step
    global_batch = changes["batch_size"] * changes.get("grad_acc", 1)
    settings: dict[str, Any] = dict(
        model=model, dataset="fixture", train_size=train_size_for(global_batch, max_steps), eval_size=8,
        eval_split="dev", max_length=SEQ_LEN, global_batch=0, max_steps=max_steps, logging_steps=1,
        eval_generate=False, device=device, nodes=1, procs_per_node=1, wandb="disabled",
        output_dir=str(out_dir))
    settings.update(changes)   # the configuration's own settings win (the seed recipe restates max_length)
    return load_config(overrides=settings)
