"""A dry run's result (workshop.training.dryrun) as a reader wants it. A module of its own, without torch: the
`workshop dryrun` command prints it from the JSON its dry run's process hands back, and importing torch for a
formatter would cost that command ~1.6 CPU-s."""

from __future__ import annotations

from typing import Any

from workshop.training.categories import CATEGORIES


def format_report(result: dict[str, Any]) -> str:
    """The dry run as a reader wants it: per-rank memory by category, each phase, FLOPs, collectives."""
    c, mem = result["config"], result["memory_mb"]
    lines = [f"dry run: {c['model']}, {c['sharding']} on {c['world_size']} rank(s) ({c['nodes']} node(s)), "
             f"{c['precision']}, micro-batch {c['batch_size']} x {c['max_length']} tokens, grad_acc "
             f"{result['grad_acc']}, loss {c['loss']}, offload {c['offload']}, activation checkpointing "
             f"{c['activation_checkpointing']} ({result['seconds']:.1f} s)",
             f"note: {result['note']}",
             f"parameters: {result['params_total']:,}, on rank 0: {result['params_local']:,} "
             f"({result['sharding_applied']}, mesh {result['mesh']})",
             "memory per rank (MB, each category's own peak over the step):"]
    lines += [f"  {k:<16}{mem[k]:>14,.1f}" for k in (*CATEGORIES, "peak", "unsharded_grads",
                                                      "host_params", "host_grads", "host_optimizer") if k in mem]
    lines.append("alive at the end of each phase (MB): " + ", ".join(
        f"{phase} {v['alive_mb']:,.1f} (peak so far {v['peak_so_far_mb']:,.1f})"
        for phase, v in result["phases"].items()))
    lines.append(f"FLOPs per optimizer step (rank 0, FlopCounterMode): {result['flops_per_step']:.4g} "
                 f"for {result['tokens_per_step']:,} tokens")
    lines.append("collectives per optimizer step (rank 0, as dispatched to c10d):")
    lines += [f"  {kind:<16}{v['calls']:>6} calls {v['elements']:>16,} elements {v['bytes']:>16,} bytes"
              for kind, v in result["comm"]["by_kind"].items()] or ["  none"]
    return "\n".join(lines)
