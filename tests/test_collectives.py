"""What notebooks 02 and 05 say about FSDP2's communication, measured with real torch.distributed
processes on gloo: the course's tiny BLOOM, wrapped as notebook 02's `shard_model`, trained two steps on 4
processes on 2 "nodes" of 2 (tests/collectives_worker.py; forked ranks with the environment two torchruns give
them, tests/runs.py; the launch itself, two torchruns meeting at a c10d rendezvous, is tests/test_training.py's
two-node test).

Measured: which collectives each strategy runs, over which ranks, how many bytes, how often, and on which
launcher each rank ran. The bytes that cross between nodes follow from those by NCCL's ring (each rank
sends its share to the next rank of the group), the accounting `workshop.grading.traffic` does for the
notebook's reference: the test holds that reference to the measured collectives.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.runs import fork
from workshop.grading import traffic

pytestmark = pytest.mark.slow
WORKER = Path(__file__).with_name("collectives_worker.py")


def two_nodes(out: Path) -> dict[str, list[dict]]:
    """Per strategy, every rank's record (rank 0 first), from one launch of two "nodes"."""
    logs, rc = fork([str(out)], nproc=2, nnodes=2, script=str(WORKER)).finish(600)
    assert rc == 0, "\n".join(log[-3000:] for log in logs)
    return {s: [json.loads((out / f"{s}-rank{r}.json").read_text()) for r in range(4)]
            for s in ("full_shard", "hybrid_shard")}


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    return two_nodes(tmp_path_factory.mktemp("collectives"))


def collectives(rank: dict) -> list[traffic.Collective]:
    return [traffic.Collective(c["kind"], tuple(c["ranks"]), c["nbytes"]) for c in rank["forward_backward"]]


def sent_across_by_node(ranks: list[dict]) -> dict[int, float]:
    """Each node's bytes to the other node: every rank's own hops (to the next rank of each group it joined)
    whose ends ran on different launchers."""
    node = ranks[0]["nodes"]
    out: dict[int, float] = {}
    for r in ranks:
        for c in collectives(r):
            i = c.ranks.index(r["rank"])
            nxt = c.ranks[(i + 1) % len(c.ranks)]
            if node[nxt] != node[r["rank"]]:
                out[node[r["rank"]]] = out.get(node[r["rank"]], 0.0) + traffic.hop_bytes(c)
    return out


def test_the_notebooks_figures_follow_from_the_rule() -> None:
    """Notebook 05's BLOOM-560M figures, fp32, 2 nodes x 2 GPUs: 5.0 GB per node under full_shard, 2.24 GB under
    hybrid_shard, 2.25 x; per rank half of each; only the all-gathers and reduce-scatters, or the all-reduce, cross."""
    psi = 4 * 559_214_592
    fs, hs = (traffic.network_bytes_per_node(s, 2, 2, psi) for s in ("full_shard", "hybrid_shard"))
    assert round(fs / 1e9, 2) == 5.03 and round(hs / 1e9, 2) == 2.24 and fs / hs == pytest.approx(2.25)
    assert traffic.crossing("full_shard", 2, 2) == ["all_gather", "reduce_scatter"]
    assert traffic.crossing("hybrid_shard", 2, 2) == ["all_reduce"]
    assert traffic.network_bytes_per_node("full_shard", 1, 8, psi) == 0


def test_ranks_are_placed_node_by_node(measured: dict[str, list[dict]]) -> None:
    for ranks in measured.values():
        assert ranks[0]["nodes"] == [0, 0, 1, 1]


