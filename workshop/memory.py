"""The memory model: how many bytes each GPU holds for a config, component by component.

Why a model and not just a measurement: before a job is submitted, a student should be able to say
"this will not fit on one GPU, but full_shard on 4 will", and afterwards compare the prediction with
what the run measured. The model follows what this course runs (HF Trainer, AdamW, FSDP2 with
autocast-style mixed precision); every term is a formula written next to its reason.

Conventions
- P = parameters, N = ranks a parameter is sharded over (world for full_shard/shard_grad_op, the
  shard group for hybrid_shard, 1 for none/ddp), b = per-GPU batch, s = sequence length,
  h = hidden size, a = attention heads, L = layers, V = vocabulary.
- Mixed precision (bf16/fp16) keeps the parameters in fp32 — those ARE the fp32 master weights —
  and computes with 16-bit copies; gradients and AdamW's two moments are fp32 (4 + 4 + 8 bytes/param).
- The total is a conservative sum: it assumes every component is alive at the same time
  (activations, logits and gradients overlap at the start of backward only in part). It excludes
  the CUDA context (~0.5 GiB, invisible to torch.cuda.max_memory_allocated) and allocator slack.
- 1 MB here is 2**20 bytes, the unit the training script reports.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any

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


# Shapes from bigscience/bloom-560m's config.json and workshop.models.TINY (a test keeps them equal).
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

SHARDINGS = ("none", "ddp", "full_shard", "shard_grad_op", "hybrid_shard")
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
    """Bytes per GPU by component; `total` is their sum, `cpu` what offload moved to host memory."""

    params: int = 0  # weights the forward computes with, beyond the stored copy (16-bit casts)
    master_weights: int = 0  # the stored (fp32) parameters, or this rank's shard of them
    grads: int = 0
    optimizer: int = 0
    gather_buffer: int = 0  # FSDP: unsharded units alive at once
    comm_buffers: int = 0  # DDP gradient buckets / FSDP's unsharded gradient before reduce-scatter
    activations: int = 0
    logits: int = 0
    cpu: int = 0  # offloaded to host memory (not in total)
    n_params: int = 0
    shard_size: int = 1
    notes: list[str] = field(default_factory=list)

    COMPONENTS = ("params", "master_weights", "grads", "optimizer", "gather_buffer", "comm_buffers",
                  "activations", "logits")

    @property
    def total(self) -> int:
        return sum(getattr(self, c) for c in self.COMPONENTS)

    @property
    def total_mb(self) -> float:
        return self.total / MB

    def as_mb(self) -> dict[str, float]:
        out = {c: getattr(self, c) / MB for c in self.COMPONENTS}
        out["total"] = self.total_mb
        out["cpu"] = self.cpu / MB
        return out


def activation_bytes(arch: Arch, batch_size: int, seq_len: int, precision: str = "bf16",
                     checkpointing: bool = False) -> int:
    """Activations kept for backward, after Korthikanti et al. 2022, "Reducing Activation
    Recomputation in Large Transformer Models" (arXiv:2205.05198), eq. (1): a GPT block stores
    s·b·h·(34 + 5·a·s/h) bytes with 16-bit activations (34 sbh: the linear/LayerNorm/GeLU inputs and
    dropout masks; 5as²b: the attention scores, softmax output and its mask). fp32 doubles it.
    With activation checkpointing each block keeps only its input (2·s·b·h bytes in 16-bit) and one
    block's full set is recomputed at a time during backward (their section 4, "full recomputation").
    BLOOM runs without dropout, so the masks (3 of the 34 and 1 of the 5) are an overestimate, and
    autocast's fp32 LayerNorm outputs an underestimate; the formula is the textbook one, kept as is.
    """
    s, b, h, a = seq_len, batch_size, arch.hidden, arch.heads
    scale = COMPUTE_BYTES[precision] / 2
    per_layer = s * b * h * (34 + 5 * a * s / h) * scale
    if not checkpointing:
        return int(arch.layers * per_layer)
    inputs = arch.layers * 2 * s * b * h * scale
    return int(inputs + per_layer)


def logits_bytes(arch: Arch, batch_size: int, seq_len: int) -> int:
    """The loss upcasts logits to fp32 (b·s·V·4 bytes) and backward makes their gradient (the same
    again): with BLOOM's 250,880-token vocabulary this is often the largest activation of all."""
    return 2 * batch_size * seq_len * arch.vocab * 4


