"""The course's exercise tables, built only from what the student's own runs recorded.

One builder per course step. Each takes parsed runs (ParsedLog, log paths or run folders) and
returns a pandas DataFrame whose `attrs["notes"]` explain every NaN: a value the run did not record
stays NaN with a note saying why, it is never filled in. `predicted_mem_mb` (the memory model's
prediction) is added when a run's config is known (its run folder's run_args.json).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from workshop.results.logs import ParsedLog, load
from workshop.results.speed_notes import speed_notes
from workshop.slurm.records import CHECKPOINT_EXIT
from workshop.training.categories import CATEGORIES

NaN = float("nan")
RunLike = ParsedLog | str | Path
MEM_CATEGORIES = CATEGORIES
# a speed-up this far above the GPU count is not scaling but a slowed reference run (noise is a few %)
SUPERLINEAR_EFFICIENCY = 1.15


# ---------------------------------------------------------------------------------------- facts


def _num(v: Any) -> float:
    if isinstance(v, bool) or v is None:
        return NaN
    try:
        f = float(v)
    except (TypeError, ValueError):
        return NaN
    return f


class Facts:
    """A run's numbers, each taken from the best source the log has, with a note for each gap."""

    def __init__(self, log: ParsedLog) -> None:
        self.log = log
        self.s = log.summary or {}
        self.notes: list[str] = [f"{log.label}: {log.rank_note}"] if log.rank_note else []
        if log.checkpoint and log.summary is None:
            self.notes.append(f"{self.label}: stopped at a checkpoint at step {log.checkpoint.get('step')} before "
                              f"the time limit (job exit {CHECKPOINT_EXIT}, CHECKPOINTED): its figures are NaN "
                              "until it is resumed (resume=True, or `workshop submit ... --resume`)")

    def get(self, key: str, *fallbacks: Any, why: str | None = None) -> float:
        """summary[key], else the first fallback that is a number; NaN plus a note otherwise."""
        if key in self.s and self.s[key] is not None:
            return _num(self.s[key])
        for fb in fallbacks:
            v = fb() if callable(fb) else fb
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                return _num(v)
        if key in self.s:
            reason = why or "the run recorded no value"
        else:
            reason = "not in the log" + ("" if self.log.summary is None else "'s summary")
        self.notes.append(f"{self.label}: {key} is NaN — {reason}")
        return NaN

    @property
    def label(self) -> str:
        return self.log.label

    def last_train(self, field: str) -> float | None:
        recs = [m.data.get(field) for m in self.log.train_metrics if m.data.get(field) is not None]
        return recs[-1] if recs else None

    def final(self, field: str) -> float | None:
        f = self.log.final_record
        return f.values.get(field) if f else None

    def eval_losses(self) -> list[float]:
        if isinstance(self.s.get("eval_losses"), list):
            return [_num(v) for v in self.s["eval_losses"]]
        by_epoch: dict[float, float] = {}
        for r in self.log.eval_records:
            if "eval_loss" in r.values:
                by_epoch[r.epoch if r.epoch is not None else len(by_epoch) + 1] = r.values["eval_loss"]
        if not by_epoch:
            for m in self.log.eval_metrics:
                if m.data.get("eval_loss") is not None:
                    by_epoch[_num(m.data.get("epoch"))] = _num(m.data["eval_loss"])
        return [by_epoch[k] for k in sorted(by_epoch)]

    def world_size(self) -> float:
        return self.get("world_size", self.log.config.get("world_size"))

    def nodes(self) -> float:
        return self.get("nodes", self.log.config.get("nodes"))

    def strategy(self) -> str:
        s = self.s.get("sharding_applied") or self.s.get("sharding_requested") or self.log.config.get("sharding")
        if not s:
            self.notes.append(f"{self.label}: strategy unknown — no summary or config in the log")
            return "?"
        if self.s.get("offload_applied") or (self.s.get("offload_applied") is None and self.log.config.get("offload")):
            s += "+offload"
        if self.s.get("activation_checkpointing") or self.log.config.get("activation_checkpointing"):
            s += "+ac"
        return str(s)

    def peak_mem(self) -> float:
        v = self.get("peak_mem_mb", lambda: self.last_train("peak_mem_mb"),
                     lambda: self.log.steps[-1].values.get("mem") if self.log.steps else None)
        note = {"rss": f"{self.label}: peak_mem_mb is the peak RSS of a CPU process (mem_kind rss), not GPU memory",
                "tensor": f"{self.label}: peak_mem_mb is the tensor memory of one CPU rank (PyTorch's memory "
                          "tracker on one step); rss_mb is the whole process"}.get(self.s.get("mem_kind"))
        if note and note not in self.notes:
            self.notes.append(note)
        return v

    def memory_columns(self) -> dict[str, float]:
        """Tensor memory by category (MB, the largest rank's) from summary.json's tensor_mem_mb_per_rank,
        and the process's resident memory. Offloaded runs add what sits in host memory."""
        ranks = [r for r in self.s.get("tensor_mem_mb_per_rank") or [] if r]
        cols = {f"{c}_mb": max((_num(r.get(c)) for r in ranks), default=NaN) for c in MEM_CATEGORIES}
        cols["host_mb"] = max((_num(r.get("host", 0)) for r in ranks), default=NaN)
        cols["rss_mb"] = _num(self.s.get("rss_mb"))
        if not ranks:
            self.notes.append(f"{self.label}: memory by category is NaN — the run measured no tensor memory "
                              "(a run from before the tracker, or one that stopped before its measured step)")
        return cols

    def predicted(self) -> float:
        """The memory model's peak for what ran, at the measured step's batch shape when the run has one,
        for the instrument beside it: on a GPU the allocator's peak holds what the tracker cannot see (DDP's
        gradient buckets), so the prediction beside it is `gpu_peak`; on a CPU the tracker's `peak`."""
        cfg = self.log.config
        if not cfg:
            self.notes.append(f"{self.label}: predicted_mem_mb is NaN — the run folder's run_args.json "
                              "(batch size, sequence length) was not given")
            return NaN
        from workshop.results.memory import MB, estimate_config

        on_gpu = self.s.get("mem_kind") == "cuda_allocated"
        try:
            ranks = [r for r in self.s.get("tensor_mem_mb_per_rank") or [] if r and r.get("batch_shape")]
            shapes = [r["batch_shape"] for r in ranks] or [None]
            breakdowns = [estimate_config(cfg, shape) for shape in shapes]
        except ValueError as e:
            self.notes.append(f"{self.label}: predicted_mem_mb is NaN — {e}")
            return NaN
        if on_gpu:
            self.notes.append(f"{self.label}: peak_mem_mb is the CUDA allocator's peak since train start (reset after "
                              "the generation run, not at process start; the CUDA context is not in it); "
                              "predicted_mem_mb beside it is the memory model's gpu_peak, which adds DDP's gradient "
                              "buckets to the tracker's peak")
            return max(b.gpu_peak for b in breakdowns) / MB
        return max(b.total_mb for b in breakdowns)


