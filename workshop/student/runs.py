"""What each notebook submits, in the course's own settings: {notebook: {run name: lab.run arguments}}.

The notebooks' `runs` dictionaries, owned here, in the room the notebooks import, so that the site's budget
(workshop.site.budget) and the answer key count the very jobs a notebook runs, and no notebook imports the
admin's module. Notebook 04's runs follow the site's nodes: `workshop.site.budget.notebook_runs` adds them.
"""

from __future__ import annotations

from typing import Any

STATIC_RUNS: dict[str, dict[str, dict[str, Any]]] = {
    "01_baseline": {"baseline": dict(step="baseline")},
    "02_fsdp_single_gpu": {
        "baseline": dict(step="baseline"),
        "full_shard": dict(step="fsdp_1gpu"),
        "full_shard+offload": dict(step="fsdp_1gpu", offload=True),
        "your shard_model": dict(step="fsdp_1gpu", wrap_function="shard_model.py:shard_model"),
        "answer_only loss": dict(step="fsdp_1gpu", loss="answer_only"),   # the logits exercise's job
    },
    "03_sharding_strategies": {
        "ddp": dict(step="strategies", sharding="ddp"),
        "full_shard": dict(step="strategies", sharding="full_shard"),
        "shard_grad_op": dict(step="strategies", sharding="shard_grad_op"),
        "offload": dict(step="strategies", sharding="full_shard", offload=True),
        "activation_checkpointing": dict(step="strategies", sharding="full_shard", activation_checkpointing=True),
        # the student's own settings (here the solution's): one more job of the step, whatever they choose
        "budget challenge": dict(step="strategies", sharding="full_shard", offload=False, activation_checkpointing=False,
                                 batch_size=1, grad_acc=4),
    },
    "05_multi_node": {
        "bandwidth gate": dict(step="bandwidth", nodes=2),
        "failed rendezvous (to diagnose)": dict(step="multi_node", nodes=2, procs_per_node=1, sharding="full_shard",
                                                rdzv_endpoint="head-node.invalid:29400", rdzv_timeout_s=2),
        "1 node x 2, full_shard": dict(step="multi_node", nodes=1, procs_per_node=2, sharding="full_shard"),
        "2 nodes x 1, full_shard": dict(step="multi_node", nodes=2, procs_per_node=1, sharding="full_shard"),
        "2 nodes x 2, full_shard": dict(step="multi_node", nodes=2, procs_per_node=2, sharding="full_shard",
                                        checkpoint_at_end=True),
        "2 nodes x 2, hybrid_shard": dict(step="multi_node", nodes=2, procs_per_node=2, sharding="hybrid_shard",
                                          hybrid_replicas=2),
    },
}
