"""The course steps as job shapes: what each one launches and the RunConfig it starts from.

A step is a config plus a launch shape, never a script of its own: the GPU count comes from the
config (`procs_per_node`, `nodes`), the site's choices from the profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from workshop.config import ConfigError, RunConfig, load_config
from workshop.profiles import Profile


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    program: str                      # "train" | "bandwidth"
    defaults: Mapping[str, Any] = field(default_factory=dict)


STEPS: dict[str, Step] = {s.name: s for s in (
    Step("baseline", "Baseline: one GPU, no sharding", "train",
         {"sharding": "none", "nodes": 1, "procs_per_node": 1}),
    Step("fsdp_1gpu", "FSDP on one GPU (full shard of a world of one)", "train",
         {"sharding": "full_shard", "nodes": 1, "procs_per_node": 1}),
    Step("strategies", "Sharding strategies compared on one node", "train",
         {"sharding": "full_shard", "nodes": 1, "procs_per_node": 2}),
    Step("multi_gpu", "FSDP over the GPUs of one node", "train",
         {"sharding": "full_shard", "nodes": 1, "procs_per_node": 2}),
    Step("multi_node", "FSDP across nodes", "train",
         {"sharding": "full_shard", "nodes": 2, "procs_per_node": 1}),
    Step("bandwidth", "all_reduce bus-bandwidth self-test", "bandwidth",
         {"sharding": "ddp", "nodes": 1, "procs_per_node": 2}),
)}


def get_step(name: str) -> Step:
    if name not in STEPS:
        raise ConfigError("step", f"unknown step {name!r}", f"use one of {', '.join(STEPS)}")
    return STEPS[name]


def step_config(step: str, profile: Profile, overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """The step's config on this site: step defaults < profile `[run]` < `[run.<step>]` < overrides."""
    values = dict(get_step(step).defaults)
    values.update(profile.run_defaults(step))
    values.update(overrides or {})
    return load_config(overrides=values)


def check_fits(step: str, config: RunConfig, profile: Profile) -> None:
    """Refuse, before submitting, a job the site cannot run (more GPUs than a node has, ...)."""
    part = profile.partition_for(step)
    if part.gpus_per_node and config.procs_per_node > part.gpus_per_node:
        raise ConfigError("procs_per_node", f"{config.procs_per_node} processes per node, but partition "
                          f"{part.name or part.key!r} has {part.gpus_per_node} GPUs per node",
                          f"use procs_per_node <= {part.gpus_per_node}, more nodes, or a partition with "
                          "bigger nodes ([slurm.steps.<step>] partition in the profile)")
    if part.max_nodes and config.nodes > part.max_nodes:
        raise ConfigError("nodes", f"{config.nodes} nodes, but partition {part.name or part.key!r} allows "
                          f"{part.max_nodes}", f"use nodes <= {part.max_nodes}")
