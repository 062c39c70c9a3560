"""The FSDP config YAML of `accelerate launch --config_file FILE`, written from a config and read back.

The seed recipe (and most accelerate users) launch with `accelerate launch --config_file fsdp.yaml`, the
FSDP settings living in that YAML. The course keeps one config and one training script, so both ways are
this module's:

- written: `to_yaml(cfg)` is the YAML equivalent to a config (its strategy, offload, checkpointing, block
  class, mesh, precision). A job with `launcher = "accelerate"` writes it beside its config.json and runs
  `accelerate launch --config_file accelerate.yaml -m workshop.training.train --config config.json`
  (slurm/templates/launch-accelerate*.sh); notebook 02 prints it for the student's own settings.
- read back: `accelerate launch` turns the YAML into environment variables (ACCELERATE_USE_FSDP, FSDP_*,
  ACCELERATE_MIXED_PRECISION, PARALLELISM_CONFIG_*) of the processes it starts. `follow_launch` reads them
  in the training process: a setting the run's config left unwritten follows the YAML (so
  `accelerate launch --config_file my.yaml -m workshop.training.train` runs what my.yaml says), one the
  config wrote must agree with it, and what the Trainer would silently override or ignore (FSDP1, an
  FSDP1 `fsdp_sharding_strategy`, another block class, a state-dict type or `fsdp_cpu_ram_efficient_loading`
  other than the Trainer's) stops the run naming the YAML key and the fix. The Trainer then gets the
  same arguments as under torchrun, and `sharding.check_applied` reads the wrapping back as it does there.

`fsdp_cpu_ram_efficient_loading`, as measured with transformers 5.23 and accelerate 1.15 (the course's
pins; tests/test_accelerate_launch.py keeps it true):
- under torchrun, the Trainer reads the flag from `fsdp_config` when it builds accelerate's FSDP plugin,
  after the model is loaded: every rank reads the whole checkpoint with `from_pretrained`;
- under `accelerate launch` the flag is in the environment (FSDP_CPU_RAM_EFFICIENT_LOADING, with
  ACCELERATE_USE_FSDP) before the model loads, and transformers sees FSDP as enabled then; yet in 5.23
  `from_pretrained` still reads every tensor of the checkpoint on every rank;
- under both, what the flag changes is accelerate's wrapping: it moves the model to the meta device,
  shards it, and broadcasts rank 0's full state dict into the shards (sync_module_states), so every rank's
  weights are rank 0's. It saves no checkpoint reads and no host memory at load time here.
No torch import: a notebook prints the YAML before anything is launched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from workshop.training.config import HYBRID_SHARDINGS, ConfigError, RunConfig
from workshop.training.fsdp_arguments import BLOCK_CLASS, native_fsdp_arguments
from workshop.training.hf_fsdp import fsdp_enabled, normalized_config, parse

FILE = "accelerate.yaml"
MIXED_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}
_TRUE = ("true", "1", "yes")


def _fsdp_arguments(cfg: RunConfig) -> tuple[Any, dict[str, Any]]:
    args = native_fsdp_arguments(cfg)
    assert args is not None
    return args


def _trainer_fsdp(cfg: RunConfig) -> dict[str, Any]:
    """The FSDP settings the Trainer applies for this config, in the YAML's words (without the fsdp_ prefix)."""
    fsdp, conf = _fsdp_arguments(cfg)
    request = parse(str(fsdp), conf)
    conf = normalized_config(conf)
    out: dict[str, Any] = {
        "version": 2,
        "auto_wrap_policy": request.auto_wrap_policy,
        "reshard_after_forward": request.reshard_after_forward,
        "offload_params": request.offload,
        "activation_checkpointing": request.activation_checkpointing,
        "state_dict_type": str(conf.get("state_dict_type", "FULL_STATE_DICT")),
        "cpu_ram_efficient_loading": str(conf.get("cpu_ram_efficient_loading", False)).strip().lower() in _TRUE,
    }
    if request.auto_wrap_policy == "TRANSFORMER_BASED_WRAP":
        out["transformer_layer_cls_to_wrap"] = ",".join(request.layer_classes or (BLOCK_CLASS,))
    if request.auto_wrap_policy == "SIZE_BASED_WRAP":
        out["min_num_params"] = int(conf.get("min_num_params", 0))
    # accelerate refuses cpu_ram_efficient_loading without sync_module_states (rank 0's weights are broadcast)
    out["sync_module_states"] = out["cpu_ram_efficient_loading"]
    return out


