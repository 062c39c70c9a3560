"""The memory model: bytes per GPU (or CPU rank) by category, for what the course's runs execute.

Why a model and not just a measurement: before a job is submitted, a student should be able to say
"this will not fit on one GPU, but full_shard on 4 will", and afterwards compare the prediction with
what the run measured (workshop.training.tensor_memory counts tensor memory by the same categories).

Categories (each one's own peak over a training step, as workshop.training.tensor_memory measures them) and
`peak`, the most tensor memory alive at one moment:
- params: the stored fp32 parameters (sharded over N under FSDP) plus, under FSDP, the units
  gathered at once in the compute dtype (full_shard: the embedding unit, kept from the end of
  forward to the end of backward because the tied lm_head uses it, plus the blocks in flight: two on
  a GPU, where the next block's all-gather (prefetch) runs while this one computes, one on a CPU
  rank, where nothing overlaps; shard_grad_op: every unit, none is resharded after forward).
- grads: the fp32 gradients each rank stores (sharded over N under FSDP). Without FSDP and with
  gradient accumulation, a later micro-batch's gradient of the largest parameter (the tied embedding)
  is counted as a gradient before it is added to the stored one.
- unsharded_grads (FSDP, part of `other`): a unit's full gradient before its reduce-scatter, fp32 or
  bf16 with accelerate's MixedPrecisionPolicy (it reduces in bf16). The embedding unit's lives
  through all of backward (the tied lm_head starts it). With gradient accumulation the Trainer skips
  the sync on non-final micro-batches, and FSDP2 then keeps every unit's until the final one.
  HSDP with 16-bit reduction keeps each block's reduced gradient shard for the all-reduce among the
  replicas until backward ends (counted in `other`, and at the peak's end of backward).
- optimizer: AdamW's exp_avg and exp_avg_sq, fp32 (8 bytes per stored parameter).
- activations: what forward leaves for backward, counted tensor by tensor from BLOOM's code with
  the tracker (bytes per element of each shape; x = b·s tokens):
      per block   64·x·h (fp32) | 36·x·h (16-bit)       linear, GeLU and LayerNorm inputs/outputs
                  4 | 6 bytes per b·a·s² element         BLOOM's softmax runs in fp32 (then a bf16 copy)
      outside     12 | 14 bytes per x·h, 64 per token    embeddings, final norm, ids/labels/mask
      logits      8 | 10 bytes per x·V                   fp32 logits and the fp32 copy cross-entropy
                                                         keeps (16-bit: the bf16 logits, their fp32
                                                         upcast and the loss's copy)
      autocast    2 bytes per weight                     DDP/one-process bf16: autocast's weight casts
      DDP         c bytes per x·V                        DDP's forward keeps another logits-sized output
  Activation checkpointing keeps each block's input (its hidden states, one h-sized tensor per token)
  and the causal mask every block shares (b·s² elements) instead of the blocks' internals; the category then peaks in backward, when one block's internals are recomputed on top
  of them (the tracker counts recomputed tensors as activations). Calibrated on the tiny model and
  checked by tests against the measurement; the coefficients are counts of tensors in BLOOM's
  forward, not per-run constants.
- other: temporaries (the loss gradient, gradients of activations in backward) and FSDP's
  all-gather/reduce-scatter buffers. DDP's all-reduce runs in its buckets (`ddp_buckets`, below).
  Under FSDP the larger of the logits' gradients and the embedding's backward (its fp32 temporary, the
  unsharded gradients, backward's h-sized and score-sized temporaries: TEMPS_PER_XH, TEMPS_PER_SCORE;
  in fp32 the tied weight's gradient accumulated, one more 4 V·h), each checked against dry runs at
  BLOOM's sizes (benchmarks/paper/).
- peak: at the start of backward: stored params + gathered units + optimizer state + activations +
  the loss's gradient (c bytes per x·V). With BLOOM's 250,880-token vocabulary the logits terms are
  the largest activations of all.
- logits (part of activations): the logits tensor lm_head builds, positions x V in the compute dtype,
  by the `loss` setting (workshop.training.loss): full every b·s position; answer_only only the
  positions whose next token is an answer token (`answer_tokens`, summed over the micro-batch);
  chunked one chunk, ceil(b·s / CHUNKS). summary.json's `logits_mb_per_rank` measures it. With a
  small loss, what cross-entropy keeps shrinks with it (the 8 | 10 bytes per row·V above, the loss
  gradient, the backward temporaries), and the activation category may peak in backward instead:
  at the last block, on the forward's activations, 4 bytes per b·a·s² element and 20 per x·h
  (the attention scores' gradient and h-sized ones: calibrated on fp32 tiny runs, 1 process and
  full_shard at 2 ranks, within 1 %), with 40 bytes per x·h of temporaries on top at the peak.
- host_*: with offload, the sharded params, grads and AdamW state live in host memory.
- ddp_buckets (DDP only): the reducer's gradient buckets, one fp32 copy of every gradient (4 bytes per
  parameter; the Trainer leaves gradient_as_bucket_view off). DDP allocates them in C++ when it wraps
  the model, before PyTorch's tracker enters, so the tracker never sees them and `peak` leaves them
  out.

Two peaks, for two instruments:
- `peak` (`total`): what PyTorch's tracker (workshop.training.tensor_memory) counts on one step. The tests and
  the course's tables compare it with the measurement on CPU, where nothing else can be measured.
- `gpu_peak`: `peak` + `ddp_buckets`: what the CUDA caching allocator holds at the peak
  (`torch.cuda.max_memory_allocated`, the `allocator_peak` of a GPU run). "Does it fit a GPU"
  (largest_model_that_fits, workshop.student.explorer) asks this one.
1 MB here is 2**20 bytes, the unit the training script reports. Not included in either: the CUDA
context (~0.5 GiB) and the caching allocator's slack (reserved minus allocated).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from workshop.training.categories import CATEGORIES, HOST
from workshop.training.config import FSDP_SHARDINGS, GRAD_OP_SHARDINGS, HYBRID_SHARDINGS, SHARDINGS
from workshop.training.gpus import CUDA_CONTEXT_BYTES

MB = 2**20
GiB = 2**30


@dataclass(frozen=True)
class Arch:
    """The shapes of a BLOOM-family decoder (tied input/output embeddings)."""

    name: str
    vocab: int
    hidden: int
    layers: int
    heads: int

    @property
    def block_params(self) -> int:
        """One BloomBlock: qkv (h·3h + 3h), dense (h·h + h), mlp (h·4h + 4h, 4h·h + h), two LayerNorms (4h)."""
        h = self.hidden
        return 12 * h * h + 13 * h

    @property
    def root_params(self) -> int:
        """Outside the blocks: word embeddings V·h (tied with lm_head), embedding LayerNorm 2h, ln_f 2h."""
        return self.vocab * self.hidden + 4 * self.hidden

    @property
    def params(self) -> int:
        return self.root_params + self.layers * self.block_params


# Shapes from bigscience/bloom-560m's config.json and workshop.training.models.TINY (a test keeps them equal).
PROFILES: dict[str, Arch] = {
    "bloom-560m": Arch("bloom-560m", 250880, 1024, 24, 16),
    "bloom-1b1": Arch("bloom-1b1", 250880, 1536, 24, 16),
    "bloom-1b7": Arch("bloom-1b7", 250880, 2048, 24, 16),
    "bloom-3b": Arch("bloom-3b", 250880, 2560, 30, 32),
    "bloom-7b1": Arch("bloom-7b1", 250880, 4096, 30, 32),
    "tiny": Arch("tiny", 1024, 96, 2, 4),
}
PROFILES["bloom-560m-random"] = PROFILES["bloom-560m"]
PROFILES["bigscience/bloom-560m"] = PROFILES["bloom-560m"]
PROFILES["bloom-7b1-random"] = PROFILES["bigscience/bloom-7b1"] = PROFILES["bloom-7b1"]

# SHARDINGS: every sharding the training config accepts (one owner: workshop.training.config)
COMPUTE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def get_arch(model: str | Arch) -> Arch:
    if isinstance(model, Arch):
        return model
    try:
        return PROFILES[model]
    except KeyError:
        raise ValueError(f"unknown model profile {model!r}; use one of {', '.join(PROFILES)}") from None




@dataclass
class Breakdown:
    """Predicted bytes per GPU (or CPU rank) by category; `peak` the most alive at once (`total` too)."""

    params: int = 0
    grads: int = 0
    optimizer: int = 0
    activations: int = 0
    other: int = 0
    peak: int = 0
    host_params: int = 0
    host_grads: int = 0
    host_optimizer: int = 0
    unsharded_grads: int = 0  # FSDP: full gradients before their reduce-scatter (counted in `other`)
    ddp_buckets: int = 0  # DDP's gradient buckets: in `gpu_peak`, not in `peak` (the tracker cannot see them)
    logits: int = 0  # the logits tensor lm_head builds (positions x V, compute dtype), by the loss setting
    n_params: int = 0
    shard_size: int = 1
    notes: list[str] = field(default_factory=list)

    COMPONENTS = CATEGORIES

    @property
    def total(self) -> int:
        return self.peak

    @property
    def total_mb(self) -> float:
        return self.peak / MB

    @property
    def gpu_peak(self) -> int:
        """What a GPU's allocator holds at the peak: the tracker's `peak` plus DDP's gradient buckets."""
        return self.peak + self.ddp_buckets

    @property
    def cpu(self) -> int:
        return self.host_params + self.host_grads + self.host_optimizer

    def as_mb(self) -> dict[str, float]:
        out = {c: getattr(self, c) / MB for c in (*CATEGORIES, "peak", *HOST, "unsharded_grads", "ddp_buckets", "logits")}
        out["gpu_peak"] = self.gpu_peak / MB
        out["host"] = self.cpu / MB
        out["total"] = self.total_mb
        return out


