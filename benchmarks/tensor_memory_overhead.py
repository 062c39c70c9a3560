"""What measuring tensor memory by category costs a training run (issue 11: at most 10 % of its time).

    .venv/bin/python benchmarks/tensor_memory_overhead.py

Why a benchmark and not a test: the figure is a ratio of times, and a timed test on a shared CI
machine measures its neighbours. This runs alone, on a quiet machine, and keeps what it measured.

Each of notebook 03's strategies runs as a real `workshop.training.train` under torchrun at 2 ranks for 12
optimizer steps of the tiny model (the length of the course's runs; tests/runs.py's flags). The
summary's `tensor_mem_overhead_pct` is the tracked step's extra time over the median untracked step,
as a share of the training time (workshop/training/tensor_memory.py). Writes
`benchmarks/cpu/tensor_memory_overhead-DATE.json` with the machine, its load before, the versions
and each run's figure; exit 1 if one is over the bound.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BOUND_PCT = 10.0
STRATEGIES = {
    "ddp": ["--sharding", "ddp"],
    "full_shard": ["--sharding", "full_shard"],
    "shard_grad_op": ["--sharding", "shard_grad_op"],
    "offload": ["--sharding", "full_shard", "--offload"],
    "activation_checkpointing": ["--sharding", "full_shard", "--activation-checkpointing"],
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "cpu")
    args = p.parse_args(argv)

    from benchmarks import machine
    from tests.runs import train

    load = os.getloadavg()[0]
    runs = {}
    with tempfile.TemporaryDirectory(prefix="tensor-memory-overhead-") as tmp:
        for name, flags in STRATEGIES.items():
            summary = train(Path(tmp) / name, flags, nproc=2).summary
            runs[name] = {"steps": summary["steps"], "train_runtime_s": summary["train_runtime_s"],
                          "tensor_mem_overhead_pct": summary["tensor_mem_overhead_pct"]}
            print(f"{name:26s} {summary['steps']} steps, {summary['train_runtime_s']:.2f} s of training: "
                  f"measuring cost {summary['tensor_mem_overhead_pct']} %")
    worst = max(r["tensor_mem_overhead_pct"] for r in runs.values())
    result = {
        **machine.record("tensor_mem_overhead_pct of notebook 03's strategies, 2 ranks, 12 optimizer steps, tiny model",
                         load),
        "runs": runs, "worst_pct": worst, "bound_pct": BOUND_PCT, "met": worst <= BOUND_PCT,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"tensor_memory_overhead-{result['date'][:10]}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"worst {worst} % (bound {BOUND_PCT} %): {'met' if result['met'] else 'NOT met'}; written to {path}")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
