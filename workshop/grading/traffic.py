"""What crosses the network between nodes in one training step, for ring collectives placed node by node.

Notebook 05 asks the student which collectives cross the network under `full_shard` and `hybrid_shard`,
and how many bytes each node sends to the other nodes per step; this module is the reference (the grader's: it
lives in the grading room, which the student's install leaves out), and
tests/test_collectives.py sets it beside the collectives a real FSDP2 step runs on 4 gloo processes
launched as 2 "nodes" of 2 (which groups, how many bytes, how often: measured, not assumed).

The accounting is NCCL's ring: a collective over the ranks g_0 .. g_(k-1) of a group moves data from
each rank to the next (g_(k-1) to g_0 closes the ring). Per hop, an all-gather or a reduce-scatter of a
tensor of S bytes (its whole, gathered size) sends (k-1)/k x S; an all-reduce, a reduce-scatter then an
all-gather, 2 (k-1)/k x S. A hop crosses the network when its two ranks sit on different nodes. With
the ranks placed node by node (what torchrun and Slurm do: ranks 0 .. g-1 on the first node), a ring over
every rank leaves each node by exactly one hop: a node sends one rank's share across, not the sum of its
ranks' shares. HYBRID_SHARD's replica groups take one rank from each node: every hop crosses.

The plain rule of the notebook counts every unit's all-gather twice (forward and backward); FSDP2 does
not re-gather a unit it keeps from forward to backward (the root, which holds BLOOM's tied embedding),
so a real step sends a little less under full_shard (the measurement shows by how much). The
communication model (`workshop.comm.model`) predicts a run's every collective, unit by unit, with the
same ring shares (`comm.RING_SHARE`); this module keeps the notebook's plain rule, the reference a
student's function is graded against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from workshop.comm.model import KINDS, RING_SHARE


@dataclass(frozen=True)
class Collective:
    """One collective as a rank sees it: its kind, its group's ranks in ring order, the whole tensor's bytes."""

    kind: str
    ranks: tuple[int, ...]
    nbytes: int


def hop_bytes(c: Collective) -> float:
    """Bytes each rank of the ring sends to the next for this collective."""
    if c.kind not in KINDS:
        raise ValueError(f"unknown collective {c.kind!r}: use one of {', '.join(KINDS)}")
    return RING_SHARE[c.kind](len(c.ranks)) * c.nbytes


def node_by_node(gpus_per_node: int) -> Callable[[int], int]:
    """The node of each rank when ranks are placed node by node."""
    return lambda rank: rank // gpus_per_node


def sent_across(collectives: Iterable[Collective], node_of: Callable[[int], int] | Sequence[int]) -> dict[int, float]:
    """Bytes each node sends to other nodes: the ring hops whose two ranks are on different nodes."""
    where = node_of if callable(node_of) else node_of.__getitem__
    out: dict[int, float] = {}
    for c in collectives:
        for i, src in enumerate(c.ranks):
            dst = c.ranks[(i + 1) % len(c.ranks)]
            if len(c.ranks) > 1 and where(src) != where(dst):
                out[where(src)] = out.get(where(src), 0.0) + hop_bytes(c)
    return out


def step_collectives(strategy: str, nodes: int, gpus_per_node: int, nbytes: int) -> list[Collective]:
    """The collectives of one step under the plain rule, for `nbytes` of parameters (or gradients) in the
    dtype they travel in: `full_shard` all-gathers every unit in forward and again in backward and
    reduce-scatters its gradients over all ranks; `hybrid_shard` on the mesh [nodes, gpus_per_node] does the
    same inside each node and then all-reduces each rank's 1/gpus_per_node shard with the ranks that hold
    the same shard on the other nodes."""
    world = nodes * gpus_per_node
    if strategy == "full_shard":
        group = tuple(range(world))
        return [Collective("all_gather", group, nbytes), Collective("all_gather", group, nbytes),
                Collective("reduce_scatter", group, nbytes)]
    if strategy == "hybrid_shard":
        out = []
        for node in range(nodes):
            shard = tuple(range(node * gpus_per_node, (node + 1) * gpus_per_node))
            out += [Collective("all_gather", shard, nbytes), Collective("all_gather", shard, nbytes),
                    Collective("reduce_scatter", shard, nbytes)]
        for local in range(gpus_per_node):
            replicas = tuple(node * gpus_per_node + local for node in range(nodes))
            out.append(Collective("all_reduce", replicas, nbytes // gpus_per_node))
        return out
    raise ValueError(f"unknown strategy {strategy!r}: use full_shard or hybrid_shard")


def crossing(strategy: str, nodes: int, gpus_per_node: int) -> list[str]:
    """The kinds of collective that cross the network under `strategy` on that many nodes."""
    place = node_by_node(gpus_per_node)
    # groups are what matter, not sizes: ask the rule with a tensor that every group divides
    collectives = step_collectives(strategy, nodes, gpus_per_node, nodes * gpus_per_node * 8)
    return sorted({c.kind for c in collectives if sent_across([c], place)})


def network_bytes_per_node(strategy: str, nodes: int, gpus_per_node: int, nbytes: float) -> float:
    """Bytes one node sends to the other nodes per step under the plain rule (every node sends as much)."""
    if nodes < 2:
        return 0.0
    scale = 2**20   # exact ring arithmetic on a tensor every group divides, then scaled to `nbytes`
    sent = sent_across(step_collectives(strategy, nodes, gpus_per_node, scale * nodes * gpus_per_node),
                       node_by_node(gpus_per_node))
    return sent[0] / (scale * nodes * gpus_per_node) * nbytes
