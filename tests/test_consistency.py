"""The loss tolerance between two runs, at its edges, worked by hand: 1e-3 for the same arithmetic on a CPU
(and the floor); otherwise 3 x the drift benchmarks/cpu/consistency_drift-2026-11-26.json measured between
honest runs, for the dtype that drifted most at the runs' length: bf16 3 x 0.001062 = 0.003186 (12 steps),
3 x 0.002007 = 0.006021 (125); fp16 3 x 0.074169 = 0.222507 (12), 3 x 0.049038 = 0.147114 (125).
Notebooks 03 and 05 grade "FSDP matches DDP" with it."""

from __future__ import annotations

import pytest

from workshop.grading import consistency
from workshop.grading.consistency import arithmetic, consistency_tolerance, losses_consistent, same_arithmetic

BF16, FP16 = 0.003186, 0.222507            # 12 steps (and shorter)
BF16_125, FP16_125 = 0.006021, 0.147114


def run(precision: str | None = "fp32", param: str | None = None, reduce: str | None = None,
        device: str = "cpu", **values: object) -> dict:
    return {"precision": precision, "mp_param_dtype": param, "mp_reduce_dtype": reduce, "device": device, **values}


def test_what_each_run_computed_and_reduced_in() -> None:
    assert arithmetic(run()) == {"compute": "float32", "reduce": "float32"}
    assert arithmetic(run(None)) == {"compute": "float32", "reduce": "float32"}           # no precision: fp32
    assert arithmetic(run("bf16")) == {"compute": "bfloat16", "reduce": "float32"}        # DDP: fp32 all-reduce
    assert arithmetic(run("fp16")) == {"compute": "float16", "reduce": "float32"}
    # FSDP2's policy: params in bf16 reduce in bf16 unless a reduce dtype is set
    assert arithmetic(run("fp32", "bfloat16")) == {"compute": "bfloat16", "reduce": "bfloat16"}
    assert arithmetic(run("bf16", "bfloat16", "float32")) == {"compute": "bfloat16", "reduce": "float32"}
    assert arithmetic(run("fp32", "torch.float16")) == {"compute": "float16", "reduce": "float16"}
    # the lower of autocast's and the policy's: fp16 autocast over fp32 params computes in fp16
    assert arithmetic(run("fp16", "float32")) == {"compute": "float16", "reduce": "float32"}
    # units with different policies: "mixed" is read as the loosest, bf16
    assert arithmetic(run("fp32", "mixed", "mixed")) == {"compute": "bfloat16", "reduce": "bfloat16"}


def test_tolerances_by_hand() -> None:
    assert consistency_tolerance(run(), run()) == 1e-3 == consistency.FP32_RTOL
    assert consistency_tolerance(run("bf16"), run()) == pytest.approx(BF16, abs=1e-9)
    assert consistency_tolerance(run(), run("fp32", "bfloat16", "float32")) == pytest.approx(BF16, abs=1e-9)
    assert consistency_tolerance(run("fp16"), run()) == pytest.approx(FP16, abs=1e-9)
    # of both runs' dtypes, the one that drifted most: fp16 (its scaler skips steps), not bf16's larger epsilon
    assert consistency_tolerance(run("fp16"), run("bf16")) == pytest.approx(FP16, abs=1e-9)
    assert consistency_tolerance(run(), run("fp32", None, "bfloat16")) == pytest.approx(BF16, abs=1e-9)   # a bf16 reduce alone
    # the length: the shortest measured one that covers the runs' steps, else the longest
    assert consistency_tolerance(run("bf16", steps=6), run(steps=6)) == pytest.approx(BF16, abs=1e-9)
    assert consistency_tolerance(run("bf16", steps=13), run(steps=13)) == pytest.approx(BF16_125, abs=1e-9)
    assert consistency_tolerance(run("fp16", steps=125), run(steps=125)) == pytest.approx(FP16_125, abs=1e-9)
    assert consistency_tolerance(run("fp16", steps=500), run(steps=500)) == pytest.approx(FP16_125, abs=1e-9)
    # fp32 on a GPU (kernels not deterministic): the floor, the measured fp32 drift being 0
    assert consistency_tolerance(run(device="cuda"), run(device="cuda")) == 1e-3


def test_losses_just_inside_and_just_outside_the_tolerance() -> None:
    """Relative to the larger of the two losses: |a - b| / max(|a|, |b|)."""
    ok, why = losses_consistent(run(eval_losses=[4.0, 2.0]), run(eval_losses=[4.0039, 2.0]))
    assert ok, why                                                     # 0.0039 / 4.0039 = 9.7e-4 <= 1e-3
    ok, why = losses_consistent(run(eval_losses=[4.0, 2.0]), run(eval_losses=[4.0, 2.0021]))
    assert not ok and "NOT consistent" in why                          # 0.0021 / 2.0021 = 1.05e-3
    assert losses_consistent(run(eval_losses=[2.0]), run(eval_losses=[2.002002]))[0]   # 0.002002/2.002002 = 1.0e-3 - 1e-9
    assert losses_consistent(run("bf16", eval_losses=[2.0]), run(eval_losses=[2.0063]))[0]      # 0.314 % <= 0.3186 %
    assert not losses_consistent(run("bf16", eval_losses=[2.0]), run(eval_losses=[2.0065]))[0]  # 0.324 %
    # signs and a scalar key
    assert losses_consistent(run(final=-2.0), run(final=-2.0019), key="final")[0]
    assert not losses_consistent(run(final=-2.0), run(final=2.0), key="final")[0]


