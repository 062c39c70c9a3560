"""What recording one step's collectives costs a training run (issue 27), and how large its trace is.

    .venv/bin/python benchmarks/comm_overhead.py                 # notebook 03's strategies, tiny model
    .venv/bin/python benchmarks/comm_overhead.py --deep          # and a 24-block model: BLOOM-560M's trace size

Why a benchmark and not a test: the figures are differences of times, and a timed test on a shared CI
machine measures its neighbours. This runs alone, on a quiet machine, and keeps what it measured.

Each of notebook 03's strategies runs as a real `workshop.training.train` under torchrun at 2 ranks for 12
optimizer steps of the tiny model (tests/runs.py's flags), twice: recording (the default) and with
`--no-comm-record`, one after the other, `--repeats` times. Per run it keeps:
- the job's wall time (torchrun start to exit): recording against not, the whole cost to a job
  (the profiled step, reading its trace, gathering it, the flight recorder on every collective);
- `comm.overhead_pct`: the recorded step's extra time over the median other step, as a share of the
  training time, and `reading_ms` (the profiler's stop, reading its events, parse and cut, slowest rank);
- the summary's throughput with and without recording (the recorded step is out of its window, so
  they should agree within the machine's noise);
- the trace: the profiler's whole trace per rank and the cut `comm_trace.json` per rank.
`--deep` adds one run of a BLOOM with BLOOM-560M's 24 blocks and the tiny model's width (2 ranks,
full_shard, 4 steps): a step runs BLOOM-560M's operators and collectives, one by one, so its trace has
BLOOM-560M's size on a CPU (BLOOM-560M itself needs more memory than a 2-core CI machine has: its two
ranks took all 19 GB this 23 GB machine had free, in the tensor-memory tracker's step, and were stopped). Writes `benchmarks/cpu/comm_overhead-DATE.json`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tensor_memory_overhead import STRATEGIES  # noqa: E402  (notebook 03's five runs, beside this file)

DEEP = ["--sharding", "full_shard", "--max-steps", "4"]


def deep_model(folder: Path) -> Path:
    """A saved BLOOM with BLOOM-560M's depth (24 blocks) and the tiny model's width, and its tokenizer:
    a `model` path the training script loads like any local model."""
    from transformers import BloomForCausalLM

    from workshop.training.models import BLOOM_560M, TINY, bloom_config
    from workshop.training.tokenizer import load_offline_tokenizer

    tok = load_offline_tokenizer()
    model = BloomForCausalLM(bloom_config({**TINY, "n_layer": BLOOM_560M["n_layer"]}, tok))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def one(out: Path, flags: list[str]) -> dict[str, Any]:
    from tests.runs import train

    started = time.perf_counter()
    run = train(out, flags, nproc=2)
    wall = time.perf_counter() - started
    s = run.summary
    comm = s["comm"]
    trace = out / "comm_trace.json"
    row: dict[str, Any] = {"job_wall_s": round(wall, 2), "train_runtime_s": s["train_runtime_s"],
                           "train_samples_per_s": s["train_samples_per_s"], "steps": s["steps"],
                           "comm_status": comm["status"]}
    if comm["status"] == "measured":
        ranks = comm["per_rank"]
        row.update(overhead_pct=comm["overhead_pct"],
                   recorded_step_ms=max(r["step_ms"] for r in ranks),
                   reading_ms=round(max(sum(r["reading_ms"].values()) for r in ranks), 1),
                   profiled_events=max(r["profiled_events"] for r in ranks),
                   trace_mb_per_rank=round(trace.stat().st_size / len(ranks) / 2**20, 3))
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "cpu")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--deep", action="store_true", help="also a 24-block model: BLOOM-560M's trace size")
    args = p.parse_args(argv)

    from importlib.metadata import version

    load = os.getloadavg()[0]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="comm-overhead-") as tmp:
        for rep in range(args.repeats):
            for name, flags in STRATEGIES.items():
                for mode, extra in (("recording", []), ("off", ["--no-comm-record"])):
                    row = one(Path(tmp) / f"{name}-{mode}-{rep}", [*flags, *extra])
                    runs.setdefault(name, {}).setdefault(mode, []).append(row)
                    print(f"{name:26s} {mode:9s} {json.dumps(row)}", flush=True)
        deep = None
        if args.deep:
            folder = deep_model(Path(tmp) / "deep-model")
            deep = one(Path(tmp) / "deep", ["--model", str(folder), *DEEP])
            print(f"24 blocks, full_shard x2: {json.dumps(deep)}", flush=True)

    def med(rows: list[dict[str, Any]], key: str) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None]
        return round(statistics.median(values), 3) if values else None

    table = {}
    for name, modes in runs.items():
        on, off = modes["recording"], modes["off"]
        table[name] = {
            "job_wall_s": {"recording": med(on, "job_wall_s"), "off": med(off, "job_wall_s")},
            "extra_job_s": round(med(on, "job_wall_s") - med(off, "job_wall_s"), 2),
            "train_samples_per_s": {"recording": med(on, "train_samples_per_s"), "off": med(off, "train_samples_per_s")},
            "overhead_pct": med(on, "overhead_pct"), "recorded_step_ms": med(on, "recorded_step_ms"),
            "reading_ms": med(on, "reading_ms"), "profiled_events": med(on, "profiled_events"),
            "trace_mb_per_rank": med(on, "trace_mb_per_rank")}
    result = {
        "what": "what recording one step's collectives costs notebook 03's runs (2 ranks, 12 steps, tiny model): "
                "medians over repeats, recording vs --no-comm-record",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "load_1min_before": round(load, 2), "python": platform.python_version(),
                    "platform": platform.platform()},
        "versions": {name: version(name) for name in ("torch", "transformers", "accelerate")},
        "repeats": args.repeats, "strategies": table, "runs": runs,
        "deep_24_blocks_full_shard_x2": deep,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"comm_overhead-{result['date'][:10]}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    for name, row in table.items():
        print(f"{name:26s} +{row['extra_job_s']} s a job ({row['job_wall_s']}), recorded step +{row['overhead_pct']} % "
              f"of training, trace {row['trace_mb_per_rank']} MB a rank (of {row['profiled_events']} profiled events)")
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