def _facts(runs: Iterable[RunLike]) -> list[Facts]:
    return [Facts(load(r)) for r in runs]


# Counts: shown as `world_size 2`, not `2.0`. A column keeps floats only while a value is NaN (noted).
INTEGER_COLUMNS = ("world_size", "nodes", "procs_per_node", "global_batch", "grad_acc", "batch_size", "steps",
                   "steps_per_epoch")


def integer_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Count columns as int64 where every value is a whole number (summaries hand them over as floats)."""
    for col in INTEGER_COLUMNS:
        if col in df.columns and df[col].notna().all() and (df[col] % 1 == 0).all():
            df[col] = df[col].astype("int64")
    return df


def _frame(rows: list[dict[str, Any]], facts: Sequence[Facts], extra_notes: Sequence[str] = ()) -> pd.DataFrame:
    df = integer_columns(pd.DataFrame(rows))
    if "run" in df.columns:
        df = df.set_index("run")
    notes: list[str] = []
    for f in facts:
        notes += [n for n in f.notes if n not in notes]
    notes += [n for n in extra_notes if n not in notes]
    df.attrs["notes"] = notes
    return df


# ---------------------------------------------------------------------------------------- tables


def baseline_table(runs: Iterable[RunLike], predicted_mem_mb: bool = True) -> pd.DataFrame:
    """Step 1 (one GPU, no sharding): loss, eval loss per epoch, throughput, memory, utilisation, EM/F1."""
    facts = _facts(runs)
    rows = []
    for f in facts:
        row: dict[str, Any] = {"run": f.label}
        # Two losses under their own names: the Trainer's `train_loss` is the mean of every step's loss over the
        # whole run (high: it includes the first, untrained steps), the last logged one is where the run ended
        row["mean_train_loss"] = f.get("train_loss", lambda: f.final("train_loss"))
        row["last_logged_loss"] = f.get(
            "last_logged_loss", lambda: f.log.train_metrics[-1].data.get("loss") if f.log.train_metrics else None,
            lambda: f.log.train_records[-1].values.get("loss") if f.log.train_records else None)
        losses = f.eval_losses()
        if not losses:
            f.notes.append(f"{f.label}: eval loss is NaN — no eval record in the log")
            row["eval_loss_epoch1"] = NaN
        for i, v in enumerate(losses, start=1):
            row[f"eval_loss_epoch{i}"] = v
        row["train_samples_per_s"] = f.get("train_samples_per_s", lambda: f.final("train_samples_per_second"))
        row["eval_samples_per_s"] = f.get(
            "eval_samples_per_s", lambda: f.log.eval_records[-1].values.get("eval_samples_per_second")
            if f.log.eval_records else None)
        row["steps_per_epoch"] = f.get("steps_per_epoch")
        row["peak_mem_mb"] = f.peak_mem()
        row.update(f.memory_columns())
        row["gpu_util_pct"] = f.get("gpu_util_pct", why="no GPU utilisation was measured (CPU run, or NVML absent)")
        row["em"] = f.get("em_after", why="EM/F1 generation was off (eval_generate=false)")
        row["f1"] = f.get("f1_after", why="EM/F1 generation was off (eval_generate=false)")
        if predicted_mem_mb:
            row["predicted_mem_mb"] = f.predicted()
        rows.append(row)
    return _frame(rows, facts)


def fsdp_vs_baseline_table(baseline: RunLike, runs: Iterable[RunLike], predicted_mem_mb: bool = True) -> pd.DataFrame:
    """Step 2: what FSDP saves in memory and costs in speed, relative to the one-GPU baseline."""
    base = Facts(load(baseline))
    facts = [base] + _facts(runs)
    b_mem, b_sps = base.peak_mem(), base.get("train_samples_per_s", lambda: base.final("train_samples_per_second"))
    rows = []
    for f in facts:
        mem = f.peak_mem()
        sps = f.get("train_samples_per_s", lambda: f.final("train_samples_per_second"))
        row = {"run": f.label, "strategy": f.strategy(), "world_size": f.world_size(), "peak_mem_mb": mem,
               "mem_saved_mb": b_mem - mem, "mem_saved_pct": 100 * (1 - mem / b_mem) if b_mem else NaN,
               "samples_per_s": sps, "speed_cost_pct": 100 * (1 - sps / b_sps) if b_sps else NaN,
               **f.memory_columns()}
        if predicted_mem_mb:
            row["predicted_mem_mb"] = f.predicted()
        rows.append(row)
    return _frame(rows, facts, [f"baseline: {base.label}"])


def strategies_table(runs: Iterable[RunLike], predicted_mem_mb: bool = True) -> pd.DataFrame:
    """Step 3: each strategy's peak memory and throughput, relative to full_shard."""
    facts = _facts(runs)
    rows = []
    for f in facts:
        row = {"run": f.label, "strategy": f.strategy(), "world_size": f.world_size(), "peak_mem_mb": f.peak_mem(),
               "samples_per_s": f.get("train_samples_per_s", lambda: f.final("train_samples_per_second")),
               "tokens_per_s": f.get("train_tokens_per_s", lambda: f.last_train("tokens_per_s")),
               **f.memory_columns()}
        if predicted_mem_mb:
            row["predicted_mem_mb"] = f.predicted()
        rows.append(row)
    extra = []
    ref = next((r for r in rows if r["strategy"] == "full_shard"), None)
    if ref is None:
        extra.append("no full_shard run given: the 'vs_full_shard' columns are NaN")
    for r in rows:
        for col in ("peak_mem_mb", "samples_per_s", "tokens_per_s"):
            r[f"{col}_vs_full_shard"] = r[col] / ref[col] if ref and ref[col] else NaN
    return _frame(rows, facts, extra)


