"""What a run reads back from its wrapped model (`sharding.describe_applied`) and the Trainer arguments a
config becomes, in this process: a one-rank gloo group and a tiny BLOOM that fully_shard really wraps.
Every expected value is written out (the tiny model: V 1024, h 96, 2 blocks, P = 322,368). The
multi-rank facts (a shard per rank, a 2-D mesh) are the real runs' (tests/test_fsdp_config.py)."""

from __future__ import annotations

from typing import Iterator

import pytest

torch = pytest.importorskip("torch")

from workshop.training import sharding  # noqa: E402
from workshop.training.config import ConfigError, RunConfig  # noqa: E402
from workshop.training.fsdp_arguments import native_fsdp_arguments  # noqa: E402


@pytest.fixture(scope="module")
def one_rank() -> Iterator[None]:
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already up in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def tiny() -> "torch.nn.Module":
    from transformers import BloomConfig, BloomForCausalLM

    from workshop.training import models

    torch.manual_seed(0)
    return BloomForCausalLM(BloomConfig(**models.TINY))


def wrapped(reshard: bool = True, offload: bool = False, mp: bool = False,
            checkpoint: bool = False) -> "torch.nn.Module":
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    model = tiny()
    kw = {"reshard_after_forward": reshard}
    if offload:
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=False)
    if mp:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if checkpoint:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        for i, block in enumerate(model.transformer.h):
            model.transformer.h[i] = checkpoint_wrapper(block)
    for block in model.transformer.h:
        fully_shard(getattr(block, "_checkpoint_wrapped_module", block), **kw)
    fully_shard(model, **{**kw, "reshard_after_forward": True})
    return model


def test_a_full_shard_model_read_back(one_rank) -> None:  # noqa: ANN001
    info = sharding.describe_applied(wrapped())
    assert info["wrapper"] == "FSDPBloomForCausalLM"
    assert info["sharding_applied"] == "full_shard" and info["reshard_after_forward"] is True
    assert info["fsdp_unit_names"] == ["", "transformer.h.0", "transformer.h.1"]
    assert info["fsdp_units"] == 3 and info["blocks_wrapped"] == 2
    assert info["wrapped_classes"] == ["BloomBlock"] and info["other_units"] == []
    assert info["mesh"] == [1, 1] and info["offload_applied"] is False
    assert info["mp_param_dtype"] is None and info["mp_reduce_dtype"] is None
    assert info["activation_checkpointing_applied"] is False
    assert info["params_local"] == 322_368                       # one rank holds every element
    # the probed parameters: those outside the blocks and the first block's
    assert sorted(info["param_shapes"]) == sorted(info["local_shapes"])
    assert info["param_shapes"]["transformer.word_embeddings.weight"] == [1024, 96]
    assert info["param_shapes"]["transformer.h.0.self_attention.query_key_value.weight"] == [288, 96]
    assert not any(".1." in name for name in info["param_shapes"])


def test_shard_grad_op_offload_and_mixed_precision_read_back(one_rank) -> None:  # noqa: ANN001
    info = sharding.describe_applied(wrapped(reshard=False, offload=True, mp=True))
    assert info["sharding_applied"] == "shard_grad_op" and info["reshard_after_forward"] is False
    assert info["offload_applied"] is True
    assert (info["mp_param_dtype"], info["mp_reduce_dtype"]) == ("bfloat16", "float32")


def test_checkpointed_blocks_read_back(one_rank) -> None:  # noqa: ANN001
    model = wrapped(checkpoint=True)
    assert sharding.checkpointing_applied(model)
    info = sharding.describe_applied(model)
    assert info["activation_checkpointing_applied"] is True
    assert info["blocks_wrapped"] == 2 and info["wrapped_classes"] == ["BloomBlock"]   # the class inside the wrapper


def test_a_plain_model_is_none() -> None:
    model = tiny()
    info = sharding.describe_applied(model)
    assert (info["wrapper"], info["sharding_applied"], info["mesh"], info["fsdp_units"]) == (
        "BloomForCausalLM", "none", None, 0)
    assert info["params_local"] == sharding.local_parameter_count(model) == 322_368
    assert not sharding.checkpointing_applied(model)