def accelerate_config(cfg: RunConfig) -> dict[str, Any]:
    """The content of `accelerate config`'s YAML that launches this config's run: the same processes,
    precision and FSDP wrapping (every FSDP setting the Trainer would apply, written out)."""
    out: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": "FSDP" if cfg.is_fsdp else "MULTI_GPU" if cfg.world_size > 1 else "NO",
        "mixed_precision": MIXED_PRECISION[cfg.precision],
        "num_machines": cfg.nodes,
        "num_processes": cfg.world_size,
        "machine_rank": 0,            # each node's own comes with --machine_rank (the batch script's)
        "main_training_function": "main",
        "rdzv_backend": "static",     # node 0 hosts the rendezvous; each node names its rank (--machine_rank)
        "same_network": True,
        "use_cpu": False,             # the same file on a GPU node and a CPU laptop: the script picks the device
    }
    if cfg.is_fsdp:
        out["fsdp_config"] = {f"fsdp_{k}": v for k, v in _trainer_fsdp(cfg).items()}
    if cfg.sharding in HYBRID_SHARDINGS:
        out["parallelism_config"] = {"parallelism_config_dp_replicate_size": cfg.replicas,
                                     "parallelism_config_dp_shard_size": cfg.shard_size}
    return out


def to_yaml(cfg: RunConfig) -> str:
    """The YAML text of `accelerate_config(cfg)`, as `accelerate config` writes it (keys sorted)."""
    import yaml

    return yaml.safe_dump(accelerate_config(cfg), sort_keys=True)


# ---------------------------------------------------------------------- read back in the training process
def launched_by_accelerate(env: Mapping[str, str]) -> bool:
    """`accelerate launch` sets these for every process it starts, whatever its launcher (torchrun or plain)."""
    return "ACCELERATE_MIXED_PRECISION" in env and "ACCELERATE_DYNAMO_BACKEND" in env


def launched_with(env: Mapping[str, str]) -> str:
    """accelerate | torchrun | python: what started this process (summary.json's `launcher`)."""
    if launched_by_accelerate(env):
        return "accelerate"
    return "torchrun" if "TORCHELASTIC_RUN_ID" in env else "python"


@dataclass(frozen=True)
class Launch:
    """What the YAML asked for, as accelerate launch handed it to this process."""

    course: dict[str, Any]             # config fields: sharding, offload, activation_checkpointing, ...
    fsdp: dict[str, Any]               # the other FSDP keys the YAML set (without the fsdp_ prefix)


# Each config field and the YAML key that sets it, for the messages.
YAML_KEYS = {"sharding": "distributed_type / fsdp_config.fsdp_reshard_after_forward / parallelism_config",
             "offload": "fsdp_config.fsdp_offload_params",
             "activation_checkpointing": "fsdp_config.fsdp_activation_checkpointing",
             "hybrid_replicas": "parallelism_config.parallelism_config_dp_replicate_size",
             "precision": "mixed_precision", "launcher": "(accelerate launch itself)"}


def _flag(env: Mapping[str, str], name: str, default: str = "false") -> bool:
    return env.get(name, default).strip().lower() in _TRUE


def _yaml_error(key: str, problem: str, fix: str) -> ConfigError:
    return ConfigError(f"accelerate config {key}", problem, fix)