def scaling_table(runs: Iterable[RunLike], predicted_mem_mb: bool = True, raw: bool = False) -> pd.DataFrame:
    """Step 4: throughput over GPUs and nodes at constant global batch; speed-up and efficiency
    (speed-up / (world / smallest world)) against the smallest world size given.

    `raw`: notebook 04's exercise table, the raw figures only: the batch each run trained (micro-batch,
    accumulation, global batch configured and counted, optimizer steps), throughput and memory; no
    speed-up or efficiency, which the student derives from the throughputs."""
    facts = _facts(runs)
    rows = []
    for f in facts:
        per_rank = f.s.get("peak_mem_mb_per_rank") or []
        row = {"run": f.label, "nodes": f.nodes(), "world_size": f.world_size(),
               "batch_size": f.get("batch_size", f.log.config.get("batch_size")),
               "grad_acc": f.get("grad_acc", f.log.config.get("effective_grad_acc")),
               "global_batch": f.get("global_batch", f.log.config.get("effective_global_batch")),
               "global_batch_measured": f.get("global_batch_measured", why="a run from before the batch was counted"),
               "steps": f.get("steps", lambda: f.log.steps[-1].step if f.log.steps else None),
               "samples_per_s": f.get("train_samples_per_s", lambda: f.final("train_samples_per_second")),
               "peak_mem_mb_per_gpu": max(map(_num, per_rank)) if per_rank else f.peak_mem()}
        if predicted_mem_mb:
            row["predicted_mem_mb"] = f.predicted()
        rows.append(row)
    rows.sort(key=lambda r: (r["world_size"] if not math.isnan(r["world_size"]) else math.inf, r["nodes"]))
    extra = []
    known = [r for r in rows if not math.isnan(r["world_size"]) and not math.isnan(r["samples_per_s"])]
    ref = known[0] if known else None
    for r in rows:
        if ref is None or math.isnan(r["world_size"]):
            r["speedup"] = r["efficiency"] = NaN
            continue
        r["speedup"] = r["samples_per_s"] / ref["samples_per_s"]
        r["efficiency"] = r["speedup"] / (r["world_size"] / ref["world_size"])
    batches = {r["global_batch"] for r in rows if not math.isnan(r["global_batch"])}
    if len(batches) > 1:
        extra.append(f"global batch differs between runs ({sorted(batches)}): this is not a constant-batch "
                     "scaling comparison; keep batch_size x grad_acc x world_size equal")
    if ref is not None and not raw:
        extra.append(f"speed-up relative to {ref['run']} (world size {ref['world_size']:.0f})")
        extra += [f"{r['run']}: efficiency {r['efficiency']:.0%} is above perfect scaling, which no run reaches: "
                  f"{ref['run']} was slowed (a busy machine?) and every speed-up over it is inflated; "
                  f"rerun {ref['run']} (resubmit=True) and compute again"
                  for r in rows if r["efficiency"] > SUPERLINEAR_EFFICIENCY]
    order = (["nodes", "world_size", "batch_size", "grad_acc", "global_batch", "global_batch_measured", "steps",
              "samples_per_s", "peak_mem_mb_per_gpu"] if raw else
             ["nodes", "world_size", "global_batch", "samples_per_s", "speedup", "efficiency", "peak_mem_mb_per_gpu"])
    if predicted_mem_mb:
        order.append("predicted_mem_mb")
    df = _frame(rows, facts, extra)
    return df[[c for c in order if c in df.columns]]


