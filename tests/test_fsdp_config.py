"""Hugging Face's fsdp/fsdp_config, a student's wrap function and the exercise rules, before any job runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workshop.grading import consistency, fsdp_rules
from workshop.training import counted_steps, wrap_function
from workshop.training.config import ConfigError, load_config
from workshop.training.fsdp_arguments import native_fsdp_arguments
from workshop.training.sharding import requested, trainer_sharding_kwargs

ROOT = Path(__file__).resolve().parent.parent

BLOOM_FSDP_CONFIG = {"version": 2, "transformer_layer_cls_to_wrap": ["BloomBlock"], "reshard_after_forward": False,
                     "cpu_offload": True, "activation_checkpointing": True}


def test_native_arguments_set_the_strategy_and_go_to_the_trainer_as_written() -> None:
    cfg = load_config(overrides={"fsdp": "true", "fsdp_config": BLOOM_FSDP_CONFIG, "procs_per_node": 2})
    assert (cfg.sharding, cfg.offload, cfg.activation_checkpointing) == ("shard_grad_op", True, True)
    fsdp, fsdp_config = native_fsdp_arguments(cfg)
    assert fsdp is True and fsdp_config == {**BLOOM_FSDP_CONFIG, "state_dict_type": "SHARDED_STATE_DICT"}
    assert trainer_sharding_kwargs(cfg)["fsdp_config"] == fsdp_config
    # changing the native arguments later re-derives the course's fields from them
    assert cfg.replace(fsdp_config={"reshard_after_forward": True}).sharding == "full_shard"


def test_the_course_sharding_is_spelled_as_hf_arguments_one_path() -> None:
    cfg = load_config(overrides={"sharding": "shard_grad_op", "offload": True, "procs_per_node": 2})
    fsdp, fsdp_config = native_fsdp_arguments(cfg)
    assert fsdp is True and fsdp_config["transformer_layer_cls_to_wrap"] == ["BloomBlock"]
    req = requested(cfg)
    assert (req.sharding, req.offload, req.layer_classes) == ("shard_grad_op", True, ("BloomBlock",))


def test_fsdp_config_from_json_text_or_file(tmp_path: Path) -> None:
    f = tmp_path / "fsdp.json"
    f.write_text(json.dumps({"fsdp_reshard_after_forward": "false"}))
    assert load_config(overrides={"fsdp": "true", "fsdp_config": str(f)}).sharding == "shard_grad_op"
    assert load_config(overrides={"fsdp": "true", "fsdp_config": '{"cpu_offload": true}'}).offload is True


def test_steps_own_sharding_yields_to_the_students_native_arguments() -> None:
    from workshop.slurm.profiles import load_profile
    from workshop.slurm.steps import step_config

    cfg = step_config("fsdp_1gpu", load_profile("local"), {"fsdp": "shard_grad_op auto_wrap"})
    assert cfg.sharding == "shard_grad_op"


@pytest.mark.parametrize("overrides,field,fix_word", [
    ({"fsdp": "true", "fsdp_config": {"offload_params": True}}, "fsdp_config.offload_params", "cpu_offload"),
    ({"fsdp": "true", "fsdp_config": {"transformer_cls_to_wrap": ["BloomBlock"]}}, "fsdp_config.transformer_cls_to_wrap",
     "transformer_layer_cls_to_wrap"),
    ({"fsdp_config": {"version": 2}}, "fsdp_config", "fsdp=true"),
    ({"fsdp": "true", "fsdp_config": {"version": 1}}, "fsdp_config.version", "version 2"),
    ({"fsdp": "hybrid_shard auto_wrap", "procs_per_node": 4}, "fsdp", "hybrid_replicas"),
    ({"fsdp": "shard_grad_op", "fsdp_config": {"reshard_after_forward": True}}, "fsdp_config.reshard_after_forward",
     "agree"),
    ({"fsdp": "true", "sharding": "ddp", "procs_per_node": 2}, "sharding", "one way"),
    ({"fsdp": "true", "fsdp_config": {"transformer_layer_cls_to_wrap": "BloomBlock", "auto_wrap_policy": "NO_WRAP"}},
     "fsdp_config.transformer_layer_cls_to_wrap", "TRANSFORMER_BASED_WRAP"),
    ({"fsdp": "true", "fsdp_config": "{not json"}, "fsdp_config", "syntax"),
    ({"fsdp": "true", "wrap_function": "w.py:wrap"}, "wrap_function", "choose one"),
    ({"wrap_function": "w.py:wrap"}, "wrap_function", "sharding=full_shard"),
    ({"wrap_function": "wrap", "sharding": "full_shard"}, "wrap_function", "my_wrap.py:shard_model"),
    ({"global_batch": 16, "batch_size": 4, "grad_acc": 2}, "grad_acc", "either grad_acc"),
], ids=["offload_params", "accelerate-name", "config-without-fsdp", "fsdp1", "hybrid-word", "contradiction",
        "two-spellings", "cls-with-no-wrap", "bad-json", "wrap-and-fsdp", "wrap-without-fsdp", "wrap-spec",
        "grad-acc-ignored"])
def test_what_hf_would_ignore_or_reject_is_refused_at_submit(overrides: dict, field: str, fix_word: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(overrides=overrides)
    assert err.value.field == field
    assert fix_word in err.value.fix


def test_wrap_function_travels_as_a_file_the_job_runs(tmp_path: Path) -> None:
    def shard_model(model):  # noqa: ANN001, ANN202 - written the way a notebook cell would
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)  # noqa: F821
        for block in model.transformer.h:
            fully_shard(block, mp_policy=policy)  # noqa: F821
        fully_shard(model, mp_policy=policy)  # noqa: F821

    spec = wrap_function.write_source(shard_model, tmp_path / "my_wrap.py")
    assert spec == f"{tmp_path / 'my_wrap.py'}:shard_model"
    assert callable(wrap_function.load(spec))            # the header's imports make the file importable alone
    cfg = load_config(overrides={"sharding": "full_shard", "wrap_function": spec})
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    carried = wrap_function.carry(cfg, job_dir)
    assert carried.wrap_function == f"{job_dir / 'wrap_function.py'}:shard_model"
    assert wrap_function.digest(carried) == wrap_function.digest(cfg)
    (tmp_path / "my_wrap.py").write_text("def other(model):\n    pass\n")
    assert wrap_function.digest(cfg) != wrap_function.digest(carried)   # the job keeps what was submitted
    with pytest.raises(ConfigError, match="defines no function 'shard_model'.*other"):
        wrap_function.load(spec)


def test_an_edited_wrap_function_is_another_job(tmp_path: Path) -> None:
    from workshop.slurm.profiles import load_profile
    from workshop.slurm.jobs import job_key

    f = tmp_path / "w.py"
    f.write_text("def wrap(model):\n    pass\n")
    cfg = load_config(overrides={"sharding": "full_shard", "wrap_function": f"{f}:wrap"})
    profile = load_profile("local")
    first = job_key("fsdp_1gpu", cfg, profile, "n")
    f.write_text("def wrap(model):\n    return None\n")
    assert job_key("fsdp_1gpu", cfg, profile, "n") != first


@pytest.mark.parametrize("rows,world,expected", [
    (1024, 3, [342, 342, 340]), (96, 3, [32, 32, 32]), (4, 3, [2, 2, 0]), (5, 4, [2, 2, 1, 0]), (7, 1, [7]),
    (250880, 3, [83627, 83627, 83626]),
])
def test_shard0_rule_chunks_dim0_like_torch_chunk(rows: int, world: int, expected: list[int]) -> None:
    import torch

    got = [fsdp_rules.shard0_local_shape((rows, 5), world, r) for r in range(world)]
    assert [g[0] for g in got] == expected and all(g[1:] == (5,) for g in got)
    chunks = [c.shape[0] for c in torch.arange(rows).chunk(world)]
    assert expected == chunks + [0] * (world - len(chunks))


def test_global_batch_and_steps_follow_the_trainers_arithmetic() -> None:
    assert counted_steps.global_batch(4, 2, 2) == 16
    assert counted_steps.expected_steps(24, 2, 2, 1, 2) == 12
    assert counted_steps.expected_steps(48, 1, 4, 3, 2) == 2     # 6 micro-batches a rank, a step per 3
    assert counted_steps.expected_steps(48, 1.5, 4, 1, 2) == 9


def _summary(precision: str = "fp32", param: str | None = None, reduce: str | None = None, steps: int = 12,
             device: str = "cuda") -> dict:
    return {"precision": precision, "mp_param_dtype": param, "mp_reduce_dtype": reduce, "device": device, "steps": steps}


def test_tolerance_follows_the_precision_and_the_length_each_pair_was_measured_at() -> None:
    measured = consistency.MEASURED_DRIFT
    ddp_bf16 = _summary("bf16")                                           # autocast bf16, fp32 all-reduce
    fsdp_bf16 = _summary("bf16", "bfloat16", "bfloat16")                  # FSDP2 bf16 params and reduce
    assert consistency.arithmetic(ddp_bf16) == {"compute": "bfloat16", "reduce": "float32"}
    assert consistency.arithmetic(fsdp_bf16) == {"compute": "bfloat16", "reduce": "bfloat16"}
    assert consistency.arithmetic(_summary("fp32", "bfloat16")) == {"compute": "bfloat16", "reduce": "bfloat16"}
    assert not consistency.same_arithmetic(fsdp_bf16, ddp_bf16)
    # the same sums on a CPU: deterministic kernels, equal losses; the floor
    cpu = _summary(device="cpu")
    assert consistency.consistency_tolerance(cpu, cpu) == consistency.FP32_RTOL
    # everywhere else: MARGIN x the drift measured at the length that covers the runs
    def tol(a: dict, b: dict) -> float:
        return consistency.consistency_tolerance(a, b)

    def expected(dtype: str, length: int) -> float:
        return max(consistency.FP32_RTOL, consistency.MARGIN * measured[dtype][length])

    assert tol(fsdp_bf16, ddp_bf16) == expected("bfloat16", 12)
    assert tol({**fsdp_bf16, "steps": 6}, {**ddp_bf16, "steps": 6}) == expected("bfloat16", 12)
    assert tol({**fsdp_bf16, "steps": 125}, ddp_bf16) == expected("bfloat16", 125)
    assert tol(_summary("fp16", steps=125), _summary("fp16", "float16", "float16", steps=125)) == expected("float16", 125)
    assert tol(_summary(), _summary()) == expected("float32", 12)         # two fp32 GPU runs: not deterministic
    ok, why = consistency.losses_consistent({**fsdp_bf16, "steps": 250, "eval_losses": [5.0]},
                                            {**ddp_bf16, "steps": 250, "eval_losses": [5.0]})
    assert ok and "measured at 125 steps, extrapolated to 250 steps" in why
    ok, _ = consistency.losses_consistent({**cpu, "eval_losses": [5.0, 4.0]}, {**cpu, "eval_losses": [5.05, 4.04]})
    assert not ok


def test_the_tolerances_are_the_committed_measurement_times_the_margin() -> None:
    """consistency.MEASURED_DRIFT is benchmarks/cpu/consistency_drift-*.json's worst honest drift at each
    precision and length; every honest pair measured passes, the stress regime is reported only."""
    path = sorted((ROOT / "benchmarks" / "cpu").glob("consistency_drift-*.json"))[-1]
    result = json.loads(path.read_text())
    assert result["margin"] == consistency.MARGIN
    dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
    table = {dtype[p]: {e["steps"]: e["worst_drift"] for e in by.values() if e["used_for_bound"]}
             for p, by in result["by_precision"].items()}
    assert table == consistency.MEASURED_DRIFT, path.name
    for pair in result["pairs"]:
        if pair.get("other_model") or pair["length"] == "stress":
            continue
        precision = pair["precision"]
        a = _summary(precision, steps=pair["steps"])
        b = _summary(precision, dtype[precision] if precision != "fp32" else None, steps=pair["steps"])
        assert pair["drift"] <= consistency.consistency_tolerance(a, b), pair