def test_block_classes_and_a_wrong_one() -> None:
    model = tiny()
    assert sharding.block_classes(model) == {"BloomBlock": 2}
    right = RunConfig(fsdp="full_shard auto_wrap", procs_per_node=2,
                      fsdp_config={"transformer_layer_cls_to_wrap": ["BloomBlock"]}).validate()
    sharding.check_block_classes(right, model)
    with pytest.raises(ConfigError) as e:
        sharding.check_block_classes(right.replace(fsdp_config={"transformer_layer_cls_to_wrap": ["BloomLayer"]}),
                                     model)
    assert str(e.value) == ("config field 'fsdp_config.transformer_layer_cls_to_wrap': BloomForCausalLM has no "
                            "module of class 'BloomLayer' (class names are case-sensitive). Fix: name the class of "
                            "the model's repeated blocks: BloomBlock (2 of them) (its _no_split_modules: "
                            "{'BloomBlock'})")
    with pytest.raises(ConfigError, match="'BloomMLP' is a part inside each block, not the transformer block itself"):
        sharding.check_block_classes(right.replace(fsdp_config={"transformer_layer_cls_to_wrap": ["BloomMLP"]}), model)
    sharding.check_block_classes(RunConfig().validate(), model)          # no FSDP: nothing to check


def test_the_course_spelling_becomes_hugging_faces_arguments() -> None:
    full = RunConfig(sharding="full_shard", procs_per_node=2).validate()
    assert sharding.trainer_sharding_kwargs(full) == {"fsdp": True, "fsdp_config": {
        "version": 2, "reshard_after_forward": True, "cpu_offload": False, "activation_checkpointing": False,
        "state_dict_type": "SHARDED_STATE_DICT", "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "transformer_layer_cls_to_wrap": ["BloomBlock"]}}
    sgo = native_fsdp_arguments(RunConfig(sharding="shard_grad_op", procs_per_node=2, offload=True,
                                                   activation_checkpointing=True).validate())
    assert sgo[1]["reshard_after_forward"] is False and sgo[1]["cpu_offload"] is True
    assert sgo[1]["activation_checkpointing"] is True
    assert sharding.trainer_sharding_kwargs(RunConfig(sharding="ddp", procs_per_node=2).validate()) == {}
    hybrid = sharding.trainer_sharding_kwargs(RunConfig(sharding="hybrid_shard", procs_per_node=4,
                                                        hybrid_replicas=2).validate())
    pc = hybrid["parallelism_config"]
    assert (pc.dp_replicate_size, pc.dp_shard_size) == (2, 2) and hybrid["fsdp_config"]["reshard_after_forward"]
    zero2 = native_fsdp_arguments(RunConfig(sharding="hybrid_shard_grad_op", procs_per_node=4,
                                                     hybrid_replicas=2).validate())
    assert zero2[1]["reshard_after_forward"] is False


def test_a_students_own_arguments_go_as_written(tmp_path) -> None:  # noqa: ANN001
    native = RunConfig(fsdp="full_shard auto_wrap", procs_per_node=2,
                       fsdp_config={"transformer_layer_cls_to_wrap": ["BloomBlock"]}).validate()
    assert native_fsdp_arguments(native) == ("full_shard auto_wrap", {
        "transformer_layer_cls_to_wrap": ["BloomBlock"], "state_dict_type": "SHARDED_STATE_DICT"})
    full_state = native.replace(fsdp_config={"state_dict_type": "FULL_STATE_DICT"})
    assert native_fsdp_arguments(full_state)[1] == {"state_dict_type": "FULL_STATE_DICT"}
    switch = RunConfig(fsdp="true", procs_per_node=2).validate()
    assert native_fsdp_arguments(switch)[0] is True
    own = RunConfig(sharding="full_shard", procs_per_node=2, wrap_function=f"{tmp_path / 'w.py'}:wrap").validate()
    args = native_fsdp_arguments(own)[1]
    assert args["auto_wrap_policy"] == "NO_WRAP" and "transformer_layer_cls_to_wrap" not in args
    assert sharding.requested(own).auto_wrap_policy == "NO_WRAP"
    assert sharding.requested(RunConfig().validate()) is None


def test_blocks_that_disagree_read_back_as_mixed(one_rank) -> None:  # noqa: ANN001
    from torch.distributed.fsdp import fully_shard

    model = tiny()
    fully_shard(model.transformer.h[0], reshard_after_forward=True)
    fully_shard(model.transformer.h[1], reshard_after_forward=False)
    fully_shard(model)
    info = sharding.describe_applied(model)
    assert info["reshard_after_forward"] == "mixed" and info["sharding_applied"] == "shard_grad_op"


def test_a_ddp_wrapper_on_one_rank_reads_back_as_none(one_rank) -> None:  # noqa: ANN001
    """accelerate wraps even one torchrun process in DDP: one rank syncs nothing, so it is 'none'."""
    from torch.nn.parallel import DistributedDataParallel

    model = tiny()
    info = sharding.describe_applied(model, DistributedDataParallel(model))
    assert (info["wrapper"], info["sharding_applied"], info["offload_applied"], info["wrapped_classes"]) == (
        "DistributedDataParallel", "none", False, [])
    assert info["reshard_after_forward"] is None and info["fsdp_unit_names"] == [] and info["blocks_wrapped"] == 0


def test_a_plain_model_reports_every_field_with_its_empty_value() -> None:
    """The run summary has the same fields whatever ran: nothing wrapped reads as no units, no precision policy."""
    info = sharding.describe_applied(tiny())
    assert {k: v for k, v in info.items() if k not in ("param_shapes", "local_shapes", "stored_shapes")} == {
        "wrapper": "BloomForCausalLM", "sharding_applied": "none", "reshard_after_forward": None,
        "offload_applied": False, "mesh": None, "fsdp_units": 0, "params_local": 322_368, "fsdp_unit_names": [],
        "blocks_wrapped": 0, "wrapped_classes": [], "other_units": [], "mp_param_dtype": None,
        "mp_reduce_dtype": None, "activation_checkpointing_applied": False}
    assert info["param_shapes"] == info["local_shapes"] == info["stored_shapes"]    # unsharded: all the same


def test_the_trainers_own_checkpointing_counts_and_a_module_without_its_flag_is_not() -> None:
    """gradient_checkpointing_enable() (the Trainer's `gradient_checkpointing`) sets the model's flag; a plain
    torch module, which has no such flag, is not checkpointed."""
    model = tiny()
    model.gradient_checkpointing_enable()
    assert sharding.checkpointing_applied(model) is True
    assert sharding.checkpointing_applied(torch.nn.Linear(2, 2)) is False


def test_a_wrong_block_class_names_every_wrong_name_and_every_block_class() -> None:
    model = tiny()
    cfg = RunConfig(fsdp="full_shard auto_wrap", procs_per_node=2,
                    fsdp_config={"transformer_layer_cls_to_wrap": ["BloomLayer", "GPT2Block"]}).validate()
    with pytest.raises(ConfigError, match="has no module of class 'BloomLayer', 'GPT2Block' "):
        sharding.check_block_classes(cfg, model)
    with pytest.raises(ConfigError, match="^config field .*: 'BloomMLP', 'BloomAttention' is a part inside each block"):
        sharding.check_block_classes(cfg.replace(fsdp_config={
            "transformer_layer_cls_to_wrap": ["BloomMLP", "BloomAttention"]}), model)


def test_a_model_without_repeated_blocks_says_none_were_found() -> None:
    """A model with no ModuleList (and no _no_split_modules) still gets a sentence, not an AttributeError;
    one with two kinds of repeated members lists both."""
    cfg = RunConfig(fsdp="full_shard auto_wrap", procs_per_node=2,
                    fsdp_config={"transformer_layer_cls_to_wrap": ["BloomBlock"]}).validate()
    with pytest.raises(ConfigError) as e:
        sharding.check_block_classes(cfg, torch.nn.Sequential(torch.nn.Linear(2, 2)))
    assert str(e.value) == ("config field 'fsdp_config.transformer_layer_cls_to_wrap': Sequential has no module of "
                            "class 'BloomBlock' (class names are case-sensitive). Fix: name the class of the model's "
                            "repeated blocks: none found (its _no_split_modules: None)")
    two = torch.nn.Module()
    two.layers = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)])
    two.acts = torch.nn.ModuleList([torch.nn.ReLU()])
    with pytest.raises(ConfigError, match=r"repeated blocks: Linear \(2 of them\), ReLU \(1 of them\) \(its"):
        sharding.check_block_classes(cfg, two)
