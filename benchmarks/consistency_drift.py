"""How far apart two honest runs' eval losses drift: DDP against each FSDP strategy, at the course's step
counts, in fp32, bf16 and fp16 (fp16 with the gradient scaler), on CPU.

    .venv/bin/python benchmarks/consistency_drift.py     # ~50 runs; resumes from --work if interrupted

Why: the hidden tests of notebooks 03 and 05 accept a strategy's eval losses when they agree with
full_shard's within `workshop.grading.consistency.consistency_tolerance`. Unit roundoff does not bound
two runs' drift after tens of steps (rounding differences compound through the updates, and under
fp16 a gradient overflow skips an update in one run and not in the other), so the tolerance is set
from this measurement instead: the largest drift seen at a length, times a stated margin.

What runs: real `workshop.training.train` jobs under torchrun (tests/runs.py), the tiny BLOOM, the
fixture, seed 42:
- notebook 03's strategies at 2 ranks (ddp, full_shard, shard_grad_op, offload, activation
  checkpointing) and notebook 05's pair at 4 ranks (full_shard, hybrid_shard 2x2; ddp beside them);
- at the course's step counts:
  - "cpu course": its CPU runs, the local profile's (24 examples, batch 2, 2 epochs: 12 steps at
    2 ranks, 6 at 4; lr 5e-3), in fp32 (the local profile's precision), bf16 and fp16;
  - "example site": the example site's 125 steps (2,000 examples at a global batch of 16, notebooks
    03 and 05 at 4 GPUs), in bf16 and fp16, as 125 steps over the 48-example fixture at lr 5e-4: a
    fine-tune whose eval loss goes down, as the site's does (BLOOM-560M at 5e-5, each example seen
    once). The FSDP strategies of 2 ranks compute the same sums as full_shard (bitwise equal losses
    at 12 steps in every precision, and at 125 in "stress"), so at 125 steps ddp and full_shard stand
    for them;
  - "stress" (bf16, reported, not used for a bound): the same 125 steps at the course's CPU lr 5e-3,
    where the tiny model memorises the 48 examples and its eval loss climbs far above an untrained
    model's: a regime no course run is in, which shows how far chaos carries the drift.
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

from benchmarks.tensor_memory_overhead import STRATEGIES as NOTEBOOK_03  # noqa: E402

MARGIN = 3.0   # the tolerance is this many times the largest drift measured at a length
# notebook 03's strategies (the overhead benchmark's list) and notebook 05's hybrid pair
STRATEGIES = {**NOTEBOOK_03, "hybrid_shard": ["--sharding", "hybrid_shard", "--hybrid-replicas", "2"]}
LONG = ["--train-size", "48", "--max-steps", "125"]
# length -> {ranks: (strategies, flags)}; tests/runs.py's BASE_FLAGS give 24 examples, batch 2, 2 epochs, lr 5e-3
LENGTHS: dict[str, dict[int, tuple[tuple[str, ...], list[str]]]] = {
    "cpu course": {2: (("ddp", "full_shard", "shard_grad_op", "offload", "activation_checkpointing"), []),
                   4: (("ddp", "full_shard", "hybrid_shard"), [])},
    "example site": {2: (("ddp", "full_shard"), [*LONG, "--epochs", "11", "--learning-rate", "5e-4"]),
                     4: (("ddp", "full_shard", "hybrid_shard"), [*LONG, "--epochs", "21", "--learning-rate", "5e-4"])},
    "stress": {2: (("ddp", "full_shard", "shard_grad_op", "offload", "activation_checkpointing"), [*LONG, "--epochs", "11"]),
               4: (("ddp", "full_shard", "hybrid_shard"), [*LONG, "--epochs", "21"])},
}
BOUND_LENGTHS = ("cpu course", "example site")   # "stress" is reported, not used for a bound
PRECISIONS = {"fp32": ("cpu course",), "bf16": ("cpu course", "example site", "stress"),
              "fp16": ("cpu course", "example site")}
OTHER_SEED = ["--seed", "7"]


def scale_of(summary: dict[str, Any]) -> float | None:
    """fp16's loss scale at the end of the run: summary.json's `grad_scaler` (a run written before that
    field was named so, kept in --work, has `grad_scale`). Each halving from 65536 is a skipped step."""
    scaler = summary.get("grad_scaler")
    return scaler.get("scale") if isinstance(scaler, dict) else summary.get("grad_scale")


def drift(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in zip(a, b, strict=True))


def plan() -> list[tuple[str, str, int, str, list[str]]]:
    """(precision, length, ranks, name, flags) of every run."""
    out = []
    for precision, lengths in PRECISIONS.items():
        for length in lengths:
            for ranks, (names, flags) in LENGTHS[length].items():
                out += [(precision, length, ranks, name, [*STRATEGIES[name], *flags]) for name in names]
            out.append((precision, length, 2, "ddp seed 7", [*STRATEGIES["ddp"], *LENGTHS[length][2][1], *OTHER_SEED]))
    return out


def pairs_of(runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """DDP against each strategy and full_shard against each, at each precision, length and world size;
    and DDP against the same DDP with another seed."""
    out = []
    for precision, lengths in PRECISIONS.items():
        for length in lengths:
            def get(ranks: int, name: str) -> dict[str, Any]:
                return runs[f"{precision} | {length} | {ranks} ranks | {name}"]

            for ranks, (names, _) in LENGTHS[length].items():
                done = set()
                for ref in ("ddp", "full_shard"):
                    for name in names:
                        if name == ref or frozenset((ref, name)) in done:
                            continue
                        done.add(frozenset((ref, name)))
                        a, b = get(ranks, ref), get(ranks, name)
                        out.append({"precision": precision, "length": length, "ranks": ranks, "a": ref, "b": name,
                                    "steps": a["steps"], "drift": round(drift(a["eval_losses"], b["eval_losses"]), 6)})
            a, b = get(2, "ddp"), get(2, "ddp seed 7")
            out.append({"precision": precision, "length": length, "ranks": 2, "a": "ddp", "b": "ddp seed 7",
                        "steps": a["steps"], "drift": round(drift(a["eval_losses"], b["eval_losses"]), 6),
                        "other_model": True})
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
            run = train(folder, [*flags, "--precision", precision], nproc=ranks, timeout=3600)
            if run.returncode != 0:
                print(run.log[-3000:])
                raise SystemExit(f"{key}: the run failed (rc {run.returncode})")
        s = json.loads((folder / "summary.json").read_text())
        runs[key] = {"precision": precision, "length": length, "ranks": ranks, "name": name, "steps": s["steps"],
                     "eval_losses": s["eval_losses"], "grad_scale": scale_of(s),
                     "mp_param_dtype": s.get("mp_param_dtype"), "mp_reduce_dtype": s.get("mp_reduce_dtype")}
        print(f"{key}: {s['steps']} steps, eval losses {s['eval_losses'][0]:.4f} .. {s['final_eval_loss']:.4f}, "
              f"grad scale {scale_of(s)}", flush=True)

    pairs = pairs_of(runs)
    bounds: dict[str, dict[str, Any]] = {}
    for precision, lengths in PRECISIONS.items():
        for length in lengths:
            here = [q for q in pairs if q["precision"] == precision and q["length"] == length]
            honest = [q for q in here if not q.get("other_model")]
            worst = max(honest, key=lambda q: q["drift"])
            entry = {"steps": max(q["steps"] for q in honest), "worst_drift": worst["drift"],
                     "worst_pair": f"{worst['a']} vs {worst['b']}, {worst['ranks']} ranks",
                     "other_seed_drift": next(q["drift"] for q in here if q.get("other_model")),
                     "used_for_bound": length in BOUND_LENGTHS}
            if entry["used_for_bound"]:
                entry["tolerance"] = round(MARGIN * worst["drift"], 6)
            bounds.setdefault(precision, {})[length] = entry
            print(f"{precision:5s} {length:13s} ({entry['steps']} steps): worst honest drift {worst['drift']:.2e} "
                  f"({entry['worst_pair']}); {MARGIN:g} x = {MARGIN * worst['drift']:.2e}; another seed lands "
                  f"{entry['other_seed_drift']:.2e} away{'' if entry['used_for_bound'] else ' (stress: not a bound)'}")

    result = {
        **machine.record("largest relative eval-loss difference between honest runs (DDP against each strategy, "
                         "full_shard against each), tiny model on CPU, at the course's step counts", load),
        "margin": MARGIN, "by_precision": bounds, "pairs": pairs, "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"consistency_drift-{result['date'][:10]}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