def estimate(model: str | Arch = "bloom-560m", sharding: str = "full_shard", world_size: int = 1,
             precision: str = "bf16", batch_size: int = 8, max_length: int = 512, offload: bool = False,
             activation_checkpointing: bool = False, replicas: int = 1, prefetch: bool = True) -> Breakdown:
    """Predicted bytes per GPU for one config (see the module docstring for the conventions)."""
    arch = get_arch(model)
    if sharding not in SHARDINGS:
        raise ValueError(f"unknown sharding {sharding!r}; use one of {', '.join(SHARDINGS)}")
    if precision not in COMPUTE_BYTES:
        raise ValueError(f"unknown precision {precision!r}; use fp32, bf16 or fp16")
    if world_size < 1 or batch_size < 1 or max_length < 1 or replicas < 1:
        raise ValueError("world_size, batch_size, max_length and replicas must be >= 1")
    if sharding == "none" and world_size != 1:
        raise ValueError("sharding 'none' is one process: use world_size=1, or ddp/an FSDP strategy")
    if offload and sharding in ("none", "ddp"):
        raise ValueError("offload needs an FSDP strategy")
    fsdp = sharding in ("full_shard", "shard_grad_op", "hybrid_shard")
    if sharding == "hybrid_shard":
        if world_size % replicas or world_size // replicas < 1:
            raise ValueError(f"hybrid_shard: {replicas} replicas do not divide world size {world_size}")
        n = world_size // replicas
    else:
        n = world_size if fsdp else 1
    P = arch.params
    cb = COMPUTE_BYTES[precision]
    mixed = precision != "fp32"
    bd = Breakdown(n_params=P, shard_size=n)

    # Stored parameters: fp32, sharded over N under FSDP (these are the master weights when mixed).
    stored = 4 * P // n
    # Gradients land on the stored parameters (fp32); AdamW keeps exp_avg and exp_avg_sq (2 x fp32).
    grads, optim = 4 * P // n, 8 * P // n
    if mixed:
        bd.master_weights = stored
    else:
        bd.params = stored
    if fsdp:
        # FSDP2 keeps the root unit (embeddings + final norm) gathered from forward to backward, and
        # gathers one block ahead (prefetch): root + 2 blocks unsharded in the compute dtype.
        unit_max = max(arch.root_params, arch.block_params)
        if sharding == "shard_grad_op":
            # reshard_after_forward=False: every unit stays unsharded between forward and backward.
            bd.gather_buffer = cb * P
        else:
            bd.gather_buffer = cb * (arch.root_params + (2 if prefetch else 1) * arch.block_params)
        # Each unit's gradient exists unsharded (compute dtype) before it is reduce-scattered.
        bd.comm_buffers = cb * unit_max
    else:
        if mixed:
            # Autocast caches a 16-bit cast of every weight for the forward; backward reuses it.
            bd.params = cb * P
        if sharding == "ddp":
            # DDP's gradient buckets are a second fp32 copy (gradient_as_bucket_view=False default).
            bd.comm_buffers = 4 * P
    bd.grads, bd.optimizer = grads, optim
    if offload:
        moved = bd.master_weights + bd.params + bd.grads + bd.optimizer
        bd.cpu = moved
        bd.master_weights = bd.params = bd.grads = bd.optimizer = 0
        bd.notes.append("offload: sharded params, grads and AdamW states live in host memory")
    bd.activations = activation_bytes(arch, batch_size, max_length, precision, activation_checkpointing)
    bd.logits = logits_bytes(arch, batch_size, max_length)
    return bd


