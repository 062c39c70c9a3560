"""Notebook 02-04's exercises run what the student wrote: real multi-rank runs on gloo (tests/runs.py), read back from summary.json."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.runs import RunCache, clean_env, fork
from workshop.slurm.ports import rendezvous_port
from workshop.grading import consistency, fsdp_rules
from workshop.training import wrap_function
from workshop.training.counted_steps import expected_steps

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
NATIVE_CONFIG = json.dumps({"version": 2, "transformer_layer_cls_to_wrap": ["BloomBlock"]})


def shard_model(model):  # noqa: ANN001, ANN201 - the notebook exercise's answer, as a student writes it
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)  # noqa: F821
    for block in model.transformer.h:
        fully_shard(block, mp_policy=policy)  # noqa: F821
    fully_shard(model, mp_policy=policy)  # noqa: F821


def forgets_to_shard(model):  # noqa: ANN001, ANN201
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16)  # noqa: F821, F841


def breaks(model):  # noqa: ANN001, ANN201
    for block in model.transformer.blocks:
        fully_shard(block)  # noqa: F821


@pytest.fixture(scope="module")
def wrap_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("wrap")


def test_hf_native_arguments_run_exactly_what_was_written(runs: RunCache) -> None:
    native = runs.get("--fsdp", "shard_grad_op auto_wrap", "--fsdp-config", NATIVE_CONFIG, nproc=2).summary
    assert native["hf_fsdp"] == "shard_grad_op auto_wrap"
    assert native["hf_fsdp_config"] == {**json.loads(NATIVE_CONFIG), "state_dict_type": "SHARDED_STATE_DICT"}
    assert native["wrapper"] == "FSDPBloomForCausalLM" and native["sharding_applied"] == "shard_grad_op"
    assert native["reshard_after_forward"] is False and native["offload_applied"] is False
    assert native["blocks_wrapped"] == native["n_layer"] == 2 and native["wrapped_classes"] == ["BloomBlock"]
    # one code path: the course's own spelling of the same strategy trains identically
    course = runs.get("--sharding", "shard_grad_op", nproc=2).summary
    assert native["eval_losses"] == course["eval_losses"]


def test_a_wrong_block_class_fails_the_job_with_the_classes_the_model_has(tmp_path: Path) -> None:
    from workshop.slurm import JobState, submit

    job = submit("fsdp_1gpu", profile="local", jobs_dir=tmp_path / "jobs",
                 overrides={"fsdp": "full_shard auto_wrap", "fsdp_config": {"transformer_layer_cls_to_wrap": ["BloomLayer"]}})
    assert job.wait(timeout=300) is JobState.FAILED and job.summary() is None
    assert "config field 'fsdp_config.transformer_layer_cls_to_wrap'" in job.reason
    assert "'BloomLayer'" in job.reason and "BloomBlock (2 of them)" in job.reason


def test_a_students_wrap_function_runs_and_shards_as_the_chunk_rule_predicts(runs: RunCache, wrap_dir: Path) -> None:
    spec = wrap_function.write_source(shard_model, wrap_dir / "shard_model.py")
    s = runs.get("--sharding", "full_shard", "--wrap-function", spec, nproc=3).summary
    assert s["wrap_function"] == spec
    assert s["wrap_function_sha256"] == hashlib.sha256((wrap_dir / "shard_model.py").read_bytes()).hexdigest()
    assert s["fsdp_unit_names"] == ["", "transformer.h.0", "transformer.h.1"] and s["other_units"] == []
    assert (s["mp_param_dtype"], s["mp_reduce_dtype"]) == ("bfloat16", "float32")
    assert sum(s["params_local_per_rank"]) == s["params_total"]
    uneven = 0
    for name, shape in s["param_shapes"].items():
        predicted = [list(fsdp_rules.shard0_local_shape(shape, 3, r)) for r in range(3)]
        assert s["local_shapes_per_rank"][name] == predicted, name
        uneven += shape[0] % 3 != 0
    assert s["local_shapes_per_rank"]["transformer.word_embeddings.weight"] == [[342, 96], [342, 96], [340, 96]]
    assert uneven >= 1
    # FSDP2 stores every rank's chunk padded to ceil(rows / 3): the last rank's 340-row parameter is a view
    # of a 342-row buffer (notebook 02: the padding is stored, so that every rank sends equal bytes)
    for name, shape in s["param_shapes"].items():
        padded = [-(-shape[0] // 3), *shape[1:]]
        assert s["stored_shapes_per_rank"][name] == [padded] * 3, name
    assert s["stored_shapes_per_rank"]["transformer.word_embeddings.weight"] == [[342, 96]] * 3


@pytest.mark.parametrize("fn,message", [
    (forgets_to_shard, "forgets_to_shard(model) returned without sharding anything"),
    (breaks, "breaks(model) raised AttributeError"),
])
def test_a_wrap_function_that_does_not_shard_is_refused(wrap_dir: Path, fn, message: str) -> None:
    """The job calls `wrap_function.apply` before training; its ConfigError is the job's one-line error
    (exit 2, as the wrong block class above shows end to end)."""
    from workshop.training import models
    from workshop.training.config import ConfigError, load_config

    spec = wrap_function.write_source(fn, wrap_dir / f"{fn.__name__}.py")
    cfg = load_config(overrides={"sharding": "full_shard", "wrap_function": spec})
    model = models.build_model("tiny", models.load_tokenizer("tiny"), seed=1)
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        wrap_function.apply(cfg, model)
    assert err.value.field == "wrap_function" and "Fix: " in str(err.value)


def test_summary_shows_the_global_batch_each_run_really_trained(runs: RunCache, wrap_dir: Path) -> None:
    """Notebook 04: global batch = micro-batch x accumulation x world size, measured, and a wrong pair
    shows as another number of steps."""
    spec = wrap_function.write_source(shard_model, wrap_dir / "shard_model.py")
    seen = set()
    for flags, nproc in ((("--sharding", "ddp"), 2), (("--sharding", "full_shard", "--wrap-function", spec), 3)):
        s = runs.get(*flags, nproc=nproc).summary
        assert s["global_batch_measured"] == s["global_batch"] == s["batch_size"] * s["grad_acc"] * s["world_size"]
        assert s["steps"] == expected_steps(24, 2, s["batch_size"], s["grad_acc"], s["world_size"])
        assert s["samples_trained"] == 2 * 24
        seen.add(s["steps"])
    assert len(seen) == 2


def test_bf16_runs_agree_within_the_tolerance_their_arithmetic_allows(runs: RunCache) -> None:
    short = ("--train-size", "12", "--epochs", "1")
    ddp = runs.get("--sharding", "ddp", "--precision", "bf16", *short, nproc=2).summary
    fsdp = runs.get("--sharding", "full_shard", "--precision", "bf16", *short, nproc=2).summary
    # read back from the wrapped model: accelerate's FSDP2 policy reduces in bf16, DDP all-reduces fp32
    assert (fsdp["mp_param_dtype"], fsdp["mp_reduce_dtype"]) == ("bfloat16", "bfloat16")
    assert consistency.arithmetic(ddp) == {"compute": "bfloat16", "reduce": "float32"}
    ok, why = consistency.losses_consistent(ddp, fsdp)
    assert ok, why
    assert consistency.consistency_tolerance(ddp, fsdp) > consistency.FP32_RTOL


def readme_command(marker: str) -> str:
    """The command line of README's 'Training by hand' block that contains `marker`."""
    block = (ROOT / "README.md").read_text().split("## Training by hand", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return next(line.split("#", 1)[0].strip() for line in block.splitlines() if marker in line)


def test_torchrun_by_hand_takes_its_world_from_the_launcher(tmp_path: Path) -> None:
    """README's command, as written: no --procs-per-node, torchrun's 2 processes are the world."""
    command = readme_command("torchrun --nproc-per-node 2")
    assert command == ".venv/bin/torchrun --nproc-per-node 2 -m workshop.training.train --sharding full_shard"
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")     # the README's paths, but runs/latest lands in tmp
    env = {**clean_env(), "TRAIN_SIZE": "8", "EVAL_SIZE": "4", "NUM_EPOCHS": "1"}   # the seed's variables: small
    env["PET_MASTER_PORT"] = str(rendezvous_port())     # torchrun's own default for --master-port: no clash
    p = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    summary = json.loads((tmp_path / "runs" / "latest" / "summary.json").read_text())
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert summary["world_size"] == 2 and summary["sharding_applied"] == "full_shard"
    assert len(summary["params_local_per_rank"]) == 2


def test_a_config_that_fixes_another_world_still_stops(tmp_path: Path) -> None:
    (log,), rc = fork(["--sharding", "full_shard", "--procs-per-node", "1", "--output-dir", str(tmp_path)], nproc=2,
                      module="workshop.training.train").finish(300)     # 2 ranks as torchrun starts them
    assert rc != 0
    assert "the config asks for 1 processes (nodes=1 x procs_per_node=1) but 2 were launched" in log


def test_submit_carries_the_wrap_function_file_into_the_job_that_runs_it(tmp_path: Path) -> None:
    """The notebook's path: write the function's file, submit with wrap_function; the job runs its own
    copy, so editing the notebook's file afterwards changes neither the running job nor its record."""
    from workshop.slurm import JobState, submit

    spec = wrap_function.write_source(shard_model, tmp_path / "my_wrap.py")
    job = submit("fsdp_1gpu", profile="local", jobs_dir=tmp_path / "jobs",
                 overrides={"wrap_function": spec, "train_size": 8, "epochs": 1})
    copy = job.job_dir / wrap_function.JOB_FILE
    assert copy.read_bytes() == (tmp_path / "my_wrap.py").read_bytes()
    (tmp_path / "my_wrap.py").write_text("def shard_model(model):\n    pass\n")
    assert job.wait(timeout=300) is JobState.COMPLETED, job.tail(40)
    s = job.summary()
    assert s["wrap_function"] == f"{copy}:shard_model"
    assert s["wrap_function_sha256"] == hashlib.sha256(copy.read_bytes()).hexdigest()
    assert s["fsdp_unit_names"] == ["", "transformer.h.0", "transformer.h.1"] and s["mp_param_dtype"] == "bfloat16"
