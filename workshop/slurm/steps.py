"""The course steps as job shapes: what each one launches and the RunConfig it starts from.

A step is a config plus a launch shape, never a script of its own: the GPU count comes from the
config (`procs_per_node`, `nodes`), the site's choices from the profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from workshop.training.config import ConfigError, RunConfig, load_config
from workshop.slurm.profiles import Profile


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    program: str                      # "train" | "bandwidth" | "preflight"
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
    Step("preflight", "Preflight: one GPU of a partition as the course's jobs find it", "preflight",
         {"sharding": "none", "nodes": 1, "procs_per_node": 1}),
)}


def get_step(name: str) -> Step:
    if name not in STEPS:
        raise ConfigError("step", f"unknown step {name!r}", f"use one of {', '.join(STEPS)}")
    return STEPS[name]


def step_config(step: str, profile: Profile, overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """The step's config on this site: step defaults < profile `[run]` < `[run.<step>]` < overrides.

    The bandwidth gate runs one rank per GPU of its partition's nodes: a fabric is judged as training
    uses it, every GPU of a node sending at once."""
    values = dict(get_step(step).defaults)
    gpus = profile.partition_for(step).gpus_per_node
    if get_step(step).program == "bandwidth" and gpus:
        values["procs_per_node"] = gpus
    values.update(profile.run_defaults(step))
    # the step's and site's values are a base, not written by the student: Hugging Face's fsdp/fsdp_config
    # in `overrides` may replace the step's sharding without contradicting it
    return load_config(base=load_config(overrides=values), overrides=overrides)


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


def gpu_counts(profile: Profile, step: str = "multi_gpu") -> list[int]:
    """1, 2, 4, ... up to the GPUs of one node of the step's partition (CPU profiles: up to 4)."""
    most = profile.partition_for(step).gpus_per_node or 4
    return [n for n in (1, 2, 4, 8, 16) if n <= most]


@dataclass(frozen=True)
class ScalingPlan:
    """Notebook 04's runs on a site, in the one place the notebook and the class budget share: the GPU
    counts of one node, the largest micro-batch per GPU (the step's batch_size: what the site's GPUs
    hold) and the global batch every run keeps (that micro-batch on every GPU of the largest run). The
    student derives each run's micro-batch and accumulation from these."""

    gpu_counts: tuple[int, ...]
    micro_batch: int
    global_batch: int


def scaling_plan(profile: Profile, overrides: Mapping[str, Any] | None = None,
                 counts: list[int] | tuple[int, ...] | None = None) -> ScalingPlan:
    """The plan on this site (`overrides`: the notebook's; `counts`: GPU counts other than the site's)."""
    counts = tuple(counts or gpu_counts(profile))
    micro = step_config("multi_gpu", profile, {**(overrides or {}), "procs_per_node": max(counts)}).batch_size
    return ScalingPlan(counts, micro, micro * max(counts))