def test_full_shard_sends_one_ranks_share_across_per_node_not_each_ranks(measured: dict[str, list[dict]]) -> None:
    """Notebook 05: under full_shard every all-gather and reduce-scatter spans both nodes, yet each node
    sends across only the hop from its last rank to the next node: per node, one rank's traffic (5.0 GB for
    BLOOM-560M in fp32), per rank on average half of it (2.5 GB), not 5.0 GB per rank."""
    ranks = measured["full_shard"]
    assert {c.ranks for r in ranks for c in collectives(r)} == {(0, 1, 2, 3)}
    assert {c.kind for r in ranks for c in collectives(r)} == {"all_gather", "reduce_scatter"}
    per_rank = [sum(traffic.hop_bytes(c) for c in collectives(r)) for r in ranks]
    per_node = sent_across_by_node(ranks)
    assert per_node[0] == per_node[1] == per_rank[0] == pytest.approx(sum(per_rank) / 4)
    # the notebook's plain rule counts every unit's all-gather twice; FSDP2 gathers the root (which holds the
    # tied embedding and is kept from forward to backward) once: the measured step sends that much less
    psi, root = ranks[0]["param_bytes"], ranks[0]["root_bytes"]
    rule = traffic.network_bytes_per_node("full_shard", 2, 2, psi)
    assert per_node[0] == pytest.approx(rule - 3 / 4 * root)
    gathers = [c for c in collectives(ranks[0]) if c.kind == "all_gather"]
    assert sum(c.nbytes for c in gathers) == 2 * psi - root


def test_hybrid_shard_keeps_gathers_in_the_node_and_sends_only_the_all_reduce_across(
        measured: dict[str, list[dict]]) -> None:
    """Notebook 05: on the mesh [2, 2] the all-gathers and reduce-scatters stay inside each node; each rank
    all-reduces its half of the gradients with its peer on the other node: Ψ per node (2.24 GB for
    BLOOM-560M in fp32), 2.25 x less than full_shard's rule."""
    ranks = measured["hybrid_shard"]
    node = ranks[0]["nodes"]
    for r in ranks:
        for c in collectives(r):
            nodes_spanned = {node[x] for x in c.ranks}
            assert len(nodes_spanned) == (2 if c.kind == "all_reduce" else 1), c
    psi = ranks[0]["param_bytes"]
    per_node = sent_across_by_node(ranks)
    assert per_node[0] == per_node[1] == pytest.approx(traffic.network_bytes_per_node("hybrid_shard", 2, 2, psi))
    assert traffic.crossing("hybrid_shard", 2, 2) == sorted({c.kind for r in ranks for c in collectives(r)
                                                            if len({node[x] for x in c.ranks}) == 2})
    fs = sent_across_by_node(measured["full_shard"])[0]
    print(f"tiny BLOOM, fp32, 2 nodes x 2: full_shard sends {fs / 1e6:.3f} MB per node per step, hybrid_shard "
          f"{per_node[0] / 1e6:.3f} MB ({fs / per_node[0]:.2f} x less; the plain rule: 2.25 x)")


def test_gradient_clipping_all_reduces_every_step_and_the_optimizer_step_sends_nothing(
        measured: dict[str, list[dict]]) -> None:
    """Notebook 02: AdamW's step on each rank's shard communicates nothing, but the Trainer clips gradients
    (max_grad_norm 1.0 by default) before it, and the norm of sharded gradients is an all-reduce."""
    for ranks in measured.values():
        for r in ranks:
            assert r["clip_c10d"].count("c10d::allreduce_") >= 1, r["clip_c10d"]
            assert r["optimizer_c10d"] == []


def test_the_course_trainer_clips_every_step() -> None:
    """The jobs' TrainingArguments keep transformers' default max_grad_norm (1.0): clipping, so its all-reduce,
    runs at every optimizer step."""
    import dataclasses

    import torch
    from transformers import TrainingArguments

    from workshop.training.config import load_config
    from workshop.training.train import training_kwargs

    # the keyword arguments the job builds its TrainingArguments from (built in a job after its process
    # group exists: an FSDP job's arguments ask accelerate for the world at construction)
    cfg = load_config(overrides={"sharding": "full_shard", "device": "cpu", "output_dir": "/nonexistent"})
    default = {f.name: f.default for f in dataclasses.fields(TrainingArguments)}["max_grad_norm"]
    assert training_kwargs(cfg, torch.device("cpu"), 2).get("max_grad_norm", default) == 1.0
