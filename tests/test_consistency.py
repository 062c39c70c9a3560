"""The loss tolerance between two runs, at its edges, worked by hand: fp32 1e-3; otherwise 4 x the
machine epsilon of the lowest precision either run computed or reduced in (bf16 4 x 2^-7 = 0.03125,
fp16 4 x 2^-10 = 0.00390625). Notebook 03 grades "FSDP matches DDP" with it."""

from __future__ import annotations

import pytest

from workshop.training import consistency
from workshop.training.consistency import arithmetic, consistency_tolerance, losses_consistent, same_arithmetic

BF16, FP16 = 4 * 2**-7, 4 * 2**-10


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
    assert consistency_tolerance(run("bf16"), run()) == BF16 == 0.03125
    assert consistency_tolerance(run(), run("fp32", "bfloat16", "float32")) == BF16
    assert consistency_tolerance(run("fp16"), run()) == FP16 == 0.00390625
    assert consistency_tolerance(run("fp16"), run("bf16")) == BF16          # the lowest of both runs
    assert consistency_tolerance(run(), run("fp32", None, "bfloat16")) == BF16   # a bf16 reduce alone


def test_losses_just_inside_and_just_outside_the_tolerance() -> None:
    """Relative to the larger of the two losses: |a - b| / max(|a|, |b|)."""
    ok, why = losses_consistent(run(eval_losses=[4.0, 2.0]), run(eval_losses=[4.0039, 2.0]))
    assert ok, why                                                     # 0.0039 / 4.0039 = 9.7e-4 <= 1e-3
    ok, why = losses_consistent(run(eval_losses=[4.0, 2.0]), run(eval_losses=[4.0, 2.0021]))
    assert not ok and "NOT consistent" in why                          # 0.0021 / 2.0021 = 1.05e-3
    assert losses_consistent(run(eval_losses=[2.0]), run(eval_losses=[2.002002]))[0]   # 0.002002/2.002002 = 1.0e-3 - 1e-9
    assert losses_consistent(run("bf16", eval_losses=[2.0]), run(eval_losses=[2.06]))[0]      # 2.9 % <= 3.125 %
    assert not losses_consistent(run("bf16", eval_losses=[2.0]), run(eval_losses=[2.07]))[0]  # 3.4 %
    # signs and a scalar key
    assert losses_consistent(run(final=-2.0), run(final=-2.0019), key="final")[0]
    assert not losses_consistent(run(final=-2.0), run(final=2.0), key="final")[0]


def test_the_sentence_says_by_how_much_and_against_what() -> None:
    ok, why = losses_consistent(run(eval_losses=[5.0, 4.0]), run(eval_losses=[5.0, 4.0]))
    assert ok and why == ("eval_losses differ by at most 0.00e+00 (relative); tolerance 1.0e-03 for "
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


def test_the_relative_difference_is_over_the_larger_loss_and_the_bound_itself_holds() -> None:
    # 0.002002 over the larger 2.002002 is 1.0e-3 less a hair: consistent; over the smaller 2.0 it would not be
    assert losses_consistent(run(eval_losses=[2.002002]), run(eval_losses=[2.0]))[0]
    # losses below 1: relative to the loss itself (0.0006 / 0.5006 = 1.2e-3), not to 1
    assert not losses_consistent(run(eval_losses=[0.5]), run(eval_losses=[0.5006]))[0]
    # exactly on the bound (binary-exact: 0.03125 / 1.0 is bf16's 4 x 2^-7): consistent
    assert losses_consistent(run("bf16", eval_losses=[0.96875]), run("bf16", eval_losses=[1.0]))[0]