# Bytes per element of each activation shape, by how the run computes (see the module docstring).
ACT_COEF = {
    "fp32": dict(block=64, scores=4, outside=12, logits=8),
    "mixed": dict(block=36, scores=6, outside=14, logits=10),
}
# A checkpointed block keeps its input, the hidden states (one h-sized tensor per token), and every block
# shares the causal mask (b·s² elements, built once). Measured: the tiny full_shard x 2 fp32 run with
# checkpointing (2 x 235 tokens) 9,879,683 B of activations, this model 9,879,400; BLOOM-7b1's dry run at
# 4 x 512 showed the 4 h-sized tensors once assumed here (the shared mask was taken for 3 more) 1.4 GB too many.
AC_BLOCK_INPUTS = 1  # h-sized tensors per token a checkpointed block keeps
AC_SHARED_MASK = 1   # b·s² elements every checkpointed block shares (the causal mask), compute dtype
TOKEN_BYTES = 64  # input ids, labels, attention mask and position terms per token


def activation_bytes(arch: Arch, batch_size: int, seq_len: int, precision: str = "bf16",
                     checkpointing: bool = False, sharding: str = "none") -> int:
    """Activations alive at the end of forward (the loss computed), for BLOOM as the course runs it."""
    x, h, V, L = batch_size * seq_len, arch.hidden, arch.vocab, arch.layers
    c = COMPUTE_BYTES[precision]
    k = ACT_COEF["fp32" if precision == "fp32" else "mixed"]
    scores = batch_size * arch.heads * seq_len * seq_len
    block = AC_BLOCK_INPUTS * c * x * h if checkpointing else k["block"] * x * h + k["scores"] * scores
    shared = AC_SHARED_MASK * c * batch_size * seq_len ** 2 if checkpointing else 0
    total = L * block + shared + k["outside"] * x * h + TOKEN_BYTES * x + k["logits"] * x * V
    if precision != "fp32" and sharding in ("none", "ddp"):
        total += c * (V * h + L * 12 * h * h)  # autocast's 16-bit copies of the matmul weights
    if sharding == "ddp" and not checkpointing:
        total += c * x * V  # DDP's forward output: another logits-sized tensor
    return int(total)