def estimate_config(cfg: Any) -> Breakdown:
    """The prediction for a RunConfig (or its resolved dict from run_args.json)."""
    get = (lambda k, d=None: cfg.get(k, d)) if isinstance(cfg, dict) else (lambda k, d=None: getattr(cfg, k, d))
    world = get("world_size") or int(get("nodes", 1)) * int(get("procs_per_node", 1))
    sharding = get("sharding", "none")
    replicas = get("replicas") or (get("hybrid_replicas") or get("nodes", 1) if sharding == "hybrid_shard" else 1)
    return estimate(get("model", "tiny"), sharding, int(world), get("precision", "fp32"),
                    int(get("batch_size", 1)), int(get("max_length", 256)), bool(get("offload", False)),
                    bool(get("activation_checkpointing", False)), int(replicas or 1))


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


def bloom_family_arch(hidden: int, layers: int, vocab: int = 250880) -> Arch:
    """BLOOM's head rule: head dim 64 up to hidden 1024, 128 above (560m: 16x64, 1b7: 16x128, 7b1: 32x128)."""
    heads = max(1, hidden // 64) if hidden <= 1024 else max(1, hidden // 128)
    return Arch(f"bloom-h{hidden}-l{layers}", vocab, hidden, layers, heads)


def largest_model_that_fits(gpu_gb: float, sharding: str = "none", world_size: int = 1, precision: str = "bf16",
                            batch_size: int = 8, max_length: int = 512, offload: bool = False,
                            activation_checkpointing: bool = False, replicas: int = 1) -> Fit:
    """The BLOOM-family model with the most parameters whose predicted peak fits in `gpu_gb` GiB per
    GPU — experiment 1 of the seed course, without the trial-and-error OOMs. Only whole rungs of
    BLOOM_LADDER count: trimming layers off a wide model gives shapes nobody trains."""
    budget = gpu_gb * GiB
    best = Fit(0, 0, 0, 0, None)
    for hidden, n_layers in BLOOM_LADDER:
        arch = bloom_family_arch(hidden, n_layers)
        bd = estimate(arch, sharding, world_size, precision, batch_size, max_length, offload,
                      activation_checkpointing, replicas)
        if bd.total <= budget and arch.params > best.params:
            best = Fit(arch.params, hidden, n_layers, arch.heads, bd)
    return best


# ---------------------------------------------------------------------------------------- CLI


def format_breakdown(bd: Breakdown) -> str:
    mb = bd.as_mb()
    width = max(map(len, mb))
    lines = [f"parameters: {bd.n_params:,} (sharded over {bd.shard_size})"]
    lines += [f"  {k:<{width}}  {v:>10,.0f} MB" for k, v in mb.items() if k not in ("total", "cpu")]
    lines.append(f"  {'total':<{width}}  {mb['total']:>10,.0f} MB  ({bd.total / GiB:.2f} GiB per GPU)")
    if bd.cpu:
        lines.append(f"  {'cpu':<{width}}  {mb['cpu']:>10,.0f} MB  (host memory per rank)")
    lines += [f"note: {n}" for n in bd.notes]
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
    p.add_argument("--fit-gpu-gb", type=float, default=None,
                   help="also report the largest BLOOM-shaped model that fits a GPU of this many GiB")
    p.add_argument("--json", action="store_true", help="print the breakdown as JSON (MB)")
    args = p.parse_args(argv)
    try:
        bd = estimate(args.model, args.sharding, args.world_size, args.precision, args.batch_size,
                      args.max_length, args.offload, args.activation_checkpointing, args.replicas)
    except ValueError as e:
        print(f"workshop estimate: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"model": args.model, "n_params": bd.n_params, **bd.as_mb()}))
    else:
        print(format_breakdown(bd))
    if args.fit_gpu_gb:
        for sharding in ("none" if args.world_size == 1 else "ddp", args.sharding):
            fit = largest_model_that_fits(args.fit_gpu_gb, sharding, args.world_size, args.precision,
                                          args.batch_size, args.max_length, args.offload,
                                          args.activation_checkpointing, args.replicas)
            print(f"largest BLOOM-shaped model in {args.fit_gpu_gb:g} GiB with {sharding} on {args.world_size} "
                  f"GPU(s): {fit.params / 1e9:.2f} B params (hidden {fit.hidden}, {fit.layers} layers)")
    return 0
