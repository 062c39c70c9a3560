"""The rules notebooks 04 and 05 grade derivations against (workshop.training.fsdp_rules), on cases worked
out by hand."""

from __future__ import annotations

import pytest

from workshop.training import fsdp_rules


def test_model_state_counts_four_bytes_per_fp32_tensor_and_a_1_over_n_share() -> None:
    # 1,000 parameters on 4 ranks: 250 each; 4 B of gradient, and 4 B per optimizer state tensor
    assert fsdp_rules.model_state_bytes(1000, 4, "adamw") == {"grads": 1000, "optimizer": 2000}
    assert fsdp_rules.model_state_bytes(1000, 4, "sgd_momentum") == {"grads": 1000, "optimizer": 1000}
    assert fsdp_rules.model_state_bytes(1000, 4, "sgd") == {"grads": 1000, "optimizer": 0}
    with pytest.raises(ValueError, match="adamw"):
        fsdp_rules.model_state_bytes(1000, 4, "adam8bit")


def test_the_serial_fraction_and_the_speed_up_it_predicts() -> None:
    # speed-up 1.6 at 4x the GPUs: 1/1.6 = 0.625 = s + (1 - s)/4  ->  s = (0.625 - 0.25) / 0.75 = 0.5
    assert fsdp_rules.serial_fraction(1.6, 4) == pytest.approx(0.5)
    assert fsdp_rules.amdahl_speedup(0.5, 4) == pytest.approx(1.6)
    assert fsdp_rules.amdahl_speedup(0.5, 1e12) == pytest.approx(2.0)   # the ceiling, 1 / s
    assert fsdp_rules.serial_fraction(4, 4) == pytest.approx(0.0)       # perfect scaling
    with pytest.raises(ValueError, match="more GPUs"):
        fsdp_rules.serial_fraction(1.0, 1)


def test_network_seconds_per_rank_on_its_own_link() -> None:
    # 2 nodes x 2 GPUs, 4 GB of parameters, links of 2 GB/s
    # full_shard: 3 rings over 4 ranks, each rank sends 3/4 x 4 GB per ring: 9 GB / 2 GB/s = 4.5 s
    assert fsdp_rules.network_seconds("full_shard", 2, 2, 4.0, 2.0) == pytest.approx(4.5)
    # hybrid_shard [2, 2]: each rank all-reduces its 2 GB shard with one peer: 2 x 1/2 x 2 GB = 2 GB: 1 s
    assert fsdp_rules.network_seconds("hybrid_shard", 2, 2, 4.0, 2.0) == pytest.approx(1.0)
    assert fsdp_rules.network_seconds("full_shard", 1, 8, 4.0, 2.0) == 0.0   # nothing leaves one node
    assert fsdp_rules.fastest_settings(16, 4, 2) == {"batch_size": 4, "grad_acc": 2}
