"""How far apart two honest runs' losses may be: a tolerance measured, not derived from unit roundoff.

Two runs that do the same sums on a CPU (DDP and FULL_SHARD in fp32; two FSDP2 strategies in bf16)
agree to the last digit: CPU kernels are deterministic. Everywhere else two honest runs start apart by
a rounding error and training compounds it: FSDP2's bf16 parameters and bf16 gradient reduce against
DDP's autocast and fp32 all-reduce; fp16, whose gradient scaler skips an overflowing step in one run
and not in the other; any two runs on a GPU, whose kernels are not deterministic. After tens of steps
their losses differ by far more than the dtype's epsilon. So the tolerance comes from
benchmarks/consistency_drift.py: DDP against each strategy and full_shard against each, at the course's
step counts, in each precision, on CPU. `MEASURED_DRIFT` keeps the largest relative eval-loss difference
it saw (benchmarks/cpu/consistency_drift-*.json; a test keeps the two equal), and the tolerance is
`MARGIN` times that, for the lowest precision either run computed or reduced in (read from the runs'
summaries: `precision`, `mp_param_dtype`, `mp_reduce_dtype`) and the measured length that covers
the runs' steps.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

# Unit roundoff (machine epsilon) of each dtype a run computes or reduces in: which is the lowest.
EPSILON = {"float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}
PRECISION_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# Two runs of the same arithmetic on a CPU (measured: equal to the last digit) and the floor of every
# tolerance: reduction order alone moves an fp32 loss by far less.
FP32_RTOL = 1e-3
# The largest drift benchmarks/consistency_drift.py measured between honest runs, by the lowest dtype used
# and the runs' length in optimizer steps (benchmarks/cpu/consistency_drift-2026-11-26.json).
MEASURED_DRIFT: dict[str, dict[int, float]] = {
    "float32": {12: 0.0},
    "bfloat16": {12: 0.0, 125: 0.0},
    "float16": {12: 0.0, 125: 0.0},
}
MARGIN = 3.0


def arithmetic(summary: Mapping[str, Any]) -> dict[str, str]:
    """The dtypes a run computed and reduced gradients in.

    Compute: autocast's dtype for bf16/fp16, or the FSDP2 policy's param_dtype when it is lower.
    Reduce: the FSDP2 policy's reduce_dtype, else its param_dtype (FSDP2 reduces in the compute dtype
    when no reduce_dtype is set), else fp32 (DDP all-reduces the fp32 gradients of fp32 parameters).
    """
    autocast = PRECISION_DTYPE[summary.get("precision") or "fp32"]
    param = _dtype(summary.get("mp_param_dtype"))
    compute = max((autocast, param or "float32"), key=EPSILON.__getitem__)
    reduce = _dtype(summary.get("mp_reduce_dtype")) or param or "float32"
    return {"compute": compute, "reduce": reduce}


def _dtype(value: Any) -> str | None:
    """A summary's dtype name; "mixed" (units with different policies) counts as the loosest, bfloat16."""
    if value is None:
        return None
    return "bfloat16" if value == "mixed" else str(value).removeprefix("torch.")


def same_arithmetic(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return arithmetic(a) == arithmetic(b) and a.get("device") == b.get("device")


def measured_length(dtype: str, steps: int) -> int:
    """The measured length that covers a run of `steps` optimizer steps: the shortest one at least as long,
    else the longest measured (a longer run is judged by it: an extrapolation, which `losses_consistent` says)."""
    lengths = sorted(MEASURED_DRIFT[dtype])
    return next((n for n in lengths if n >= steps), lengths[-1])


def consistency_tolerance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """The relative tolerance within which two runs' losses count as equal."""
    if same_arithmetic(a, b) and a.get("device") == "cpu":
        return FP32_RTOL
    lowest = max({*arithmetic(a).values(), *arithmetic(b).values()}, key=EPSILON.__getitem__)
    steps = max(int(a.get("steps") or 0), int(b.get("steps") or 0))
    return max(FP32_RTOL, MARGIN * MEASURED_DRIFT[lowest][measured_length(lowest, steps)])


def _basis(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    if same_arithmetic(a, b) and a.get("device") == "cpu":
        return "the same arithmetic on a CPU"
    lowest = max({*arithmetic(a).values(), *arithmetic(b).values()}, key=EPSILON.__getitem__)
    steps = max(int(a.get("steps") or 0), int(b.get("steps") or 0))
    n = measured_length(lowest, steps)
    beyond = f", extrapolated to {steps} steps" if steps > n else ""
    return f"{MARGIN:g} x the {lowest} drift measured at {n} steps{beyond}"


def losses_consistent(a: Mapping[str, Any], b: Mapping[str, Any], key: str = "eval_losses") -> tuple[bool, str]:
    """(agree?, a sentence saying by how much and against which tolerance) for two runs' summaries."""
    tol = consistency_tolerance(a, b)
    xs: Sequence[float] = a[key] if isinstance(a[key], list) else [a[key]]
    ys: Sequence[float] = b[key] if isinstance(b[key], list) else [b[key]]
    if len(xs) != len(ys):
        return False, f"{key}: {len(xs)} values against {len(ys)}; the runs did not evaluate equally often"
    worst = max(abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in zip(xs, ys))
    ok = worst <= tol
    return ok, (f"{key} differ by at most {worst:.2e} (relative); tolerance {tol:.1e} ({_basis(a, b)}) for "
                f"{arithmetic(a)} vs {arithmetic(b)}: {'consistent' if ok else 'NOT consistent'}")