def recomputed_block(arch: Arch, x: int, batch_size: int, seq_len: int, precision: str, checkpointing: bool) -> int:
    """With activation checkpointing, backward recomputes one block's full activations at a time."""
    if not checkpointing:
        return 0
    k = ACT_COEF["fp32" if precision == "fp32" else "mixed"]
    return k["block"] * x * arch.hidden + k["scores"] * batch_size * arch.heads * seq_len * seq_len


LOSSES = ("full", "answer_only", "chunked")
CHUNKS = 8  # workshop.training.loss.CHUNKS (a test keeps them equal)
BWD_SCORES, BWD_H, BWD_TEMP_H = 4, 20, 40  # backward's floor with a small loss (module docstring)


def logits_rows(loss: str, batch_size: int, seq_len: int, answer_tokens: int | None = None) -> int:
    """Positions one micro-batch projects onto the vocabulary at once under `loss`."""
    x = batch_size * seq_len
    if loss == "full":
        return x
    if loss == "chunked":
        return -(-x // CHUNKS)
    if loss == "answer_only":
        if answer_tokens is None:
            raise ValueError("loss 'answer_only' needs answer_tokens: the micro-batch's positions with an answer "
                             "token next (e.g. batch_size x the answer's tokens, EOS included)")
        return min(x, max(0, answer_tokens))
    raise ValueError(f"unknown loss {loss!r}; use one of {', '.join(LOSSES)}")


def blocks_in_flight(device: str) -> int:
    """Blocks FSDP2 holds gathered at once under full_shard: on a GPU the next block's all-gather runs on
    its own stream while this block computes (implicit prefetch in forward, explicit in backward), so
    two; on a CPU rank every collective runs in line, so one."""
    return 1 if device == "cpu" else 2


def _shard_size(sharding: str, world_size: int, replicas: int) -> int:
    """Ranks one parameter is sharded over: the world under FSDP, a replica group under HSDP, 1 otherwise."""
    if sharding in HYBRID_SHARDINGS:
        if world_size % replicas:
            raise ValueError(f"{sharding}: {replicas} replicas do not divide world size {world_size}")
        return world_size // replicas
    return world_size if sharding in FSDP_SHARDINGS else 1


def _check(sharding: str, world_size: int, precision: str, batch_size: int, max_length: int, offload: bool,
           replicas: int, grad_acc: int) -> None:
    """Refuse a config the model cannot describe, naming the field (a wrong figure would be worse)."""
    if sharding not in SHARDINGS:
        raise ValueError(f"unknown sharding {sharding!r}; use one of {', '.join(SHARDINGS)}")
    if precision not in COMPUTE_BYTES:
        raise ValueError(f"unknown precision {precision!r}; use fp32, bf16 or fp16")
    if world_size < 1 or batch_size < 1 or max_length < 1 or replicas < 1 or grad_acc < 1:
        raise ValueError("world_size, batch_size, max_length, replicas and grad_acc must be >= 1")
    if sharding == "none" and world_size != 1:
        raise ValueError("sharding 'none' is one process: use world_size=1, or ddp/an FSDP strategy")
    if offload and sharding in ("none", "ddp"):
        raise ValueError("offload needs an FSDP strategy")


@dataclass(frozen=True)
class _Step:
    """What one optimizer step keeps alive, whatever the sharding: activations and the loss's terms."""

    arch: Arch
    x: int            # tokens in the micro-batch (b·s)
    batch_size: int   # sequences in the micro-batch (b)
    rows: int         # positions projected onto the vocabulary at once (the loss setting)
    act_fwd: int      # activations alive at the end of forward
    recomputed: int   # one checkpointed block's internals, recomputed in backward (0 without checkpointing)
    bwd_floor: int    # a small loss: the activations' peak in backward (0 with the full loss)
    loss_grad: int    # the loss's gradient w.r.t. the logits
    bwd_extra: int    # a small loss: backward's temporaries above the start of backward

    @property
    def at_backward(self) -> int:
        """Activations and the loss's terms at the step's activation-heavy moment (backward's start or a
        block's recomputation)."""
        return self.act_fwd + max(self.loss_grad + self.bwd_extra, self.recomputed)


def _step(arch: Arch, sharding: str, precision: str, batch_size: int, max_length: int, checkpointing: bool,
          loss: str, answer_tokens: int | None) -> tuple[_Step, int]:
    """The step's activation terms, and the activation category's own peak (module docstring)."""
    x, c = batch_size * max_length, COMPUTE_BYTES[precision]
    rows = logits_rows(loss, batch_size, max_length, answer_tokens)
    act_fwd = activation_bytes(arch, batch_size, max_length, precision, checkpointing, sharding)
    recomputed = recomputed_block(arch, x, batch_size, max_length, precision, checkpointing)
    bwd_floor = 0   # a small loss: the activation category (and the peak) may come in backward instead
    if loss != "full":
        k = ACT_COEF["fp32" if precision == "fp32" else "mixed"]
        ddp_out = c * x * arch.vocab if sharding == "ddp" and not checkpointing else 0
        act_fwd += k["logits"] * (rows - x) * arch.vocab - ddp_out   # the model returns the loss, not logits
        if not checkpointing:
            bwd_floor = (act_fwd - k["logits"] * rows * arch.vocab + BWD_SCORES * batch_size * arch.heads
                         * max_length ** 2 + BWD_H * x * arch.hidden)
    loss_grad = c * rows * arch.vocab
    bwd_extra = max(0, bwd_floor + BWD_TEMP_H * x * arch.hidden - act_fwd - loss_grad) if bwd_floor else 0
    step = _Step(arch, x, batch_size, rows, act_fwd, recomputed, bwd_floor, loss_grad, bwd_extra)
    # the category's own peak: with checkpointing it comes in backward, when a block is recomputed on
    # top of what forward kept (the tracker counts recomputed tensors as activations)
    return step, max(act_fwd + recomputed, bwd_floor)


def estimate(model: str | Arch = "bloom-560m", sharding: str = "full_shard", world_size: int = 1,
             precision: str = "bf16", batch_size: int = 8, max_length: int = 512, offload: bool = False,
             activation_checkpointing: bool = False, replicas: int = 1, grad_acc: int = 1,
             device: str = "cuda", loss: str = "full", answer_tokens: int | None = None) -> Breakdown:
    """Predicted bytes per GPU (or CPU rank) by category for one config (see the module docstring).

    `max_length` is the sequence length the step trains on (with dynamic padding: its longest example);
    `device` "cpu" for a CPU rank (one block in flight), anything else a GPU; `loss` the training loss
    (workshop.training.loss), `answer_tokens` the micro-batch's answer positions for answer_only."""
    arch = get_arch(model)
    _check(sharding, world_size, precision, batch_size, max_length, offload, replicas, grad_acc)
    n = _shard_size(sharding, world_size, replicas)
    bd = Breakdown(n_params=arch.params, shard_size=n)
    step, bd.activations = _step(arch, sharding, precision, batch_size, max_length, activation_checkpointing,
                                 loss, answer_tokens)
    bd.logits = COMPUTE_BYTES[precision] * step.rows * arch.vocab
    if sharding in FSDP_SHARDINGS:
        _fsdp(bd, step, sharding, n, precision, offload, grad_acc, device, replicas)
    else:
        _unsharded(bd, step, sharding, precision, activation_checkpointing, grad_acc, loss)
    return bd


def _unsharded(bd: Breakdown, step: _Step, sharding: str, precision: str, checkpointing: bool, grad_acc: int,
               loss: str) -> None:
    """One process or DDP: every rank stores the whole model, its gradients and AdamW's state."""
    arch, P, Vh = step.arch, step.arch.params, step.arch.vocab * step.arch.hidden
    # backward's temporaries: the largest of the logits' gradients and the h-sized ones near the embedding
    bd.other = max(8 * step.rows * arch.vocab, 100 * step.x * arch.hidden + 4 * Vh)
    bd.params, bd.grads, bd.optimizer = 4 * P, 4 * P, 8 * P
    if grad_acc > 1:  # a later micro-batch's incoming gradient, counted as one before it is added in:
        bd.grads += 4 * max(Vh, 4 * arch.hidden ** 2)  # the largest parameter's (the tied embedding)
    if sharding == "ddp":
        # the all-reduce works in DDP's gradient buckets: fp32 like the gradients they copy, allocated
        # when DDP wraps the model, outside the tracker's view (so not in `other`; measured: the tracker's
        # `other` of DDP runs is the one-process run's, tests/test_memory.py)
        bd.ddp_buckets = 4 * P
    ddp_out = (COMPUTE_BYTES[precision] * step.x * arch.vocab
               if sharding == "ddp" and not checkpointing and loss == "full" else 0)
    held = 4 * P if grad_acc > 1 else 0  # the previous micro-batches' gradients, kept to accumulate
    bd.peak = 4 * P + 8 * P + held + max(step.act_fwd - ddp_out + step.loss_grad + step.bwd_extra,
                                         step.act_fwd + step.recomputed)


# FSDP's backward temporaries beside the embedding's (bytes per x·h and per b·a·s² element). fp32: 100 per x·h
# (the tiny runs; tiny full_shard x 2 dry runs at 64 to 512 tokens: 103 to 112). 16-bit: 24 per x·h and 6.5 per
# attention score (BLOOM's softmax backward in fp32), fitted on four tiny bf16 dry runs (32 to 512 tokens, s 32
# to 256) and both ranks of a real 2-rank bf16 run (s 216, 235): 3 to 10 % above each (the tests hold 16-bit
# `other` as an upper bound), where 100 per x·h said up to +26 % (and +12.8 % at BLOOM-7b1, 4 x 512).
# DDP and one process keep 100: a DDP step cannot be dry-run, so nothing measured a 16-bit one at size.
TEMPS_PER_XH = {"fp32": 100, "mixed": 24}
TEMPS_PER_SCORE = {"fp32": 0, "mixed": 6.5}


def _fsdp_temporaries(step: _Step, precision: str) -> int:
    """The h-sized and score-sized temporaries of backward near the embedding, under FSDP."""
    kind = "fp32" if precision == "fp32" else "mixed"
    arch, seq = step.arch, step.x // step.batch_size
    return int(TEMPS_PER_XH[kind] * step.x * arch.hidden
               + TEMPS_PER_SCORE[kind] * step.batch_size * arch.heads * seq ** 2)


def _fsdp(bd: Breakdown, step: _Step, sharding: str, n: int, precision: str, offload: bool, grad_acc: int,
          device: str, replicas: int) -> None:
    """FSDP2: stored shards, the units gathered at once in the compute dtype (MixedPrecisionPolicy's
    param_dtype), the unsharded gradients before their reduce-scatter, and where the peak falls."""
    arch, P, Vh, block = step.arch, step.arch.params, step.arch.vocab * step.arch.hidden, step.arch.block_params
    c = COMPUTE_BYTES[precision]
    stored, optim = 4 * P // n, 8 * P // n
    kept = sharding in GRAD_OP_SHARDINGS   # every unit stays gathered from forward to backward
    gathered_max = c * P if kept else c * (Vh + blocks_in_flight(device) * block)
    gathered_at_peak = c * P if kept else c * Vh
    grad_dtype = 4 if precision == "fp32" else 2  # accelerate reduces in the compute dtype
    # no sync on non-final micro-batches: every unit keeps its unsharded gradient until the last one
    held = grad_dtype * P if grad_acc > 1 else 0
    bd.unsharded_grads = max(held, grad_dtype * (max(Vh, block) if offload else Vh))
    # HSDP with 16-bit reduction: each block's reduce-scattered gradient shard (reduce dtype), kept for the
    # all-reduce among the replicas until backward ends, so alive at the embedding's backward (BLOOM-7b1,
    # 2 x 8, bf16: 30 x 2 B x 201 M / 8 = 1,440.4 MB, the dry run's 7,704.5 - 6,264.1 exactly). In fp32
    # the shard is the stored gradient itself (the tiny 2 x 2 runs of tests/test_memory.py: nothing more)
    # the tiny 2 x 2 bf16 dry run keeps one block's fewer at its peak, 7b1 none fewer: L - 1, within 1 % of both
    hsdp_shards = grad_dtype * (arch.layers - 1) * block // n if replicas > 1 and precision != "fp32" else 0
    # backward's last unit, the tied embedding: the fp32 temporary of its backward (4 V·h, in the h-sized
    # term), its unsharded gradient and a block's, beside the h-sized temporaries; the logits'
    # gradients come earlier and are gone by then, so the larger of the two is the category's peak
    # (benchmarks/paper: BLOOM-7b1 at 16 ranks, 1 x 512, where the additive buffers said +41 %)
    # fp32 (no MixedPrecisionPolicy): the tied weight's gradient is accumulated in fp32 at the embedding's
    # backward, one more V·h fp32 tensor beside them (BLOOM-560M fp32, 2 x 8, 1 x 256: dry run 2,988 MB,
    # 3 x 4 V·h + 4 block; the 16-bit runs show none)
    tied_acc = 4 * Vh if grad_dtype == 4 else 0
    bd.other = max(8 * step.rows * arch.vocab,
                   _fsdp_temporaries(step, precision) + 4 * Vh + grad_dtype * (Vh + block) + tied_acc + hsdp_shards)
    # the peak is either at backward's start (activations, the loss's gradient) or at its end, with every
    # sharded gradient reduced, the embedding gathered, its backward's fp32 temporary and unsharded gradient
    # (BLOOM-7b1 at 16 ranks, 1 x 512: the end, 14.7 GB, where the start alone said 12.1)
    at_end = gathered_at_peak + held + (4 + grad_dtype) * Vh + tied_acc + hsdp_shards
    at_start = gathered_at_peak + held + step.at_backward
    if offload:
        bd.params = gathered_max
        bd.host_params, bd.host_grads, bd.host_optimizer = stored, 4 * P // n, optim
        bd.peak = max(at_start, at_end)
        bd.notes.append("offload: sharded params, grads and AdamW states live in host memory")
    else:
        bd.params = stored + gathered_max
        bd.grads = 4 * P // n
        bd.optimizer = optim
        bd.peak = stored + optim + max(at_start, bd.grads + at_end)


def estimate_args(cfg: Any, batch_shape: tuple[int, int] | list[int] | None = None,
                  answer_tokens: int | None = None) -> tuple[Any, ...]:
    """`estimate`'s arguments for a RunConfig (or its resolved dict): what a prediction of that run depends on,
    so that a table of predictions made elsewhere (the grader's references) can be keyed by the same tuple."""
    get = (lambda k, d=None: cfg.get(k, d)) if isinstance(cfg, dict) else (lambda k, d=None: getattr(cfg, k, d))
    world = get("world_size") or int(get("nodes", 1)) * int(get("procs_per_node", 1))
    sharding = get("sharding", "none")
    replicas = get("replicas") or (get("hybrid_replicas") or get("nodes", 1) if sharding in HYBRID_SHARDINGS else 1)
    batch, seq = batch_shape or (int(get("batch_size", 1)), int(get("max_length", 256)))
    global_batch = int(get("global_batch", 0) or 0)
    grad_acc = max(1, global_batch // (int(get("batch_size", 1)) * int(world))) if global_batch else int(get("grad_acc", 1) or 1)
    device = "cpu" if get("device", "auto") == "cpu" else "cuda"   # "auto" on a course site: its GPUs
    return (get("model", "tiny"), sharding, int(world), get("precision", "fp32"), int(batch), int(seq),
            bool(get("offload", False)), bool(get("activation_checkpointing", False)), int(replicas or 1),
            grad_acc, device, get("loss", "full") or "full", answer_tokens)


def estimate_config(cfg: Any, batch_shape: tuple[int, int] | list[int] | None = None,
                    answer_tokens: int | None = None) -> Breakdown:
    """The prediction for a RunConfig (or its resolved dict from run_args.json); `batch_shape`
    (micro-batch, sequence length) is what a measured step trained on (summary.json's
    tensor_mem_mb_per_rank[r]["batch_shape"]; dynamic padding makes it shorter than max_length)."""
    return estimate(*estimate_args(cfg, batch_shape, answer_tokens))


COMPARED = (*CATEGORIES, "peak", *HOST, "unsharded_grads")


def compare(summary: dict[str, Any], config: dict[str, Any]) -> list[dict[str, Any]]:
    """Predicted vs measured MB per rank and category for one run (summary.json + run_args.json's config).

    Each rank is predicted at the batch shape its measured step trained on, on the device it ran on
    (the summary's `device`: a config's "auto" says nothing of it)."""
    rows = []
    ran_on = {**config, "device": summary.get("device") or config.get("device", "auto")}
    positions = summary.get("logits_positions_per_rank") or []
    for rank, measured in enumerate(summary.get("tensor_mem_mb_per_rank") or []):
        if not measured:
            continue
        answers = positions[rank] if rank < len(positions) and config.get("loss") == "answer_only" else None
        predicted = estimate_config(ran_on, measured.get("batch_shape"), answers).as_mb()
        for category in COMPARED:
            if category not in measured and category in (*HOST, "unsharded_grads"):
                continue
            got, want = measured.get(category), predicted[category]
            rows.append({"rank": rank, "category": category, "predicted_mb": round(want, 3),
                         "measured_mb": got,
                         "rel_error": round((want - got) / got, 4) if got else None})
        logits = summary.get("logits_mb_per_rank") or []
        if rank < len(logits) and logits[rank]:
            rows.append({"rank": rank, "category": "logits", "predicted_mb": round(predicted["logits"], 4),
                         "measured_mb": logits[rank],
                         "rel_error": round((predicted["logits"] - logits[rank]) / logits[rank], 4)})
    return rows


# ---------------------------------------------------------------------------------------- what fits


@dataclass(frozen=True)
class Fit:
    """The largest BLOOM-shaped model found that fits, and its breakdown."""

    params: int
    hidden: int
    layers: int
    heads: int
    breakdown: Breakdown | None


# The BLOOM ladder: the published checkpoints (hidden, layers) and, between 7b1 and 176b, rungs on
# the same aspect ratio. A "model that fits" keeps BLOOM's proportions rather than degenerate shapes.
BLOOM_LADDER: tuple[tuple[int, int], ...] = (
    (1024, 24), (1536, 24), (2048, 24), (2560, 30), (4096, 30), (5120, 40), (6144, 44),
    (8192, 48), (10240, 56), (12288, 64), (14336, 70))


# The published checkpoints' own head counts: bloom-1b1 (16 heads of 96) and bloom-3b (32 of 80) follow no
# single head-dim rule, and the attention scores (b·heads·s² per block) grow with the count.
PUBLISHED_HEADS = {(a.hidden, a.layers): a.heads for a in PROFILES.values() if a.vocab == 250880}


def bloom_family_arch(hidden: int, layers: int, vocab: int = 250880) -> Arch:
    """A rung's shapes: a published checkpoint's own heads; between them BLOOM's usual head dim, 64 up
    to hidden 1024 and 128 above (560m: 16x64, 1b7: 16x128, 7b1: 32x128)."""
    heads = PUBLISHED_HEADS.get((hidden, layers)) if vocab == 250880 else None
    if heads is None:
        heads = max(1, hidden // 64) if hidden <= 1024 else max(1, hidden // 128)
    return Arch(f"bloom-h{hidden}-l{layers}", vocab, hidden, layers, heads)


def largest_model_that_fits(gpu_gb: float, sharding: str = "none", world_size: int = 1, precision: str = "bf16",
                            batch_size: int = 8, max_length: int = 512, offload: bool = False,
                            activation_checkpointing: bool = False, replicas: int = 1) -> Fit:
    """The BLOOM-family model with the most parameters whose predicted GPU peak (`gpu_peak`, DDP's
    buckets included) fits in `gpu_gb` GiB per GPU — experiment 1 of the seed course, without the
    trial-and-error OOMs. Only whole rungs of BLOOM_LADDER count: trimming layers off a wide model
    gives shapes nobody trains."""
    budget = gpu_gb * GiB
    best = Fit(0, 0, 0, 0, None)
    for hidden, n_layers in BLOOM_LADDER:
        arch = bloom_family_arch(hidden, n_layers)
        bd = estimate(arch, sharding, world_size, precision, batch_size, max_length, offload,
                      activation_checkpointing, replicas)
        if bd.gpu_peak <= budget and arch.params > best.params:
            best = Fit(arch.params, hidden, n_layers, arch.heads, bd)
    return best


# ---------------------------------------------------------------------------------------- CLI


def format_breakdown(bd: Breakdown) -> str:
    mb = bd.as_mb()
    lines = [f"parameters: {bd.n_params:,} (sharded over {bd.shard_size})",
             "per GPU (each category's own peak over a step):"]
    lines += [f"  {k:<12} {mb[k]:>12,.1f} MB" for k in CATEGORIES]
    lines.append(f"  {'peak':<12} {mb['peak']:>12,.1f} MB  ({bd.peak / GiB:.2f} GiB per GPU, most alive at once)")
    if bd.ddp_buckets:
        lines.append(f"  {'ddp_buckets':<12} {mb['ddp_buckets']:>12,.1f} MB  (DDP's gradient buckets: the tracker "
                     "cannot see them, a GPU's allocator does)")
        lines.append(f"  {'gpu_peak':<12} {mb['gpu_peak']:>12,.1f} MB  ({bd.gpu_peak / GiB:.2f} GiB: peak + buckets, "
                     "what a GPU must hold)")
    if bd.cpu:
        lines += [f"  {k:<12} {mb[k]:>12,.1f} MB  (host memory per rank)" for k in (*HOST, "host")]
    lines += [f"note: {n}" for n in bd.notes]
    return "\n".join(lines)


# The course's configurations, as the notebooks quote them for BLOOM-560M (bf16, 8 x 512 tokens per GPU).
COURSE_CONFIGS = (("one GPU", "none", 1, False, False), ("ddp x4", "ddp", 4, False, False),
                  ("full_shard x4", "full_shard", 4, False, False), ("shard_grad_op x4", "shard_grad_op", 4, False, False),
                  ("full_shard x4 + offload", "full_shard", 4, True, False),
                  ("full_shard x4 + AC", "full_shard", 4, False, True))


def course_table(model: str = "bloom-560m", precision: str = "bf16", batch_size: int = 8, max_length: int = 512) -> str:
    """One line per course configuration: MB per GPU by category, peak, and host memory."""
    cols = (*CATEGORIES, "peak", "gpu_peak", "host")
    lines = [f"{model}, {precision}, batch {batch_size} x {max_length} tokens per GPU (MB per GPU):",
             f"  {'config':<24}" + "".join(f"{c:>12}" for c in cols)]
    for label, sharding, world, offload, ac in COURSE_CONFIGS:
        mb = estimate(model, sharding, world, precision, batch_size, max_length, offload, ac).as_mb()
        lines.append(f"  {label:<24}" + "".join(f"{mb[c]:>12,.0f}" for c in cols))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="workshop estimate", description="Predict peak memory per GPU for a config.")
    p.add_argument("--model", default="bloom-560m", help=f"profile: {', '.join(PROFILES)}")
    p.add_argument("--sharding", default="full_shard", choices=SHARDINGS)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--precision", default="bf16", choices=tuple(COMPUTE_BYTES))
    p.add_argument("--batch-size", type=int, default=8, help="per-GPU batch")
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--offload", action="store_true")
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--replicas", type=int, default=1, help="hybrid_shard replica groups")
    p.add_argument("--grad-acc", type=int, default=1, help="gradient accumulation steps")
    p.add_argument("--fit-gpu-gb", type=float, default=None,
                   help="also report the largest BLOOM-shaped model that fits a GPU of this many GiB")
    p.add_argument("--json", action="store_true", help="print the breakdown as JSON (MB)")
    p.add_argument("--course", action="store_true",
                   help="print the course's configurations for --model (the figures the notebooks quote)")
    args = p.parse_args(argv)
    if args.course:
        print(course_table(args.model, args.precision, args.batch_size, args.max_length))
        return 0
    try:
        bd = estimate(args.model, args.sharding, args.world_size, args.precision, args.batch_size,
                      args.max_length, args.offload, args.activation_checkpointing, args.replicas, args.grad_acc)
    except ValueError as e:
        print(f"workshop estimate: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"model": args.model, "n_params": bd.n_params, **bd.as_mb()}))
    else:
        print(format_breakdown(bd))
    if args.fit_gpu_gb:
        for sharding in ("none" if args.world_size == 1 else "ddp", args.sharding):
            offload = args.offload and sharding in FSDP_SHARDINGS   # the unsharded baseline cannot offload
            fit = largest_model_that_fits(args.fit_gpu_gb, sharding, args.world_size, args.precision,
                                          args.batch_size, args.max_length, offload,
                                          args.activation_checkpointing, args.replicas)
            print(f"largest BLOOM-shaped model in {args.fit_gpu_gb:g} GiB with {sharding} on {args.world_size} "
                  f"GPU(s): {fit.params / 1e9:.2f} B params (hidden {fit.hidden}, {fit.layers} layers)")
    return 0


# The CUDA context (~0.5 GiB a process, workshop.training.gpus states its source), which the model leaves out:
# the explorer and the bench take it off a GPU's memory before asking what fits (workshop.student.explorer's GPUS).
CUDA_CONTEXT = float(CUDA_CONTEXT_BYTES)
MAX_MICRO_BATCH = 4096


def largest_micro_batch(predict: Any, usable: float) -> int:
    """The largest micro-batch whose predicted GPU peak fits `usable` bytes (0 if even 1 does not), by
    bisection: the peak grows with the batch."""
    if predict(1).gpu_peak > usable:
        return 0
    lo, hi = 1, MAX_MICRO_BATCH
    if predict(hi).gpu_peak <= usable:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if predict(mid).gpu_peak <= usable else (lo, mid)
    return lo