def test_the_sentence_says_by_how_much_and_against_what() -> None:
    ok, why = losses_consistent(run(eval_losses=[5.0, 4.0]), run(eval_losses=[5.0, 4.0]))
    assert ok and why == ("eval_losses differ by at most 0.00e+00 (relative); tolerance 1.0e-03 (the same arithmetic "
                          "on a CPU) for "
                          "{'compute': 'float32', 'reduce': 'float32'} vs {'compute': 'float32', 'reduce': 'float32'}: "
                          "consistent")
    ok, why = losses_consistent(run(eval_losses=[5.0]), run(eval_losses=[5.0, 4.0]))
    assert not ok and why == "eval_losses: 1 values against 2; the runs did not evaluate equally often"


def test_zero_losses_do_not_divide_by_zero() -> None:
    assert losses_consistent(run(eval_losses=[0.0]), run(eval_losses=[0.0]))[0]


def test_same_arithmetic_needs_the_same_device_too() -> None:
    assert same_arithmetic(run("bf16"), run("bf16"))
    assert not same_arithmetic(run("bf16"), run("bf16", device="cuda"))
    assert not same_arithmetic(run("bf16"), run("bf16", "bfloat16"))
    assert not same_arithmetic(run("bf16", "bfloat16", "float32"), run("bf16", "bfloat16", "bfloat16"))


@pytest.mark.parametrize("a, b", [("fp32", "fp16"), ("fp16", "bf16"), ("bf16", "bf16")])
def test_the_tolerance_is_symmetric(a: str, b: str) -> None:
    assert consistency_tolerance(run(a), run(b)) == consistency_tolerance(run(b), run(a))


def test_the_relative_difference_is_over_the_larger_loss_and_the_bound_itself_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0.002002 over the larger 2.002002 is 1.0e-3 less a hair: consistent; over the smaller 2.0 it would not be
    assert losses_consistent(run(eval_losses=[2.002002]), run(eval_losses=[2.0]))[0]
    # losses below 1: relative to the loss itself (0.0006 / 0.5006 = 1.2e-3), not to 1
    assert not losses_consistent(run(eval_losses=[0.5]), run(eval_losses=[0.5006]))[0]
    # exactly on the bound (binary-exact: a measured drift of 0.03125 at a margin of 1): consistent
    monkeypatch.setattr(consistency, "MARGIN", 1.0)
    monkeypatch.setitem(consistency.MEASURED_DRIFT, "bfloat16", {12: 0.03125})
    assert losses_consistent(run("bf16", eval_losses=[0.96875]), run(eval_losses=[1.0]))[0]


def test_the_same_arithmetic_is_exact_on_a_cpu_only() -> None:
    """Two bf16 DDP runs on a CPU do the same sums and agree to the last digit: the floor. On a GPU, whose
    kernels are not deterministic, the same two runs drift as bf16 does."""
    assert consistency_tolerance(run("bf16"), run("bf16")) == consistency.FP32_RTOL
    assert consistency_tolerance(run("fp16"), run("fp16")) == consistency.FP32_RTOL
    assert consistency_tolerance(run("bf16", device="cuda"), run("bf16", device="cuda")) == pytest.approx(BF16, abs=1e-9)


def test_the_longer_of_the_two_runs_sets_the_length() -> None:
    """Either run's step count can be the one beyond the 12-step measurement."""
    assert consistency_tolerance(run("bf16"), run(steps=125)) == pytest.approx(BF16_125, abs=1e-9)
    assert consistency_tolerance(run("bf16", steps=125), run()) == pytest.approx(BF16_125, abs=1e-9)
    assert consistency_tolerance(run("bf16", steps=6), run(steps=12)) == pytest.approx(BF16, abs=1e-9)


def test_the_sentence_names_the_drift_it_used_and_an_extrapolation() -> None:
    """The student reads which measurement bounded the pair, and that a 500-step run was judged by the 125-step
    one; a run of exactly a measured length is no extrapolation."""
    drift = "benchmarks/cpu/consistency_drift-2026-11-26.json"
    dtypes = "{'compute': 'bfloat16', 'reduce': 'float32'} vs {'compute': 'float32', 'reduce': 'float32'}"
    ok, why = losses_consistent(run("bf16", steps=500, eval_losses=[2.0]), run(steps=500, eval_losses=[2.1]))
    assert not ok and why == ("eval_losses differ by at most 4.76e-02 (relative); tolerance 6.0e-03 (3 x the "
                              f"bfloat16 drift measured at 125 steps, extrapolated to 500 steps, {drift}) for "
                              f"{dtypes}: NOT consistent")                # 0.1 / 2.1; 3 x 0.002007
    _, why = losses_consistent(run("bf16", steps=125, eval_losses=[2.0]), run(steps=125, eval_losses=[2.0]))
    assert f"(3 x the bfloat16 drift measured at 125 steps, {drift})" in why
    _, why = losses_consistent(run("bf16", eval_losses=[2.0]), run(eval_losses=[2.0]))   # no steps: the shortest
    assert f"tolerance 3.2e-03 (3 x the bfloat16 drift measured at 12 steps, {drift})" in why
