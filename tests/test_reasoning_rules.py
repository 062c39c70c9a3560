"""The rules notebooks 04 and 05 grade derivations against (workshop.grading.fsdp_rules), on cases worked
out by hand."""

from __future__ import annotations

import pytest

from workshop.grading import fsdp_rules


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


def test_amdahl_applies_only_between_no_and_perfect_speed_up() -> None:
    # issue 49: the course's CPU run measured 0.64 at 4 processes; s = (1/0.64 - 1/4) / (3/4) = 1.75 is no
    # share of a step, and it predicted speed-ups below 1 at 1,024 GPUs. No reference is ever such an s.
    assert not fsdp_rules.amdahl_applies(0.64, 4)
    assert not fsdp_rules.amdahl_applies(4.2, 4)          # faster than perfect: a slowed smallest run
    assert fsdp_rules.amdahl_applies(1.0, 4) and fsdp_rules.amdahl_applies(4.0, 4)
    for speedup in (0.64, 0.99, 4.01, 8.0):
        with pytest.raises(ValueError, match="does not describe"):
            fsdp_rules.serial_fraction(speedup, 4)
    for s in (-0.1, 1.75):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            fsdp_rules.amdahl_speedup(s, 4)
    for speedup in (1.0, 1.3, 2.7, 4.0):                  # inside, s lands in [0, 1] and gives the speed-up back
        s = fsdp_rules.serial_fraction(speedup, 4)
        assert 0 <= s <= 1 and fsdp_rules.amdahl_speedup(s, 4) == pytest.approx(speedup)


def test_network_seconds_share_each_nodes_outbound_rate() -> None:
    # 2 nodes x 2 GPUs, 4 GB of parameters, each node's cards together send 2 GB/s (the gate's busbw)
    # full_shard: 3 rings over 4 ranks, each leaving a node by one hop with 3/4 x 4 GB: 9 GB / 2 GB/s = 4.5 s
    assert fsdp_rules.network_seconds("full_shard", 2, 2, 4.0, 2.0) == pytest.approx(4.5)
    # hybrid_shard [2, 2]: each of the node's 2 GPUs all-reduces its 2 GB shard with one peer (2 x 1/2 x 2 GB),
    # both through the same cards: 4 GB / 2 GB/s = 2 s (a link per GPU would have said 1 s)
    assert fsdp_rules.network_seconds("hybrid_shard", 2, 2, 4.0, 2.0) == pytest.approx(2.0)
    assert fsdp_rules.network_seconds("full_shard", 1, 8, 4.0, 2.0) == 0.0   # nothing leaves one node


def test_hybrid_shard_is_about_three_times_faster_across_2_nodes_of_8_not_twenty() -> None:
    # issue 49: the same bytes and bus bandwidth, full_shard / hybrid_shard = 3 x 15/16 / 1 = 2.81
    ratio = (fsdp_rules.network_seconds("full_shard", 2, 8, 2.24, 40.0)
             / fsdp_rules.network_seconds("hybrid_shard", 2, 8, 2.24, 40.0))
    assert 2 < ratio < 4, ratio
    assert ratio == pytest.approx(2.8125)


def test_network_seconds_are_the_node_bytes_over_the_node_rate() -> None:
    # one owner of the byte count: the time is traffic's bytes per node over the node's rate, at every layout
    from workshop.grading import traffic

    for strategy in ("full_shard", "hybrid_shard"):
        for nodes, gpus in ((2, 2), (2, 8), (4, 8), (8, 4), (1, 4), (16, 8)):
            assert fsdp_rules.network_seconds(strategy, nodes, gpus, 2.24, 25.0) == pytest.approx(
                traffic.network_bytes_per_node(strategy, nodes, gpus, 2.24) / 25.0), (strategy, nodes, gpus)


def test_fastest_settings_name_the_fewest_micro_batches() -> None:
    assert fsdp_rules.fastest_settings(16, 4, 2) == {"batch_size": 4, "grad_acc": 2}
