""""Asking for FSDP never yields a DDP wrapper": `sharding.check_applied` against hand-built facts.

A run reads back what it is wrapped in (`describe_applied`) and stops before its first step when that
is not what it asked for. The facts here are written by hand, one way of going wrong at a time, as
describe_applied reports them; the real runs that produce such facts are tests/test_fsdp_config.py's.
Each mismatch must raise ShardingMismatch naming what differs, and nothing else; a match must pass.
"""

from __future__ import annotations

from typing import Any

import pytest

from workshop.training.config import RunConfig
from workshop.training.sharding import ShardingMismatch, check_applied

SUFFIX = (". Refusing to train with a different strategy than requested (see workshop/training/fsdp_cpu.py "
          "for the known upstream fallbacks).")


def config(**fields: Any) -> RunConfig:
    return RunConfig(**fields).validate()


def facts(**changes: Any) -> dict[str, Any]:
    """What describe_applied reports for a tiny BLOOM that full_shard really wrapped on 2 ranks."""
    return {"sharding_applied": "full_shard", "wrapper": "FSDPBloomForCausalLM", "offload_applied": False,
            "mesh": [1, 2], "activation_checkpointing_applied": False, "blocks_wrapped": 2,
            "wrapped_classes": ["BloomBlock"], **changes}


def mismatch(cfg: RunConfig, applied: dict[str, Any]) -> str:
    with pytest.raises(ShardingMismatch) as caught:
        check_applied(cfg, applied)
    return str(caught.value)


FULL_SHARD_2 = dict(sharding="full_shard", procs_per_node=2)


def test_what_was_asked_for_passes() -> None:
    check_applied(config(**FULL_SHARD_2), facts())
    check_applied(config(**FULL_SHARD_2, offload=True), facts(offload_applied=True))
    check_applied(config(**FULL_SHARD_2, activation_checkpointing=True), facts(activation_checkpointing_applied=True))
    check_applied(config(sharding="shard_grad_op", procs_per_node=2), facts(sharding_applied="shard_grad_op"))
    check_applied(config(sharding="hybrid_shard", procs_per_node=4, hybrid_replicas=2),
                  facts(sharding_applied="hybrid_shard", mesh=[2, 2], blocks_wrapped=2))
    # DDP and one process: no FSDP facts at all (no mesh, no units), as describe_applied reports them
    plain = dict(offload_applied=False, mesh=None, blocks_wrapped=0, wrapped_classes=[])
    check_applied(config(sharding="ddp", procs_per_node=2),
                  facts(sharding_applied="ddp", wrapper="DistributedDataParallel", **plain))
    check_applied(config(), facts(sharding_applied="none", wrapper="BloomForCausalLM", **plain))


def test_a_ddp_wrapper_where_fsdp_was_asked_for() -> None:
    """FINDINGS.md's first silent failure: Trainer(fsdp=...) on a CPU host wraps the model in DDP."""
    ddp = facts(sharding_applied="ddp", wrapper="DistributedDataParallel", mesh=None, blocks_wrapped=0,
                wrapped_classes=[])
    # a DDP wrapper has no FSDP units either: both differences are named
    assert mismatch(config(**FULL_SHARD_2), ddp) == (
        "asked for sharding='full_shard', the model is wrapped as 'ddp' (DistributedDataParallel); "
        "asked to wrap ['BloomBlock'], wrapped []" + SUFFIX)


def test_fsdp_where_ddp_was_asked_for() -> None:
    assert mismatch(config(sharding="ddp", procs_per_node=2), facts()) == (
        "asked for sharding='ddp', the model is wrapped as 'full_shard' (FSDPBloomForCausalLM)" + SUFFIX)


def test_shard_grad_op_run_as_full_shard() -> None:
    """FINDINGS.md's second: a strategy dropped on the way runs as FULL_SHARD."""
    assert mismatch(config(sharding="shard_grad_op", procs_per_node=2), facts()) == (
        "asked for sharding='shard_grad_op', the model is wrapped as 'full_shard' (FSDPBloomForCausalLM)" + SUFFIX)


def test_offload_missing() -> None:
    assert mismatch(config(**FULL_SHARD_2, offload=True), facts()) == (
        "asked for offload=True, applied offload=False" + SUFFIX)


def test_offload_that_was_not_asked_for() -> None:
    assert mismatch(config(**FULL_SHARD_2), facts(offload_applied=True)) == (
        "asked for offload=False, applied offload=True" + SUFFIX)


