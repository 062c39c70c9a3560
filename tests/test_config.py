"""Config precedence and the errors a student meets: each names the field and the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workshop.training.config import ConfigError, RunConfig, load_config, parse_assignments


def test_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text('[run]\nbatch_size = 2\nepochs = 3\nlearning_rate = 1e-4\n')
    cfg = load_config(file=f, env={"BATCH_SIZE": "6", "NUM_EPOCHS": "5"}, overrides={"batch_size": "8"})
    assert (cfg.batch_size, cfg.epochs, cfg.learning_rate) == (8, 5.0, 1e-4)
    assert cfg.max_length == RunConfig().max_length


def test_seed_env_variables() -> None:
    cfg = load_config(env={"MODEL_NAME": "bloom-560m-random", "MAX_LENGTH": "512", "TRAIN_SIZE": "40",
                           "EVAL_SIZE": "10", "GRAD_ACC": "4", "WEIGHT_DECAY": "0.01", "BF16": "1"})
    assert (cfg.model, cfg.max_length, cfg.train_size, cfg.eval_size, cfg.grad_acc, cfg.precision) == (
        "bloom-560m-random", 512, 40, 10, 4, "bf16")


def test_fsdp1_names_map_to_fsdp2() -> None:
    assert load_config(overrides={"sharding": "FULL_SHARD", "procs_per_node": 2}).sharding == "full_shard"
    assert load_config(overrides={"sharding": "NO_SHARD", "procs_per_node": 2}).sharding == "ddp"


def test_constant_global_batch_derives_grad_acc() -> None:
    base = {"global_batch": 32, "batch_size": 4, "sharding": "full_shard"}
    assert [load_config(overrides={**base, "procs_per_node": n}).effective_grad_acc for n in (1, 2, 4, 8)] == [
        8, 4, 2, 1]


@pytest.mark.parametrize("source,field,fix_word", [
    ({"overrides": {"batch_size": 0}}, "batch_size", "grad_acc"),
    ({"env": {"FP16": "1", "BF16": "1"}}, "precision", "only one"),
    ({"overrides": {"sharding": "hybrid_shard", "procs_per_node": 3, "hybrid_replicas": 2}}, "hybrid_shard",
     "multiple"),
    ({"overrides": {"sharding": "zero3"}}, "sharding", "full_shard"),
    ({"overrides": {"offload": True}}, "offload", "sharding=full_shard"),
    ({"overrides": {"sharding": "none", "procs_per_node": 2}}, "sharding", "ddp"),
    ({"overrides": {"global_batch": 10, "batch_size": 4}}, "global_batch", "multiple"),
    ({"overrides": {"batch_sise": 4}}, "batch_sise", "batch_size"),
    ({"overrides": {"epochs": "two"}}, "epochs", "number"),
    ({"env": {"BATCH_SIZE": "eight"}}, "batch_size", "whole number"),
    ({"overrides": {"precision": "fp8"}}, "precision", "bf16"),
], ids=["batch0", "fp16+bf16", "hybrid2x2on3", "unknown-strategy", "offload-no-shard", "none-multi",
        "global-batch", "typo", "epochs-text", "env-type", "precision"])
def test_bad_config_names_field_and_fix(source: dict, field: str, fix_word: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(**source)
    assert err.value.field == field
    assert fix_word in err.value.fix
    assert f"'{field}'" in str(err.value) and "Fix:" in str(err.value)


def test_set_assignments() -> None:
    assert parse_assignments(["batch-size=8", "offload=true", "model=tiny"]) == {
        "batch_size": 8, "offload": True, "model": "tiny"}
    with pytest.raises(ConfigError):
        parse_assignments(["batch_size"])


def test_train_help_documents_every_option() -> None:
    out = subprocess.run([sys.executable, "-m", "workshop.training.train", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for name in RunConfig.__dataclass_fields__:
        assert "--" + name.replace("_", "-") in out
    for flag in ("--model", "--sharding", "--offload", "--activation-checkpointing", "--epochs", "--batch-size",
                 "--grad-acc", "--seed", "--output-dir"):
        assert flag in out


def test_bad_flag_exits_2_with_message_and_no_traceback(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "workshop.training.train", "--batch-size", "0", "--output-dir",
                        str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 2
    assert "config field 'batch_size'" in p.stderr and "Traceback" not in p.stderr


def test_world_size_mismatch_is_reported(tmp_path: Path) -> None:
    """A config for 2 processes started as one plain process says how to launch it."""
    p = subprocess.run([sys.executable, "-m", "workshop.training.train", "--sharding", "full_shard", "--procs-per-node",
                        "2", "--output-dir", str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 2 and "torchrun" in p.stderr and "nproc-per-node 2" in p.stderr
