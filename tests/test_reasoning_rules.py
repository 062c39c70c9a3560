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


def test_fastest_settings_stop_at_the_largest_micro_batch_that_fits_and_divides() -> None:
    """The micro-batch is the largest divisor of the per-rank batch up to `micro_batch_max`, the bound itself
    included; a per-rank batch with no divisor above 1 that fits runs one sample at a time."""
    assert fsdp_rules.fewest_micro_batches(16, 3, 2) == {"batch_size": 2, "grad_acc": 4}   # 8 per rank: 3 does not divide
    assert fsdp_rules.fewest_micro_batches(16, 8, 2) == {"batch_size": 8, "grad_acc": 1}   # the bound itself fits
    assert fsdp_rules.fewest_micro_batches(16, 7, 2) == {"batch_size": 4, "grad_acc": 2}
    assert fsdp_rules.fewest_micro_batches(14, 4, 2) == {"batch_size": 1, "grad_acc": 7}   # 7 per rank: a prime
    assert fsdp_rules.fewest_micro_batches(32, 1, 4) == {"batch_size": 1, "grad_acc": 8}


def test_fastest_settings_are_whole_numbers_the_trainer_takes() -> None:
    """`per_device_train_batch_size` and `gradient_accumulation_steps` are ints: a reference of 2.0 would
    show the student a setting the Trainer refuses."""
    for args in ((16, 4, 2), (64, 8, 4), (12, 5, 3)):
        settings = fsdp_rules.fewest_micro_batches(*args)
        assert all(type(v) is int for v in settings.values()), (args, settings)


def test_held_fraction_of_each_strategy() -> None:
    """DDP and no sharding hold the whole model; FSDP 1/N over all ranks; hybrid 1/N over its shard group."""
    assert fsdp_rules.held_fraction("ddp", 16) == 1.0
    assert fsdp_rules.held_fraction("none", 2) == 1.0      # unsharded: the whole model, at any world size
    assert fsdp_rules.held_fraction("ddp", 16, replicas=3) == 1.0   # a replica each: nothing to divide
    assert fsdp_rules.held_fraction("full_shard", 16) == 1 / 16
    assert fsdp_rules.held_fraction("shard_grad_op", 4) == 1 / 4
    assert fsdp_rules.held_fraction("full_shard", 16, replicas=2) == 1 / 16   # replicas only shape a hybrid mesh
    assert fsdp_rules.held_fraction("hybrid_shard", 16, replicas=2) == 1 / 8
    assert fsdp_rules.held_fraction("hybrid_shard_grad_op", 16, replicas=4) == 1 / 4
    assert fsdp_rules.held_fraction("hybrid_shard", 8) == 1 / 8           # one replica: full sharding


def test_held_fraction_refuses_replicas_that_do_not_divide_the_ranks() -> None:
    with pytest.raises(ValueError) as e:
        fsdp_rules.held_fraction("hybrid_shard", 16, replicas=3)
    assert str(e.value) == "3 replicas do not divide 16 ranks"
    with pytest.raises(ValueError, match="5 replicas do not divide 4 ranks"):
        fsdp_rules.held_fraction("full_shard", 4, replicas=5)


def test_model_state_defaults_to_adamw() -> None:
    """Notebook 04's model state is AdamW's unless the cell names another optimizer."""
    assert fsdp_rules.model_state_bytes(1000, 4) == {"grads": 1000, "optimizer": 2000}


def test_amdahl_needs_more_gpus_than_the_smallest_run() -> None:
    """At a ratio of 1 there is no scaling to describe, even at the speed-up 1; at 2 (the smallest ratio a
    sweep has) the law applies between 1 and 2."""
    assert not fsdp_rules.amdahl_applies(1.0, 1)
    assert not fsdp_rules.amdahl_applies(1.0, 0.5)
    assert fsdp_rules.amdahl_applies(1.5, 2) and fsdp_rules.amdahl_applies(1.0, 2) and fsdp_rules.amdahl_applies(2.0, 2)
    assert not fsdp_rules.amdahl_applies(2.01, 2)
    # 1/1.5 = s + (1 - s)/2  ->  s = (2/3 - 1/2) / (1/2) = 1/3
    assert fsdp_rules.serial_fraction(1.5, 2) == pytest.approx(1 / 3)
    for ratio in (1, 0.5):
        with pytest.raises(ValueError) as e:
            fsdp_rules.serial_fraction(1.0, ratio)
        assert str(e.value) == "the serial fraction needs a run on more GPUs than the smallest (gpu_ratio > 1)"


def test_a_speed_up_amdahl_cannot_describe_is_refused_with_the_reason() -> None:
    """The instructor reads why no serial fraction is the reference: the speed-up, the ratio, the range."""
    with pytest.raises(ValueError) as e:
        fsdp_rules.serial_fraction(0.64, 4)
    assert str(e.value) == ("a speed-up of 0.64 at 4x the GPUs is outside [1, 4]: Amdahl's law does not describe it "
                            "(no serial fraction in [0, 1] gives it)")


def test_network_seconds_refuse_a_rate_that_is_not_positive() -> None:
    """A zero or negative rate (a gate that measured nothing) is refused by name, on one node too."""
    for rate in (0.0, -1.0):
        for nodes in (1, 2):
            with pytest.raises(ValueError) as e:
                fsdp_rules.network_seconds("full_shard", nodes, 4, 2.24, rate)
            assert str(e.value) == f"a node's outbound rate must be positive, not {rate} GB/s"
    # a rate below 1 GB/s is a rate: 1 Gbit/s Ethernet, 0.125 GB/s, sends hybrid's 4 GB in 32 s
    assert fsdp_rules.network_seconds("hybrid_shard", 2, 2, 4.0, 0.125) == pytest.approx(32.0)
    with pytest.raises(ValueError, match="unknown strategy 'ddp': use full_shard or hybrid_shard"):
        fsdp_rules.network_seconds("ddp", 2, 4, 2.24, 25.0)
