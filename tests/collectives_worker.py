"""Two training steps of the course's tiny BLOOM under FSDP2 on gloo, recording every collective: what
tests/test_collectives.py reads. Run by torchrun, one process per rank; each rank writes OUT/rank<R>.json.

    torchrun ... tests/collectives_worker.py OUT      # writes OUT/<strategy>-rank<R>.json, both strategies

The model is wrapped as notebook 02's `shard_model` does it (each block, then the root, which holds the
tied embedding), in fp32. The collectives FSDP2 issues (`dist.all_gather_single`, `reduce_scatter_single`,
`all_reduce`) are recorded as they are called and then run for real; the profiler records the c10d ops
of gradient clipping and of the optimizer step, which go through other paths. Only the second step is
kept (the first initialises FSDP2's state).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

RECORDED: list[dict[str, Any]] = []


def recording(kind: str, call: Callable[..., Any], tensor_of: Callable[..., torch.Tensor]) -> Callable[..., Any]:
    def recorded(*args: Any, **kwargs: Any) -> Any:
        tensor = tensor_of(*args, **kwargs)
        group = kwargs.get("group")
        RECORDED.append({"kind": kind, "ranks": dist.get_process_group_ranks(group) if group is not None
                         else list(range(dist.get_world_size())), "nbytes": tensor.numel() * tensor.element_size()})
        return call(*args, **kwargs)
    return recorded


def c10d_ops(phase: Callable[[], Any]) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        phase()
    return sorted(e.name for e in prof.events() if e.name.startswith("c10d::"))


def one_strategy(strategy: str, nodes: list[int], out: Path) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import BloomForCausalLM

    from workshop.training.models import TINY, bloom_config

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = BloomForCausalLM(bloom_config(TINY))
    if strategy == "hybrid_shard":
        mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cpu", (world,))
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(4, TINY["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(rank))
    phases: dict[str, Any] = {}
    for step in range(2):
        RECORDED.clear()
        model(input_ids=ids, labels=ids).loss.backward()
        phases = {"forward_backward": list(RECORDED)}
        phases["clip_c10d"] = c10d_ops(lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        phases["optimizer_c10d"] = c10d_ops(optimizer.step)
        optimizer.zero_grad()
    root = [p for p in model.parameters(recurse=False)] + [p for n, p in model.named_parameters()
                                                            if not n.startswith("transformer.h.")]
    params = {id(p): p for p in model.parameters()}.values()
    summary = {"rank": rank, "nodes": nodes, "strategy": strategy, **phases,
               "param_bytes": sum(p.numel() * p.element_size() for p in params),
               "root_bytes": sum(p.numel() * p.element_size() for p in {id(p): p for p in root}.values())}
    (out / f"{strategy}-rank{rank}.json").write_text(json.dumps(summary))


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    nodes: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(nodes, int(os.environ["GROUP_RANK"]))   # which launcher ("node") each rank runs on
    dist.all_gather_single = recording("all_gather", dist.all_gather_single, lambda out, inp, **k: out)
    dist.reduce_scatter_single = recording("reduce_scatter", dist.reduce_scatter_single, lambda **k: k["input"])
    dist.all_reduce = recording("all_reduce", dist.all_reduce, lambda tensor, **k: tensor)
    for strategy in ("full_shard", "hybrid_shard"):
        one_strategy(strategy, nodes, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