def multinode_table(runs: Iterable[RunLike], bandwidth: Iterable[RunLike] = (),
                    predicted_mem_mb: bool = True) -> pd.DataFrame:
    """Step 5: the scaling table across nodes, plus the bus bandwidth measured on the same layout."""
    df = scaling_table(runs, predicted_mem_mb)
    notes = list(df.attrs.get("notes", []))
    bws = [load(b) for b in bandwidth]
    by_world: dict[int, tuple[float, float, float]] = {}
    by_nodes: dict[int, tuple[float, float, float]] = {}
    unsized: list[tuple[float, float, float]] = []
    for b in bws:
        bw = b.bandwidth
        if bw is None:
            notes.append(f"{b.label}: no bandwidth table in this log")
            continue
        vals = (_num(bw.avg_busbw_GBps), _num(bw.max_busbw_GBps), _num(bw.large_busbw_GBps))
        if bw.transport_note:
            notes.append(f"{b.label}: {bw.transport_note}")
        if bw.n_ranks:
            by_world[bw.n_ranks] = vals
        if bw.n_nodes:
            by_nodes.setdefault(bw.n_nodes, vals)
        if not bw.n_ranks and not bw.n_nodes:
            unsized.append(vals)
    avg, peak, large = [], [], []
    for w, n in zip(df["world_size"], df["nodes"]):
        v = by_world.get(int(w)) if not math.isnan(w) else None
        if v is None and not math.isnan(n) and int(n) in by_nodes:
            v = by_nodes[int(n)]
            notes.append(f"bus bandwidth for world size {w:.0f} is from a test on the same {n:.0f} node(s), "
                         "not the same rank count")
        if v is None and len(unsized) == 1:
            v = unsized[0]
        avg.append(v[0] if v else NaN)
        peak.append(v[1] if v else NaN)
        large.append(v[2] if v else NaN)
    if not bws:
        notes.append("no bandwidth log given: bus bandwidth columns are NaN (run `workshop bandwidth`)")
    elif any(math.isnan(a) for a in avg):
        notes.append("bus bandwidth is NaN where no bandwidth log ran on that many ranks")
    df = df.copy()
    df["avg_busbw_GBps"] = avg
    df["max_busbw_GBps"] = peak
    df["large_busbw_GBps"] = large      # at the largest message: the figure the gate judges
    df.attrs["notes"] = notes
    return df