def test_the_wrong_mesh() -> None:
    """FINDINGS.md's third: HYBRID sized by the device count falls back to one flat group."""
    cfg = config(sharding="hybrid_shard", procs_per_node=4, hybrid_replicas=2)
    assert mismatch(cfg, facts(sharding_applied="hybrid_shard", mesh=[1, 4])) == (
        "asked for a 2x2 mesh, got [1, 4]" + SUFFIX)
    assert mismatch(cfg, facts(sharding_applied="hybrid_shard", mesh=[4, 1])) == (
        "asked for a 2x2 mesh, got [4, 1]" + SUFFIX)
    # two nodes of 2: one replica group per node unless hybrid_replicas says otherwise
    two_nodes = config(sharding="hybrid_shard", nodes=2, procs_per_node=2)
    check_applied(two_nodes, facts(sharding_applied="hybrid_shard", mesh=[2, 2]))
    assert mismatch(two_nodes, facts(sharding_applied="hybrid_shard", mesh=[1, 4])) == (
        "asked for a 2x2 mesh, got [1, 4]" + SUFFIX)


def test_activation_checkpointing_missing() -> None:
    assert mismatch(config(**FULL_SHARD_2, activation_checkpointing=True), facts()) == (
        "asked for activation_checkpointing=True, applied False" + SUFFIX)
    assert mismatch(config(sharding="ddp", procs_per_node=2, activation_checkpointing=True),
                    facts(sharding_applied="ddp", wrapper="DistributedDataParallel", mesh=None, blocks_wrapped=0,
                          wrapped_classes=[])) == "asked for activation_checkpointing=True, applied False" + SUFFIX


def test_activation_checkpointing_that_was_not_asked_for() -> None:
    assert mismatch(config(**FULL_SHARD_2), facts(activation_checkpointing_applied=True)) == (
        "asked for activation_checkpointing=False, applied True" + SUFFIX)


def test_the_wrong_block_class() -> None:
    # the course's own spelling asks for BloomBlock
    assert mismatch(config(**FULL_SHARD_2), facts(wrapped_classes=["BloomMLP"])) == (
        "asked to wrap ['BloomBlock'], wrapped ['BloomMLP']" + SUFFIX)
    assert mismatch(config(**FULL_SHARD_2), facts(wrapped_classes=[], blocks_wrapped=0)) == (
        "asked to wrap ['BloomBlock'], wrapped []" + SUFFIX)
    # the student's Hugging Face spelling names the class it asks for
    native = config(fsdp="full_shard auto_wrap", procs_per_node=2,
                    fsdp_config={"transformer_layer_cls_to_wrap": ["BloomBlock"]})
    check_applied(native, facts())
    assert mismatch(native, facts(wrapped_classes=["BloomBlock", "BloomAttention"])) == (
        "asked to wrap ['BloomBlock'], wrapped ['BloomBlock', 'BloomAttention']" + SUFFIX)


def test_no_wrap_that_wrapped_blocks() -> None:
    no_wrap = config(fsdp="full_shard", procs_per_node=2, fsdp_config={"auto_wrap_policy": "NO_WRAP"})
    check_applied(no_wrap, facts(blocks_wrapped=0, wrapped_classes=[]))
    assert mismatch(no_wrap, facts(blocks_wrapped=2, wrapped_classes=[])) == (
        "asked for NO_WRAP, 2 blocks were wrapped" + SUFFIX)


def test_a_students_wrap_function_is_not_held_to_the_block_class(tmp_path) -> None:  # noqa: ANN001
    """Their own fully_shard calls decide the units: what they wrapped is their answer, graded elsewhere."""
    cfg = config(**FULL_SHARD_2, wrap_function=f"{tmp_path / 'wrap.py'}:shard")
    check_applied(cfg, facts(wrapped_classes=["BloomMLP"], blocks_wrapped=0))


def test_every_difference_is_named_at_once() -> None:
    cfg = config(sharding="hybrid_shard", procs_per_node=4, hybrid_replicas=2, offload=True,
                 activation_checkpointing=True)
    assert mismatch(cfg, facts(mesh=[1, 4], wrapped_classes=["BloomMLP"])) == (
        "asked for sharding='hybrid_shard', the model is wrapped as 'full_shard' (FSDPBloomForCausalLM); "
        "asked for offload=True, applied offload=False; asked for a 2x2 mesh, got [1, 4]; "
        "asked for activation_checkpointing=True, applied False; "
        "asked to wrap ['BloomBlock'], wrapped ['BloomMLP']" + SUFFIX)
