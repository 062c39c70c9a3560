"""The communication model against the measured collectives over the whole sweep (issue 27), outside the suite.

    .venv/bin/python benchmarks/comm_model.py                # every configuration below, one run each
    .venv/bin/python benchmarks/comm_model.py --only 1x3,2x2  # the configurations whose id contains one of these

tests/test_comm.py::test_model_matches_the_measured_collectives holds the model within 1 % in CI on one
configuration per distinct path (DDP, FULL_SHARD, SHARD_GRAD_OP, offload, activation checkpointing at 2 ranks;
DDP and FULL_SHARD at 4; HSDP 2x2; two "nodes"; one process; bf16; gradient accumulation), each a run other
tests make anyway (tests/runs.py shares them). This runs that same list (imported from the test, so the two
cannot drift apart) and the rest of issue 27's sweep, which would cost the suite a training run each:
- SHARD_GRAD_OP, CPU offload and FULL_SHARD with activation checkpointing at 4 ranks (the suite holds each at
  2 ranks, and the 4-rank ring at 4 with DDP and FULL_SHARD; moved here by issue 51);
- activation checkpointing with DDP at 4 ranks (the suite has it at 2 ranks);
- 3 ranks, where FSDP2 pads the first dimension of the tiny model's embedding (FULL_SHARD, SHARD_GRAD_OP);
- _hybrid_shard_zero2 on 2 nodes x 2 (the suite has it on one node, and hybrid_shard on 2 nodes).
(Training fewer steps would not make the suite's runs cheaper: a 4-rank FULL_SHARD run took 23.4 s for
1 epoch and 24.3 s for 2 on 2 cores at load 4: starting the processes is the cost, not the steps.)
Each run is a real `workshop.training.train` on gloo (tests/runs.py's `train`: torchrun; plain python for one
process), its `summary.json` compared with `workshop.comm.model.compare`: every rank, kind and measure. Writes
`benchmarks/cpu/comm_model-DATE.json` (largest relative error per configuration) and exits 1 when any is
over 1 %.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.test_comm import MEASURED, _id  # noqa: E402  (the suite's list: the benchmark runs all of it)

BOUND = 0.01
# the rest of the sweep: what the suite leaves out because each would be one more training run in CI
EXTRA = [
    (("--sharding", "shard_grad_op"), 4, 1), (("--sharding", "full_shard", "--offload"), 4, 1),
    (("--sharding", "full_shard", "--activation-checkpointing"), 4, 1),
    (("--sharding", "ddp", "--activation-checkpointing"), 4, 1),
    (("--sharding", "full_shard"), 3, 1), (("--sharding", "shard_grad_op"), 3, 1),
    (("--sharding", "_hybrid_shard_zero2"), 2, 2),
]
SWEEP = [*MEASURED, *[e for e in EXTRA if e not in MEASURED]]


def label(flags: tuple[str, ...], nproc: int, nnodes: int) -> str:
    return _id(flags, nproc, nnodes)


def check(out: Path, flags: tuple[str, ...], nproc: int, nnodes: int) -> dict[str, Any]:
    from tests.runs import train
    from workshop.comm import model as comm

    started = time.perf_counter()
    run = train(out, list(flags), nproc=nproc, nnodes=nnodes)
    row: dict[str, Any] = {"flags": list(flags), "procs_per_node": nproc, "nodes": nnodes,
                           "job_wall_s": round(time.perf_counter() - started, 1)}
    s = run.summary
    row["status"] = s["comm"]["status"]
    if row["status"] != "measured":
        return {**row, "max_rel_error": None, "reason": s["comm"].get("reason")}
    config = json.loads((out / "run_args.json").read_text())["config"]
    rows = [r for r in comm.compare(s, config) if r["predicted"] is not None] if nproc * nnodes > 1 else []
    errors = [abs(r["predicted"] - r["measured"]) / r["measured"] if r["measured"] else float(r["predicted"] != 0)
              for r in rows]
    return {**row, "compared": len(rows), "max_rel_error": max(errors, default=0.0), "steps": s["steps"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "cpu")
    p.add_argument("--only", default="", help="comma-separated: run only the configurations whose id contains one")
    args = p.parse_args(argv)

    from benchmarks import machine

    load = os.getloadavg()[0]
    wanted = [w for w in args.only.split(",") if w]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="comm-model-") as tmp:
        for i, (flags, nproc, nnodes) in enumerate(SWEEP):
            name = label(flags, nproc, nnodes)
            if wanted and not any(w in name for w in wanted):
                continue
            results[name] = check(Path(tmp) / f"run{i}", flags, nproc, nnodes)
            print(f"{name:52s} {json.dumps(results[name])}", flush=True)
    worst = max((r["max_rel_error"] for r in results.values() if r["max_rel_error"] is not None), default=None)
    failed = [n for n, r in results.items() if r["max_rel_error"] is None or r["max_rel_error"] > BOUND]
    result = {
        **machine.record("communication model vs the measured step's collectives, every rank, kind and measure: "
                         "the largest relative error per configuration (tests/test_comm.py's list and the rest "
                         "of the sweep)", load),
        "only": wanted, "bound": BOUND, "runs": len(results), "max_rel_error": worst, "over_the_bound": failed,
        "configurations": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"comm_model-{result['date'][:10]}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"model within {worst:.3%} over {len(results)} runs; over {BOUND:.0%}: {failed or 'none'}; written to {path}"
          if worst is not None else f"nothing measured; written to {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
