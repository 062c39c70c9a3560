"""The rules an FSDP practitioner predicts with, as the notebooks' reference answers: the grader's.

They live in the grading room (issue 48, item 1), which the student's install leaves out, so that no code a
student can import computes what a hidden test compares against. The Trainer's step arithmetic
(`expected_steps`, `global_batch`) is not here: the class budget (`workshop.site.budget`) needs it, so its one
owner is `workshop.training.counted_steps`. A check compares a student's prediction with these rules, never
with the measurement; the run's summary then sets the measurement beside both (`local_shapes_per_rank`,
`steps`, `global_batch_measured`). Each rule is tested against real runs (tests/test_fsdp_exercises.py).
No torch import: a grader's process can use them without a GPU stack.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence


def shard0_local_shape(shape: Sequence[int], world_size: int, rank: int) -> tuple[int, ...]:
    """The local shape of a parameter FSDP2 shards as `Shard(0)` over `world_size` ranks, on `rank`.

    FSDP2 cuts dim 0 with `torch.chunk`: chunks of ceil(rows / world_size) rows, the last chunks
    shorter or empty. So 1024 rows on 3 ranks are 342, 342, 340, and 4 rows on 3 ranks are 2, 2, 0
    (rank 2 holds nothing of it, yet still takes part in its all-gather, padded).
    """
    if not shape:
        raise ValueError("a 0-dim parameter has no dim 0 to shard")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a world of {world_size}")
    rows = shape[0]
    chunk = math.ceil(rows / world_size)
    return (max(0, min(chunk, rows - rank * chunk)), *shape[1:])


def params_on_rank(shapes: Mapping[str, Sequence[int]], world_size: int, rank: int) -> int:
    """Parameter elements `rank` holds when every parameter in `shapes` is sharded as `Shard(0)`."""
    return sum(math.prod(shard0_local_shape(shape, world_size, rank)) for shape in shapes.values())


def held_fraction(sharding: str, world_size: int, replicas: int = 1) -> float:
    """The fraction of the model's parameters one rank is responsible for between steps: its fp32 shard
    (on its GPU, or in host memory under offload). DDP keeps a whole replica; an FSDP strategy 1/N of
    every parameter over its shard group: all N ranks, or N / replicas under hybrid sharding."""
    if sharding in ("none", "ddp"):
        return 1.0
    if world_size % replicas:
        raise ValueError(f"{replicas} replicas do not divide {world_size} ranks")
    return replicas / world_size if sharding.startswith("hybrid") else 1 / world_size


def fewest_micro_batches(global_batch: int, micro_batch_max: int, world_size: int) -> dict[str, int]:
    """The fastest settings that keep `global_batch` on `world_size` ranks: the largest micro-batch that
    fits and divides the batch, and the accumulation that makes up the rest (every micro-batch pays its
    own all-gathers)."""
    per_rank = global_batch // world_size
    batch = max(b for b in range(1, micro_batch_max + 1) if per_rank % b == 0)
    return {"batch_size": batch, "grad_acc": per_rank // batch}


def hsdp_mesh(nodes: int, gpus_per_node: int) -> list[int]:
    """HYBRID_SHARD's mesh `[replicas, shard]` for whole nodes: shard inside a node (the fast links),
    replicate across nodes, so that only the gradient all-reduce crosses the network."""
    return [nodes, gpus_per_node]


# Optimizer state tensors per parameter, each fp32 here: notebook 04 grades model state for optimizers it never runs.
OPTIMIZER_STATES = {"adamw": 2, "sgd_momentum": 1, "sgd": 0}


def model_state_bytes(n_params: int, world_size: int, optimizer: str = "adamw") -> dict[str, float]:
    """Bytes of fp32 gradient and optimizer state one rank stores under `full_shard`: a 1/N shard of
    4 B per parameter of gradient and 4 B per state tensor (AdamW's two moments, SGD's momentum)."""
    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f"unknown optimizer {optimizer!r}: use one of {sorted(OPTIMIZER_STATES)}")
    return {"grads": 4 * n_params / world_size, "optimizer": 4 * OPTIMIZER_STATES[optimizer] * n_params / world_size}


def amdahl_applies(speedup: float, gpu_ratio: float) -> bool:
    """Whether Amdahl's law can describe a measured `speedup` at `gpu_ratio` times the GPUs: only a speed-up
    between 1 (nothing shrank) and the ratio itself (everything did) comes from a serial fraction in
    [0, 1]. A run that got slower with more processes (processes taking turns on fewer cores, as on the CPU
    profiles) or faster than perfect (a slowed smallest run) is not a split of one step into a part that
    shrinks and a part that does not: fitting s to it gives s > 1 or s < 0, and predictions below 1."""
    return bool(gpu_ratio > 1 and 1 <= speedup <= gpu_ratio)


def serial_fraction(speedup: float, gpu_ratio: float) -> float:
    """Amdahl's serial fraction s that a measured `speedup` at `gpu_ratio` times the GPUs implies:
    the step time at r times the GPUs is t·(s + (1 − s)/r), so 1/speedup = s + (1 − s)/r. Refused where
    the law does not apply (`amdahl_applies`), so that no s outside [0, 1] is ever a reference."""
    if gpu_ratio <= 1:
        raise ValueError("the serial fraction needs a run on more GPUs than the smallest (gpu_ratio > 1)")
    if not amdahl_applies(speedup, gpu_ratio):
        raise ValueError(f"a speed-up of {speedup:.3g} at {gpu_ratio:g}x the GPUs is outside [1, {gpu_ratio:g}]: "
                         "Amdahl's law does not describe it (no serial fraction in [0, 1] gives it)")
    return (1 / speedup - 1 / gpu_ratio) / (1 - 1 / gpu_ratio)


def amdahl_speedup(serial: float, gpu_ratio: float) -> float:
    """The speed-up at `gpu_ratio` times the GPUs when a fraction `serial` of the step does not shrink."""
    if not 0 <= serial <= 1:
        raise ValueError(f"a serial fraction is a share of the step, in [0, 1], not {serial}")
    return 1 / (serial + (1 - serial) / gpu_ratio)


def network_seconds(strategy: str, nodes: int, gpus_per_node: int, psi_gb: float, node_GBps: float) -> float:
    """Seconds one step spends in the collectives that cross the network, when each node's outbound rate
    `node_GBps` (its network cards together) is what every byte leaving the node shares, and nothing
    overlaps. That rate is what a two-node all-reduce's bus bandwidth measures (nccl-tests' busbw: the
    bytes each rank of the ring sends, per second): NCCL lays one ring per card, and the GPUs of a node
    take turns on the node's cards, so the ring hops that leave a node share them, never one link per GPU.
    So the time is the bytes one node sends to the others (`workshop.grading.traffic`'s plain rule) over
    that rate: `full_shard`, three rings over every rank, each leaving a node by one hop with
    (N - 1)/N x `psi_gb`; `hybrid_shard` on [nodes, gpus_per_node], every GPU all-reducing its
    1/gpus_per_node shard with one rank per node, so the node sends 2 (nodes - 1)/nodes x `psi_gb` in all."""
    if node_GBps <= 0:
        raise ValueError(f"a node's outbound rate must be positive, not {node_GBps} GB/s")
    if nodes < 2:
        return 0.0
    if strategy == "full_shard":
        n = nodes * gpus_per_node
        return 3 * (n - 1) / n * psi_gb / node_GBps
    if strategy == "hybrid_shard":
        return 2 * (nodes - 1) / nodes * psi_gb / node_GBps
    raise ValueError(f"unknown strategy {strategy!r}: use full_shard or hybrid_shard")


# Notebook 04's visible check names the rule without naming its answer ("the fewest micro-batches").
fastest_settings = fewest_micro_batches