def read_launch(env: Mapping[str, str]) -> Launch:
    """The YAML's settings from the environment `accelerate launch` gave this process."""
    precision = {v: k for k, v in MIXED_PRECISION.items()}.get(env.get("ACCELERATE_MIXED_PRECISION", "no"))
    if precision is None:
        raise _yaml_error("mixed_precision", f"{env['ACCELERATE_MIXED_PRECISION']!r} is not a precision this course "
                          "trains in", "write no (fp32), bf16 or fp16")
    course: dict[str, Any] = {"precision": precision, "launcher": "accelerate"}
    if not _flag(env, "ACCELERATE_USE_FSDP"):
        course.update(sharding="ddp" if int(env.get("WORLD_SIZE", "1")) > 1 else "none", offload=False,
                      activation_checkpointing=False, hybrid_replicas=0)
        return Launch(course, {})
    if env.get("FSDP_VERSION", "1") != "2":
        raise _yaml_error("fsdp_config.fsdp_version", f"is {env.get('FSDP_VERSION', '1 (accelerate default)')}: "
                          "FSDP1, whose strategies transformers 5.23 + accelerate 1.15 silently change",
                          "write fsdp_version: 2 under fsdp_config")
    reshard = _flag(env, "FSDP_RESHARD_AFTER_FORWARD", "true")
    legacy = env.get("FSDP_SHARDING_STRATEGY", "FULL_SHARD").strip().upper()
    if legacy not in ("FULL_SHARD", "1") and not (legacy in ("SHARD_GRAD_OP", "2") and not reshard):
        raise _yaml_error("fsdp_config.fsdp_sharding_strategy", f"is {legacy}, FSDP1's key: with fsdp_version 2 "
                          "accelerate ignores it and reshards as fsdp_reshard_after_forward says "
                          f"({str(reshard).lower()})", "remove fsdp_sharding_strategy and write "
                          "fsdp_reshard_after_forward: false for SHARD_GRAD_OP (true for FULL_SHARD)")
    course.update(offload=_flag(env, "FSDP_OFFLOAD_PARAMS"),
                  activation_checkpointing=_flag(env, "FSDP_ACTIVATION_CHECKPOINTING"), hybrid_replicas=0,
                  sharding="full_shard" if reshard else "shard_grad_op")
    if _flag(env, "ACCELERATE_USE_PARALLELISM_CONFIG"):
        sizes = {k: int(env.get(f"PARALLELISM_CONFIG_{k.upper()}_SIZE", "1")) for k in ("dp_replicate", "tp", "cp", "sp")}
        if any(sizes[k] != 1 for k in ("tp", "cp", "sp")):
            raise _yaml_error("parallelism_config", f"asks for tensor/context/sequence parallelism ({sizes})",
                              "the course runs data parallelism only: keep parallelism_config_dp_replicate_size "
                              "and parallelism_config_dp_shard_size")
        if sizes["dp_replicate"] > 1:
            course.update(sharding="hybrid_shard" if reshard else "hybrid_shard_grad_op",
                          hybrid_replicas=sizes["dp_replicate"])
    fsdp: dict[str, Any] = {"auto_wrap_policy": env.get("FSDP_AUTO_WRAP_POLICY", "NO_WRAP"),
                            "cpu_ram_efficient_loading": _flag(env, "FSDP_CPU_RAM_EFFICIENT_LOADING")}
    if env.get("FSDP_TRANSFORMER_CLS_TO_WRAP"):
        fsdp["transformer_layer_cls_to_wrap"] = env["FSDP_TRANSFORMER_CLS_TO_WRAP"].replace(" ", "")
    if env.get("FSDP_STATE_DICT_TYPE"):
        fsdp["state_dict_type"] = env["FSDP_STATE_DICT_TYPE"]
    if fsdp["auto_wrap_policy"] == "SIZE_BASED_WRAP":
        fsdp["min_num_params"] = int(env.get("FSDP_MIN_NUM_PARAMS", "0"))
    return Launch(course, fsdp)


def follow_launch(cfg: RunConfig, written: set[str], env: Mapping[str, str],
                  world: Mapping[str, int] | None = None) -> RunConfig:
    """The config this run trains with: `world` (the launcher's processes, where the config fixes none) and,
    when `accelerate launch` started it, the YAML's settings where the config wrote none; a ConfigError
    where the YAML and the config disagree. A config that asks for accelerate in a process accelerate did
    not start is refused: its YAML never took effect."""
    adopt: dict[str, Any] = dict(world or {})
    if not launched_by_accelerate(env):
        if cfg.launcher == "accelerate":
            raise ConfigError("launcher", "is accelerate, but this process was not started by accelerate launch, "
                              "so no accelerate config took effect",
                              "start it with `accelerate launch --config_file accelerate.yaml -m workshop.training.train "
                              "...`, or set launcher=torchrun")
        return cfg.replace(**adopt) if adopt else cfg
    launch = read_launch(env)
    fixed = set(written) | ({"sharding", "offload", "activation_checkpointing"} if fsdp_enabled(cfg.fsdp) else set())
    for name, value in launch.course.items():
        have = getattr(cfg, name)
        if name == "hybrid_replicas" and cfg.sharding in HYBRID_SHARDINGS and have in (0, value) \
                and cfg.replicas == value:
            continue                               # 0 is "one replica group per node": the same mesh
        if have == value:
            continue
        if name in fixed:
            raise _yaml_error(YAML_KEYS[name], f"asks for {name}={value!r}, but the run's config says {name}={have!r}",
                              "make the accelerate config and the training config agree (a job writes its "
                              "accelerate.yaml from its config: submit it again rather than edit either)")
        adopt[name] = value
    if adopt:
        cfg = cfg.replace(**adopt)
    if cfg.is_fsdp:
        _same_fsdp(cfg, launch.fsdp)
    return cfg


def _same_fsdp(cfg: RunConfig, asked: dict[str, Any]) -> None:
    """The YAML's other FSDP keys against what the Trainer will apply for this config."""
    trainer = _trainer_fsdp(cfg)
    for key, value in asked.items():
        want = trainer.get(key)
        if key == "transformer_layer_cls_to_wrap":
            value, want = sorted(str(value).split(",")), sorted(str(want).split(","))
        if value != want:
            why = ("transformers sets the environment's value back to fsdp_config's before the model loads"
                   if key == "cpu_ram_efficient_loading" else "the Trainer would apply its own, not the YAML's")
            raise _yaml_error(f"fsdp_config.fsdp_{key}", f"is {value!r}, but the run applies {want!r}: {why}",
                              f"write fsdp_{key}: {want!r} in the YAML (its `to_yaml` for this config), or set "
                              "the same in the run's fsdp / fsdp_config")
