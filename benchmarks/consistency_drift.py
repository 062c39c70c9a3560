"""How far apart two honest runs' eval losses drift: DDP against each FSDP strategy, at the course's step
counts, in fp32, bf16 and fp16 (fp16 with the gradient scaler), on CPU.

    .venv/bin/python benchmarks/consistency_drift.py            # ~45 runs; resumes from --work if interrupted

Why: the hidden tests of notebooks 03 and 05 accept a strategy's eval losses when they agree with
full_shard's within `workshop.training.consistency.consistency_tolerance`. Unit roundoff does not bound
two runs' drift after tens of steps (rounding differences compound through the updates, and under
fp16 a gradient overflow skips an update in one run and not in the other), so the tolerance is set
from this measurement instead: the largest drift seen, times a stated margin.

What runs: real `workshop.training.train` jobs under torchrun (tests/runs.py), the tiny BLOOM, the
fixture, lr 5e-3, seed 42:
- notebook 03's strategies at 2 ranks (ddp, full_shard, shard_grad_op, offload, activation
  checkpointing) and notebook 05's pair at 4 ranks (full_shard, hybrid_shard 2x2; ddp beside them);
- at the course's step counts: its CPU runs (12 steps at 2 ranks, 6 at 4: the local profile's 24
  examples, batch 2, 2 epochs) and the example site's (125 steps: 2,000 examples at a global batch of
  16, notebooks 03 and 05 at 4 GPUs), the latter as 125 steps over the 48-example fixture;
- fp32 at the CPU lengths (the local profile's precision), bf16 and fp16 at both.
A run with another seed (ddp, seed 7) at each precision and length shows how far a run that trained
another model lands: a tolerance above that distance can no longer tell it from noise.
The drift of a pair is the largest relative difference over their per-epoch eval losses, as
`losses_consistent` computes it. Writes benchmarks/cpu/consistency_drift-DATE.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MARGIN = 3.0   # the tolerance is this many times the largest drift measured
STRATEGIES_2 = {
    "ddp": ["--sharding", "ddp"],
    "full_shard": ["--sharding", "full_shard"],
    "shard_grad_op": ["--sharding", "shard_grad_op"],
    "offload": ["--sharding", "full_shard", "--offload"],
    "activation_checkpointing": ["--sharding", "full_shard", "--activation-checkpointing"],
}
STRATEGIES_4 = {
    "ddp": ["--sharding", "ddp"],
    "full_shard": ["--sharding", "full_shard"],
    "hybrid_shard": ["--sharding", "hybrid_shard", "--hybrid-replicas", "2"],
}
# (label, ranks, flags): tests/runs.py's BASE_FLAGS give 24 examples, batch 2, 2 epochs
LENGTHS = {
    "cpu course": {2: [], 4: []},                                              # 12 steps at 2 ranks, 6 at 4
    "example site": {2: ["--train-size", "48", "--epochs", "11", "--max-steps", "125"],
                     4: ["--train-size", "48", "--epochs", "21", "--max-steps", "125"]},
}
PRECISIONS = {"fp32": ("cpu course",), "bf16": ("cpu course", "example site"), "fp16": ("cpu course", "example site")}
OTHER_SEED = ["--seed", "7"]


def drift(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in zip(a, b, strict=True))


def plan() -> list[tuple[str, str, int, str, list[str]]]:
    """(precision, length, ranks, name, flags) of every run."""
    out = []
    for precision, lengths in PRECISIONS.items():
        for length in lengths:
            for ranks, strategies in ((2, STRATEGIES_2), (4, STRATEGIES_4)):
                for name, flags in strategies.items():
                    out.append((precision, length, ranks, name, [*flags, *LENGTHS[length][ranks]]))
            out.append((precision, length, 2, "ddp seed 7", [*STRATEGIES_2["ddp"], *LENGTHS[length][2], *OTHER_SEED]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "cpu")
    p.add_argument("--work", type=Path, default=REPO / "benchmarks" / "smoke" / "consistency_drift",
                   help="where the runs go (kept: a second call reuses the finished ones)")
    args = p.parse_args(argv)

    from benchmarks import machine
    from tests.runs import train

    load = os.getloadavg()[0]
    runs: dict[str, dict[str, Any]] = {}
    for precision, length, ranks, name, flags in plan():
        key = f"{precision} | {length} | {ranks} ranks | {name}"
        folder = args.work / key.replace(" | ", "-").replace(" ", "_")
        if not (folder / "summary.json").is_file():
            run = train(folder, [*flags, "--precision", precision], nproc=ranks, timeout=1800)
            if run.returncode != 0:
                print(run.log[-3000:])
                raise SystemExit(f"{key}: the run failed (rc {run.returncode})")
        s = json.loads((folder / "summary.json").read_text())
        runs[key] = {"precision": precision, "length": length, "ranks": ranks, "name": name, "steps": s["steps"],
                     "eval_losses": s["eval_losses"], "grad_scale": s.get("grad_scale"),
                     "mp_param_dtype": s.get("mp_param_dtype"), "mp_reduce_dtype": s.get("mp_reduce_dtype")}
        print(f"{key}: {s['steps']} steps, final eval loss {s['final_eval_loss']:.5f}, grad scale {s.get('grad_scale')}",
              flush=True)

    pairs = []
    for precision, lengths in PRECISIONS.items():
        for length in lengths:
            def get(ranks: int, name: str) -> dict[str, Any]:
                return runs[f"{precision} | {length} | {ranks} ranks | {name}"]

            group = []
            for ranks, strategies in ((2, STRATEGIES_2), (4, STRATEGIES_4)):
                for ref in ("ddp", "full_shard"):
                    for name in strategies:
                        if name != ref:
                            group.append((ranks, ref, name))
            seen = set()
            for ranks, ref, name in group:
                key = (ranks, *sorted((ref, name)))
                if key in seen:
                    continue
                seen.add(key)
                a, b = get(ranks, ref), get(ranks, name)
                pairs.append({"precision": precision, "length": length, "ranks": ranks, "a": ref, "b": name,
                              "steps": a["steps"], "drift": round(drift(a["eval_losses"], b["eval_losses"]), 6)})
            a, b = get(2, "ddp"), get(2, "ddp seed 7")
            pairs.append({"precision": precision, "length": length, "ranks": 2, "a": "ddp", "b": "ddp seed 7",
                          "steps": a["steps"], "drift": round(drift(a["eval_losses"], b["eval_losses"]), 6),
                          "other_model": True})

    summary = {}
    for precision in PRECISIONS:
        honest = [q for q in pairs if q["precision"] == precision and not q.get("other_model")]
        other = [q for q in pairs if q["precision"] == precision and q.get("other_model")]
        worst = max(honest, key=lambda q: q["drift"])
        summary[precision] = {"worst_drift": worst["drift"], "worst_pair": f"{worst['a']} vs {worst['b']}, "
                              f"{worst['ranks']} ranks, {worst['steps']} steps ({worst['length']})",
                              "tolerance": round(MARGIN * worst["drift"], 4),
                              "other_seed_drift": min(q["drift"] for q in other)}
        print(f"{precision}: worst honest drift {worst['drift']:.2e} ({summary[precision]['worst_pair']}); "
              f"tolerance {MARGIN:g} x = {summary[precision]['tolerance']:.2e}; another seed lands "
              f"{summary[precision]['other_seed_drift']:.2e} away")

    result = {
        **machine.record("largest relative eval-loss difference between honest runs (DDP against each strategy, "
                         "full_shard against each), tiny model on CPU, at the course's step counts", load),
        "margin": MARGIN, "by_precision": summary, "pairs": pairs, "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"consistency_drift-{result['date'][:10]}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
