"""How far apart two runs' losses may legitimately be, from the arithmetic each run really did.

Two runs that do the same arithmetic in fp32 (DDP vs FULL_SHARD on CPU) agree to rounding; on a GPU,
FSDP2 with a bf16 gradient reduce, DDP with an fp32 all-reduce, and fp16 on a V100 differ for
reasons no student controls. The tolerance therefore follows the lowest precision either run used
for its compute or its gradient reduction, read from the runs' summaries (`precision`,
`mp_param_dtype`, `mp_reduce_dtype`, as the run read them back from the wrapped model).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

# Unit roundoff (machine epsilon) of each dtype a run computes or reduces in.
EPSILON = {"float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}
PRECISION_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# fp32 runs: reduction order alone (a different world size, a reduce-scatter instead of an
# all-reduce) moves a trained loss by far less than this; the suite's fp32 equality tests use it.
FP32_RTOL = 1e-3
# Low-precision runs: a relative tolerance of this many epsilons of the lowest precision used.
# bf16: 4 x 2^-7 = 3.1 %, fp16: 4 x 2^-10 = 0.4 % (measured at 2 ranks on gloo, bf16 FULL_SHARD vs
# DDP: tests/test_fsdp_exercises.py).
LOW_PRECISION_EPSILONS = 4.0


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


def consistency_tolerance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """The relative tolerance within which two runs' losses count as equal."""
    used = {*arithmetic(a).values(), *arithmetic(b).values()}
    if used == {"float32"}:
        return FP32_RTOL
    return max(FP32_RTOL, LOW_PRECISION_EPSILONS * max(EPSILON[d] for d in used))


def same_arithmetic(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return arithmetic(a) == arithmetic(b) and a.get("device") == b.get("device")


def losses_consistent(a: Mapping[str, Any], b: Mapping[str, Any], key: str = "eval_losses") -> tuple[bool, str]:
    """(agree?, a sentence saying by how much and against which tolerance) for two runs' summaries."""
    tol = consistency_tolerance(a, b)
    xs: Sequence[float] = a[key] if isinstance(a[key], list) else [a[key]]
    ys: Sequence[float] = b[key] if isinstance(b[key], list) else [b[key]]
    if len(xs) != len(ys):
        return False, f"{key}: {len(xs)} values against {len(ys)}; the runs did not evaluate equally often"
    worst = max(abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in zip(xs, ys))
    ok = worst <= tol
    return ok, (f"{key} differ by at most {worst:.2e} (relative); tolerance {tol:.1e} for "
                f"{arithmetic(a)} vs {arithmetic(b)}: {'consistent' if ok else 'NOT consistent'}")