STEPS = {"baseline", "fsdp", "strategies", "scaling", "multinode"}


def build(step: str, sources: Sequence[RunLike], bandwidth: Sequence[RunLike] = ()) -> pd.DataFrame:
    """The exercise table of `step`; `attrs["speed_notes"]` say why its samples/s differ from the logs' step
    lines, and which speed differences are within the runs' noise (workshop.results.speed_notes)."""
    df = _build(step, sources, bandwidth)
    column = next((c for c in ("samples_per_s", "train_samples_per_s") if c in df.columns), None)
    facts = _facts(sources)
    df.attrs["speed_notes"] = []
    if column is None or len(facts) != len(df):
        return df
    strategies = list(df["strategy"]) if "strategy" in df.columns else [None] * len(df)
    # a run's name as the reader knows it: its label, else (several runs named alike) its strategy, else its place
    labels = [str(x) for x in df.index]
    if len(set(labels)) < len(labels):
        labels = [str(s) if s else f"run {i + 1}" for i, s in enumerate(strategies)]
    if len(set(labels)) < len(labels):
        labels = [f"run {i + 1} ({label})" for i, label in enumerate(labels)]
    reference = 0 if step == "fsdp" else next((i for i, s in enumerate(strategies) if s == "full_shard"), None) \
        if step == "strategies" else None
    df.attrs["speed_notes"] = speed_notes(labels, [f.log for f in facts], [_num(v) for v in df[column]], reference)
    return df


def _build(step: str, sources: Sequence[RunLike], bandwidth: Sequence[RunLike] = ()) -> pd.DataFrame:
    if step == "baseline":
        return baseline_table(sources)
    if step == "fsdp":
        return fsdp_vs_baseline_table(sources[0], sources[1:])
    if step == "strategies":
        return strategies_table(sources)
    if step == "scaling":
        return scaling_table(sources, raw=True)
    if step == "multinode":
        runs = [s for s in sources if load(s).bandwidth is None or load(s).summary is not None]
        bws = list(bandwidth) + [s for s in sources if s not in runs]
        return multinode_table(runs, bws)
    raise ValueError(f"unknown step {step!r}; choose one of {', '.join(sorted(STEPS))}")


# ---------------------------------------------------------------------------------------- rendering


def _cell(v: Any) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if v.is_integer() and abs(v) < 1e15:
            return f"{int(v):,}" if abs(v) >= 1000 else f"{int(v)}"
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    return str(v)


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub markdown table (pandas' own needs `tabulate`), then the notes."""
    index_name = df.index.name or ""
    header = [index_name] + [str(c) for c in df.columns]
    body = [[str(i)] + [_cell(v) for v in row] for i, row in zip(df.index, df.itertuples(index=False))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    notes = df.attrs.get("notes", [])
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines)


def render(df: pd.DataFrame, fmt: str = "markdown") -> str:
    if fmt == "markdown":
        return to_markdown(df)
    if fmt == "csv":
        return df.to_csv()
    if fmt == "json":
        records = json.loads(df.reset_index().to_json(orient="records"))
        return json.dumps({"rows": records, "notes": df.attrs.get("notes", [])}, indent=1)
    raise ValueError(f"unknown format {fmt!r}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="workshop table",
                                description="Turn job logs or run folders into a course step's exercise table.")
    p.add_argument("sources", nargs="+", help="job logs (.out) or run folders; for --step fsdp the first is the baseline")
    p.add_argument("--step", default="baseline", choices=sorted(STEPS))
    p.add_argument("--bandwidth", action="append", default=[], help="a `workshop bandwidth` log (multinode step)")
    p.add_argument("--format", default="markdown", choices=("markdown", "csv", "json"))
    args = p.parse_args(argv)
    missing = [s for s in args.sources + args.bandwidth if not Path(s).exists()]
    if missing:
        print(f"workshop table: not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.step == "fsdp" and len(args.sources) < 2:
        print("workshop table: --step fsdp needs the baseline first, then at least one FSDP run", file=sys.stderr)
        return 2
    print(render(build(args.step, args.sources, args.bandwidth), args.format))
    return 0
