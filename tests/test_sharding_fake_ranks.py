"""What a run on several ranks reads back from its wrapped model (`sharding.describe_applied`), in this process:
one rank of a larger world on the fake process group (collectives return at once; fully_shard shards for real,
so shapes, counts and meshes are those of the real run's rank). The tiny BLOOM: V 1024, h 96, 2 blocks,
P = 322,368. The real multi-process runs are tests/test_fsdp_config.py's."""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from typing import Iterator

import pytest

torch = pytest.importorskip("torch")

from workshop.grading import fsdp_rules  # noqa: E402
from workshop.training import sharding, torch_private  # noqa: E402
from tests.test_sharding_read_back import tiny  # noqa: E402 - the seeded tiny BLOOM, defined once

EMBEDDING = "transformer.word_embeddings.weight"


@contextmanager
def rank_of(world_size: int, rank: int) -> Iterator[None]:
    """This process as `rank` of a fake world of `world_size` ranks, for the block's length."""
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already up in this process")
    dist.init_process_group("fake", store=torch_private.fake_store(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def blocks_then_root(model: "torch.nn.Module", **kw: object) -> "torch.nn.Module":
    from torch.distributed.fsdp import fully_shard

    for block in model.transformer.h:
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    return model


def test_the_last_of_3_ranks_holds_its_short_chunk_and_stores_it_padded() -> None:
    """1024 embedding rows on 3 ranks: chunks of 342, rank 2 holds 340 and stores 342 (equal all-gather
    bytes); its parameter count is the chunk rule's (fsdp_rules.params_on_rank), the one notebook 03 grades."""
    with rank_of(3, 2):
        model = blocks_then_root(tiny())
        info = sharding.describe_applied(model)
        shapes = {n: list(p.shape) for n, p in tiny().named_parameters()}
    assert info["mesh"] == [1, 3] and info["sharding_applied"] == "full_shard"
    assert info["param_shapes"][EMBEDDING] == [1024, 96]
    assert info["local_shapes"][EMBEDDING] == [340, 96] and info["stored_shapes"][EMBEDDING] == [342, 96]
    assert info["local_shapes"]["transformer.h.0.input_layernorm.weight"] == [32]     # 96 rows divide evenly
    assert info["stored_shapes"]["transformer.h.0.input_layernorm.weight"] == [32]
    assert info["params_local"] == fsdp_rules.params_on_rank(shapes, 3, 2) == 107_328
    # the summary is JSON: whole numbers of rows, never 342.0
    assert json.dumps(info["stored_shapes"][EMBEDDING]) == "[342, 96]"


def test_full_shard_on_4_ranks_holds_a_quarter() -> None:
    with rank_of(4, 0):
        info = sharding.describe_applied(blocks_then_root(tiny()))
    assert (info["mesh"], info["sharding_applied"], info["params_local"]) == ([1, 4], "full_shard", 322_368 // 4)
    assert info["local_shapes"][EMBEDDING] == [256, 96]


@pytest.mark.parametrize("reshard, strategy", [(True, "hybrid_shard"), (False, "hybrid_shard_grad_op")])
def test_a_2_by_2_mesh_reads_back_as_hybrid(reshard: bool, strategy: str) -> None:
    """Replicas x shard: each rank holds 1/2 (its shard group's share), on the mesh [2, 2]."""
    from torch.distributed.device_mesh import init_device_mesh

    with rank_of(4, 3):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_replicate", "dp_shard"))
        info = sharding.describe_applied(blocks_then_root(tiny(), mesh=mesh, reshard_after_forward=reshard))
    assert (info["mesh"], info["sharding_applied"], info["reshard_after_forward"]) == ([2, 2], strategy, reshard)
    assert info["local_shapes"][EMBEDDING] == [512, 96] and info["params_local"] == 322_368 // 2


def test_ddp_on_2_ranks_reads_back_as_ddp() -> None:
    from torch.nn.parallel import DistributedDataParallel

    with rank_of(2, 1):
        model = tiny()
        info = sharding.describe_applied(model, DistributedDataParallel(model))
    assert (info["wrapper"], info["sharding_applied"], info["mesh"]) == ("DistributedDataParallel", "ddp", None)
    assert info["params_local"] == 322_368                          # a whole replica


def test_only_the_root_wrapped_is_one_unit_and_no_block() -> None:
    """NO_WRAP: one unit, the root, whose resharding stands for the strategy."""
    from torch.distributed.fsdp import fully_shard

    with rank_of(2, 0):
        model = tiny()
        fully_shard(model)
        info = sharding.describe_applied(model)
    assert (info["fsdp_units"], info["blocks_wrapped"], info["wrapped_classes"]) == (1, 0, [])
    assert (info["sharding_applied"], info["mesh"]) == ("full_shard", [1, 2])


def test_the_embedding_and_final_norm_tail_is_one_unit_named_apart_from_the_blocks() -> None:
    """accelerate shards the embedding and the final norm together: one parameter group for two modules,
    counted once, and named as the units that are not blocks."""
    from torch.distributed.fsdp import fully_shard

    with rank_of(2, 0):
        model = tiny()
        fully_shard([model.transformer.word_embeddings, model.transformer.ln_f])
        info = sharding.describe_applied(blocks_then_root(model))
    assert info["fsdp_units"] == 4                                  # root, the tail, 2 blocks
    assert info["other_units"] == ["Embedding", "LayerNorm"] and info["wrapped_classes"] == ["BloomBlock"]


def test_units_with_different_precision_policies_read_back_as_mixed() -> None:
    """`mixed`, which the loss tolerance reads as the loosest dtype (workshop.grading.consistency)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    with rank_of(2, 0):
        model = tiny()
        fully_shard(model.transformer.h[0], mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
        fully_shard(model.transformer.h[1])
        fully_shard(model)
        info = sharding.describe_applied(model)
    assert (info["mp_param_dtype"], info["mp_reduce_dtype"]) == ("mixed", None)


def test_a_torch_without_fsdp2s_private_state_says_what_it_could_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run trains on and says so; check_applied then has nothing to compare and lets it."""
    from workshop.training.config import RunConfig

    def missing(module: object) -> None:
        raise torch_private.NotOnThisTorch("FSDPState._fsdp_param_group is missing")

    monkeypatch.setattr(torch_private, "_NOT_MEASURED", [])
    monkeypatch.setattr(torch_private, "fsdp_param_group_of", missing)
    with rank_of(2, 0):
        info = sharding.describe_applied(blocks_then_root(tiny()))
    assert info["not_measured"] == (f"not measured on this torch ({torch.__version__}): the applied FSDP strategy "
                                    "(read back): FSDPState._fsdp_param_group is missing")
    assert info["sharding_applied"] is None and info["blocks_wrapped"] == 2
    sharding.check_applied(RunConfig(sharding="full_shard", procs_per_node=2).validate(), info)


def test_stored_shapes_of_a_scalar_and_of_an_empty_row() -> None:
    """A scalar parameter has no rows; a parameter of zero-width rows is its shape (no division by zero)."""
    assert sharding.stored_shape(torch.nn.Parameter(torch.tensor(2.0))) == []
    assert sharding.stored_shape(torch.nn.Parameter(torch.zeros(4, 0))) == [4, 0]
    assert sharding.stored_shape(torch.nn.Parameter(torch.zeros(3, 5))) == [3, 5]
    assert math.prod(sharding.stored_shape(torch.nn.Parameter(torch.zeros(6)))) == 6
