"""The one run config that every course step, job and benchmark is driven by.

Every knob of a training run lives in `RunConfig`. A course step is a config, never a copy of the
training script. Values come from (lowest to highest precedence) the defaults, a config file
(TOML or JSON), the seed repo's environment variables (MODEL_NAME, BATCH_SIZE, ...) and CLI flags.
`RunConfig.validate()` turns every bad combination into a `ConfigError` that names the field and
says how to fix it, before a single process is launched.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from workshop.training.errors import ConfigError

SHARDINGS = ("none", "ddp", "full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_grad_op")
FSDP_SHARDINGS = ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_grad_op")
# a 2-D mesh (replicate x shard); the _grad_op one keeps parameters gathered from forward to backward
HYBRID_SHARDINGS = ("hybrid_shard", "hybrid_shard_grad_op")
# FSDP2's reshard_after_forward=False: every unit stays gathered from its forward to its backward.
# These lists are the one owner of the sharding names: the memory and communication models read them.
GRAD_OP_SHARDINGS = ("shard_grad_op", "hybrid_shard_grad_op")
PRECISIONS = ("fp32", "bf16", "fp16")
WANDB_MODES = ("disabled", "offline", "online")
DEVICES = ("auto", "cpu", "cuda")
DATASETS = ("fixture", "squad")
EVAL_SPLITS = ("dev", "train")
LAUNCHERS = ("torchrun", "accelerate")
LOSSES = ("full", "answer_only", "chunked")   # workshop.training.loss

# FSDP1 spellings students meet in older tutorials, mapped to what this course runs (FSDP2).
FSDP1_ALIASES = {
    "no_shard": "ddp",
    "full_shard": "full_shard",
    "shard_grad_op": "shard_grad_op",
    "hybrid_shard": "hybrid_shard",
    "_hybrid_shard_zero2": "hybrid_shard_grad_op",   # HYBRID_SHARD + SHARD_GRAD_OP: no reshard after forward
}

# The seed repo's environment variables, and the field each one sets.
ENV_VARS = {
    "MODEL_NAME": "model",
    "MAX_LENGTH": "max_length",
    "TRAIN_SIZE": "train_size",
    "EVAL_SIZE": "eval_size",
    "NUM_EPOCHS": "epochs",
    "BATCH_SIZE": "batch_size",
    "LEARNING_RATE": "learning_rate",
    "WEIGHT_DECAY": "weight_decay",
    "GRAD_ACC": "grad_acc",
}


def _help(text: str, **kw: Any) -> Any:
    return field(metadata={"help": text}, **kw)


@dataclass
class RunConfig:
    """A complete, validated description of one training run."""

    model: str = _help("model profile: tiny | bloom-560m-random | bloom-560m, or a local model path",
                       default="tiny")
    dataset: str = _help("fixture (SQuAD-format file shipped in the repo) or squad (SQuAD v1.1 from the Hub)",
                         default="fixture")
    train_size: int = _help("number of training examples (taken from the start of the split)", default=48)
    eval_size: int = _help("number of evaluation examples", default=15)
    eval_split: str = _help("dev (held-out paragraphs) or train (measures memorisation: does training work?)",
                            default="dev")
    max_length: int = _help("longest tokenized example; longer prompts are truncated from the context",
                            default=256)
    pad_to_max_length: bool = _help("pad every batch to max_length, as the seed recipe did (wastes compute on "
                                    "padding; default: pad each batch to its longest example)", default=False)
    batch_size: int = _help("per-device (per-process) batch size", default=4)
    grad_acc: int = _help("gradient accumulation steps (ignored when global_batch is set)", default=1)
    global_batch: int = _help("if > 0: keep this global batch for any world size; grad_acc is derived "
                              "as global_batch / (batch_size x world_size)", default=0)
    epochs: float = _help("training epochs", default=2.0)
    max_steps: int = _help("if > 0: stop after this many optimizer steps (overrides epochs)", default=0)
    learning_rate: float = _help("peak learning rate (AdamW, linear decay); the course profiles set 5e-5 "
                                 "for BLOOM-560M, 5e-3 for the tiny model", default=5e-4)
    weight_decay: float = _help("AdamW weight decay", default=0.0)
    precision: str = _help("fp32 | bf16 | fp16 (bf16 needs an A100/H100-class GPU: fp16 on V100; on a CPU, "
                           "autocast in that dtype, fp16 with the gradient scaler)", default="fp32")
    sharding: str = _help("none | ddp | full_shard | shard_grad_op | hybrid_shard | hybrid_shard_grad_op (FSDP2)", default="none")
    offload: bool = _help("FSDP2 CPU offload of parameters, gradients and optimizer state", default=False)
    activation_checkpointing: bool = _help("recompute each block's activations in backward", default=False)
    loss: str = _help("full | answer_only | chunked: full projects every position onto the vocabulary (logits "
                      "b x s x V); answer_only only the positions whose next token is an answer token; chunked every "
                      "position, a chunk at a time, each chunk's logits freed and recomputed in backward "
                      "(workshop.training.loss). Same loss and gradients; training only (evaluation is unchanged)",
                      default="full")
    fsdp: str = _help("Hugging Face TrainingArguments' fsdp, passed as written: true, or words such as "
                      "'full_shard auto_wrap offload' (empty = off; then sharding decides). With fsdp on, "
                      "sharding/offload/activation_checkpointing follow from fsdp and fsdp_config", default="")
    fsdp_config: dict = _help("Hugging Face TrainingArguments' fsdp_config, passed as written (FSDP2 keys: version, "
                              "transformer_layer_cls_to_wrap, reshard_after_forward, cpu_offload, "
                              "activation_checkpointing, auto_wrap_policy, ...): a dict, JSON text or a .json file",
                              default_factory=dict)
    wrap_function: str = _help("FILE.py:FUNCTION, your own FSDP2 wrapping: FUNCTION(model) calls fully_shard on "
                               "each block, then on the model; the job imports and runs it (submit copies FILE into "
                               "the job folder)", default="")
    nodes: int = _help("number of nodes", default=1)
    procs_per_node: int = _help("processes (GPUs) per node", default=1)
    hybrid_replicas: int = _help("hybrid_shard: number of replica groups (0 = one per node)", default=0)
    rdzv_endpoint: str = _help("HOST:PORT where a multi-node job's torchruns meet (empty = the job's first node and "
                               "a port below the ephemeral range, which only the batch script knows)", default="")
    rdzv_timeout_s: int = _help("seconds torchrun waits to reach the rendezvous store (0 = torchrun's 60 s)",
                                default=0)
    collective_timeout_s: int = _help("seconds a collective may wait for the other ranks before the job fails with a "
                                      "diagnosis (0 = a quarter of the job's time limit, set by the batch script; 30 "
                                      "minutes outside a job)", default=0)
    device: str = _help("auto | cpu | cuda (auto = cuda when available)", default="auto")
    seed: int = _help("random seed for model init, data order and dropout", default=42)
    logging_steps: int = _help("log metrics every N optimizer steps", default=1)
    eval_generate: bool = _help("measure EM/F1 by greedy generation before and after training",
                                default=True)
    comm_record: bool = _help("record every collective of one optimizer step with PyTorch's profiler and flight "
                              "recorder (summary.json's comm, the run folder's comm_trace.json)", default=True)
    max_new_tokens: int = _help("longest generated answer for EM/F1", default=16)
    output_dir: str = _help("where the run writes run_args.json, metrics.jsonl, summary.json",
                            default="runs/latest")
    checkpoint_every: int = _help("save a sharded checkpoint (model, optimizer, scheduler, data position) "
                                  "in output_dir every N optimizer steps; 0 = only when Slurm warns of the "
                                  "time limit (SIGUSR1)", default=0)
    checkpoint_at_end: bool = _help("save one sharded checkpoint when training ends (to merge into a full state "
                                    "dict, or to resume from), whatever checkpoint_every says", default=False)
    checkpoint_dir: str = _help("where checkpoint-N folders go (empty = output_dir). A job's is under the site "
                                "profile's scratch folder, so no checkpoint lands in a student's folder", default="")
    resume: bool = _help("continue from the latest checkpoint in checkpoint_dir (same data order, optimizer and "
                         "scheduler state) instead of starting over", default=False)
    launcher: str = _help("torchrun | accelerate: how a job starts its processes (accelerate: `accelerate launch "
                          "--config_file accelerate.yaml`, the FSDP YAML written from this config; the same "
                          "training script either way)", default="torchrun")
    wandb: str = _help("disabled | offline | online (offline runs need no network or key)",
                       default="disabled")

    # ------------------------------------------------------------------ derived values
    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def is_fsdp(self) -> bool:
        return self.sharding in FSDP_SHARDINGS

    @property
    def replicas(self) -> int:
        """Replica groups for hybrid_shard (dp_replicate_size); 1 for every other strategy."""
        if self.sharding not in HYBRID_SHARDINGS:
            return 1
        return self.hybrid_replicas or self.nodes

    @property
    def shard_size(self) -> int:
        """Processes a parameter is sharded over (dp_shard_size)."""
        if self.is_fsdp:
            return self.world_size // self.replicas
        return 1

    @property
    def checkpoint_root(self) -> Path:
        """The folder the run's checkpoint-N folders go into (and a resume reads)."""
        return Path(self.checkpoint_dir or self.output_dir)

    @property
    def effective_grad_acc(self) -> int:
        if self.global_batch > 0:
            return self.global_batch // (self.batch_size * self.world_size)
        return self.grad_acc

    @property
    def effective_global_batch(self) -> int:
        return self.batch_size * self.world_size * self.effective_grad_acc

    # ------------------------------------------------------------------ validation
    def validate(self) -> "RunConfig":
        """Raise ConfigError for the first value that cannot run; return self when all is well."""
        self._check_numbers()
        self._check_choices()
        self._follow_native_fsdp()
        self._check_wrap_function()
        self._check_layout()
        self._check_global_batch()
        return self

    def _check_numbers(self) -> None:
        """Counts, sizes and rates in their ranges."""
        positive = {
            "train_size": "a number of examples, e.g. 48",
            "eval_size": "a number of examples, e.g. 15",
            "batch_size": "at least 1; lower it (not to 0) when memory is short, and raise grad_acc",
            "grad_acc": "at least 1 (1 = no accumulation)",
            "nodes": "at least 1",
            "procs_per_node": "at least 1 (one process per GPU)",
            "logging_steps": "at least 1",
            "max_new_tokens": "at least 1",
        }
        for name, fix in positive.items():
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}", fix)
        if self.max_length < 32:
            raise ConfigError("max_length", f"must be >= 32 tokens, got {self.max_length}",
                              "use 256 for the fixture, 512 for SQuAD")
        if not self.epochs > 0 and self.max_steps <= 0:
            raise ConfigError("epochs", f"must be > 0, got {self.epochs}", "train for e.g. 2 epochs")
        if self.checkpoint_every < 0:
            raise ConfigError("checkpoint_every", f"must be >= 0, got {self.checkpoint_every}",
                              "0 saves only on Slurm's time-limit warning; e.g. 20 saves every 20 steps")
        if self.max_steps < 0:
            raise ConfigError("max_steps", f"must be >= 0, got {self.max_steps}", "0 means: use epochs")
        if not self.learning_rate > 0:
            raise ConfigError("learning_rate", f"must be > 0, got {self.learning_rate}", "try 5e-5 to 5e-4")
        if self.weight_decay < 0:
            raise ConfigError("weight_decay", f"must be >= 0, got {self.weight_decay}", "use 0.0 or 0.01")

    def _check_choices(self) -> None:
        """Each named setting one of its known values."""
        _choice("precision", self.precision, PRECISIONS)
        _choice("wandb", self.wandb, WANDB_MODES)
        _choice("device", self.device, DEVICES)
        _choice("dataset", self.dataset, DATASETS)
        _choice("eval_split", self.eval_split, EVAL_SPLITS)
        _choice("launcher", self.launcher, LAUNCHERS)
        if self.loss not in LOSSES:
            raise ConfigError("loss", f"unknown value {self.loss!r}",
                              "choose full (logits at every position, the default), answer_only (logits only where "
                              "the next token is an answer token) or chunked (every position, a chunk at a time)")
        if self.sharding not in SHARDINGS:
            raise ConfigError("sharding", f"unknown strategy {self.sharding!r}",
                              f"choose one of {', '.join(SHARDINGS)} (FSDP1 names such as FULL_SHARD "
                              "are accepted in any case; NO_SHARD is ddp)")

    def _check_layout(self) -> None:
        """The processes, sharding and rendezvous: a layout that can start."""
        if not self.model:
            raise ConfigError("model", "is empty", "use tiny, bloom-560m-random or bloom-560m")
        if not self.output_dir:
            raise ConfigError("output_dir", "is empty", "give a folder, e.g. runs/baseline")
        world = self.world_size
        if self.sharding == "none" and world > 1:
            raise ConfigError("sharding", f"'none' runs a single process, but {world} processes were asked "
                              f"for (nodes={self.nodes} x procs_per_node={self.procs_per_node})",
                              "use ddp or an FSDP strategy for several processes, or procs_per_node=1")
        if self.offload and not self.is_fsdp:
            raise ConfigError("offload", f"CPU offload needs FSDP, but sharding is {self.sharding!r}",
                              "set sharding=full_shard (or another FSDP strategy), or offload=false")
        if self.collective_timeout_s < 0:
            raise ConfigError("collective_timeout_s", f"must be >= 0, got {self.collective_timeout_s}",
                              "0 takes a quarter of the job's time limit")
        if self.rdzv_timeout_s < 0:
            raise ConfigError("rdzv_timeout_s", f"must be >= 0, got {self.rdzv_timeout_s}", "0 keeps torchrun's default")
        if self.rdzv_endpoint and not re.fullmatch(r"[A-Za-z0-9.\-]+:\d{1,5}", self.rdzv_endpoint):
            raise ConfigError("rdzv_endpoint", f"{self.rdzv_endpoint!r} is not HOST:PORT",
                              "leave it empty (the job's first node), or write e.g. node001:29400")
        if self.hybrid_replicas < 0:
            raise ConfigError("hybrid_replicas", f"must be >= 0, got {self.hybrid_replicas}",
                              "0 means one replica group per node")
        if self.hybrid_replicas and self.sharding not in HYBRID_SHARDINGS:
            raise ConfigError("hybrid_replicas", f"only applies to hybrid_shard, sharding is {self.sharding!r}",
                              "set sharding=hybrid_shard or hybrid_replicas=0")
        if self.sharding in HYBRID_SHARDINGS:
            r = self.replicas
            if world % r != 0 or world // r < 2 or r < 2:
                raise ConfigError(
                    "hybrid_shard", f"{r} replica group(s) x a shard group of 2+ cannot be laid out on "
                    f"{world} processes (nodes={self.nodes} x procs_per_node={self.procs_per_node})",
                    "use a world size that is a multiple of hybrid_replicas with at least 2 processes per "
                    "shard group (e.g. 2 replicas x 2 = 4 processes), or sharding=full_shard")

    def _check_global_batch(self) -> None:
        """global_batch, when set, divides into micro-batches x processes and owns grad_acc."""
        world = self.world_size
        if self.global_batch < 0:
            raise ConfigError("global_batch", f"must be >= 0, got {self.global_batch}", "0 disables it")
        if self.global_batch > 0 and self.grad_acc not in (1, self.global_batch // (self.batch_size * world)):
            raise ConfigError("grad_acc", f"grad_acc={self.grad_acc} would be ignored: global_batch={self.global_batch} "
                              f"derives it as global_batch / (batch_size x world_size)",
                              "set either grad_acc (and global_batch=0) or global_batch (and grad_acc=1)")
        if self.global_batch > 0:
            per_step = self.batch_size * world
            if self.global_batch % per_step != 0:
                raise ConfigError(
                    "global_batch", f"{self.global_batch} is not a multiple of batch_size x world_size = "
                    f"{self.batch_size} x {world} = {per_step}",
                    f"choose a global_batch that is a multiple of {per_step}, or change batch_size")

    def _follow_native_fsdp(self) -> None:
        """With Hugging Face's fsdp/fsdp_config, the course's own fields follow from them (one request,
        written once); a value written in both spellings that disagrees is refused."""
        from workshop.training import hf_fsdp

        request = hf_fsdp.parse(self.fsdp, self.fsdp_config)
        if request is None:
            return
        if self.wrap_function:
            raise ConfigError("wrap_function", "is set together with fsdp: fsdp/fsdp_config let the Trainer wrap "
                              "the model, wrap_function wraps it with your own code", "choose one: clear fsdp and "
                              "fsdp_config, or clear wrap_function")
        for name, wanted in (("sharding", request.sharding), ("offload", request.offload),
                             ("activation_checkpointing", request.activation_checkpointing)):
            have = getattr(self, name)
            if have != wanted and have != NATIVE_FOLLOWERS[name]:
                raise ConfigError(name, f"{name}={have!r} contradicts fsdp={self.fsdp!r} / fsdp_config, which ask "
                                  f"for {name}={wanted!r}", "write the strategy one way: either Hugging Face's "
                                  "fsdp/fsdp_config, or sharding/offload/activation_checkpointing")
            setattr(self, name, wanted)

    def _check_wrap_function(self) -> None:
        if not self.wrap_function:
            return
        path, _, name = self.wrap_function.rpartition(":")
        if not path.endswith(".py") or not name.isidentifier():
            raise ConfigError("wrap_function", f"{self.wrap_function!r} is not FILE.py:FUNCTION",
                              "e.g. wrap_function='my_wrap.py:shard_model' (workshop.training.wrap_function.write_source(fn, "
                              "path) writes the file from a notebook function)")
        if self.sharding not in ("full_shard", "shard_grad_op"):
            raise ConfigError("wrap_function", f"your function shards with fully_shard, but sharding={self.sharding!r}",
                              "set sharding=full_shard if your fully_shard calls reshard after forward (the "
                              "default), shard_grad_op if they pass reshard_after_forward=False")
        if self.activation_checkpointing:
            raise ConfigError("activation_checkpointing", "cannot be added around your wrap_function (it must be "
                              "applied before fully_shard)", "set activation_checkpointing=false, or apply "
                              "checkpoint_wrapper to each block inside your function before fully_shard")

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def resolved(self) -> dict[str, Any]:
        """The config plus the values derived from it, as written into run_args.json."""
        d = self.to_dict()
        d.update(world_size=self.world_size, effective_grad_acc=self.effective_grad_acc,
                 effective_global_batch=self.effective_global_batch, replicas=self.replicas,
                 shard_size=self.shard_size)
        return d

    def to_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    def replace(self, **changes: Any) -> "RunConfig":
        """A copy with `changes` applied (coerced and validated like any other source)."""
        return load_config(base=self, overrides=changes)


# The course's fields that follow from Hugging Face's fsdp/fsdp_config when those are given, at their
# defaults (a default is "not written", so it may follow).
NATIVE_FOLLOWERS: dict[str, Any] = {"sharding": "none", "offload": False, "activation_checkpointing": False}


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(name, f"unknown value {value!r}", f"choose one of {', '.join(choices)}")


FIELD_TYPES: dict[str, type] = {f.name: f.type if isinstance(f.type, type) else eval(f.type)  # noqa: S307
                                for f in fields(RunConfig)}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def coerce(name: str, value: Any) -> Any:
    """Turn a value from a file, the environment or a flag into the field's type, or say why not."""
    if name not in FIELD_TYPES:
        close = difflib.get_close_matches(name, FIELD_TYPES, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"known fields: {', '.join(FIELD_TYPES)}"
        raise ConfigError(name, "is not a config field", hint)
    typ = FIELD_TYPES[name]
    if typ is dict:
        return _mapping(name, value)
    try:
        if typ is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError
        if typ is int:
            if isinstance(value, bool):
                raise ValueError
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(str(value).strip()) if isinstance(value, str) else int(value)
        if typ is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        text = str(value).strip()
        if name == "sharding":
            text = FSDP1_ALIASES.get(text.lower().replace("-", "_"), text.lower().replace("-", "_"))
        if name in ("precision", "wandb", "device", "dataset", "eval_split", "launcher"):
            text = text.lower()
        if name == "loss":
            text = text.lower().replace("-", "_")
        return text
    except ValueError:
        kind = {bool: "true or false", int: "a whole number", float: "a number"}[typ]
        raise ConfigError(name, f"{value!r} is not {kind}", f"give {kind}") from None


def _mapping(name: str, value: Any) -> dict[str, Any]:
    """A dict field (fsdp_config) from a dict, JSON text or a .json file, as Hugging Face accepts it."""
    if isinstance(value, Mapping):
        return dict(value)
    text = str(value).strip()
    if not text:
        return {}
    if not text.startswith("{"):
        if not text.endswith(".json") or not Path(text).is_file():
            raise ConfigError(name, f"{text!r} is neither a JSON object nor an existing .json file",
                              'write a dict, JSON such as \'{"version": 2}\', or the path of a .json file')
        text = Path(text).read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(name, f"is not valid JSON: {e}", "fix the syntax at the position named") from None
    if not isinstance(data, dict):
        raise ConfigError(name, f"{data!r} is not a JSON object", 'write an object, e.g. {"version": 2}')
    return data


def from_env(env: Mapping[str, str]) -> dict[str, Any]:
    """The seed repo's environment variables (MODEL_NAME, BATCH_SIZE, FP16, BF16, ...) as overrides."""
    out: dict[str, Any] = {}
    for var, name in ENV_VARS.items():
        if env.get(var, "") != "":
            try:
                out[name] = coerce(name, env[var])
            except ConfigError as e:
                raise ConfigError(name, f"environment variable {var}={env[var]!r}: {e.problem}", e.fix) from None
    fp16 = coerce("offload", env.get("FP16", "")) if env.get("FP16") else False
    bf16 = coerce("offload", env.get("BF16", "")) if env.get("BF16") else False
    if fp16 and bf16:
        raise ConfigError("precision", "both FP16 and BF16 are set", "set only one of FP16=1 or BF16=1 "
                          "(bf16 on A100/H100, fp16 on V100)")
    if fp16:
        out["precision"] = "fp16"
    elif bf16:
        out["precision"] = "bf16"
    return out


def read_file(path: str | Path) -> dict[str, Any]:
    """A TOML or JSON config file as a dict (a TOML file may keep the fields under [run])."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("config", f"file {str(path)!r} does not exist", "check the path")
    text = path.read_text()
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise ConfigError("config", f"{path} is not valid {path.suffix.lstrip('.') or 'JSON'}: {e}",
                          "fix the syntax at the position named") from None
    if path.suffix == ".toml" and isinstance(data.get("run"), dict):
        data = data["run"]
    return data


def load_config(file: str | Path | None = None, env: Mapping[str, str] | None = None,
                overrides: Mapping[str, Any] | None = None, base: RunConfig | None = None) -> RunConfig:
    """Merge defaults < file < environment < overrides into a validated RunConfig."""
    values = (base or RunConfig()).to_dict()
    layers: list[Mapping[str, Any]] = []
    if file is not None:
        layers.append(read_file(file))
    if env is not None:
        layers.append(from_env(env))
    if overrides:
        layers.append({k: v for k, v in overrides.items() if v is not None})
    written: set[str] = set()
    for layer in layers:
        for name, value in layer.items():
            values[name] = coerce(name, value)
            written.add(name)
    from workshop.training.hf_fsdp import fsdp_enabled

    if fsdp_enabled(values["fsdp"]):
        # what an earlier config derived from its fsdp/fsdp_config follows the current ones again
        values.update({k: v for k, v in NATIVE_FOLLOWERS.items() if k not in written})
    return RunConfig(**values).validate()


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings (from `--set`) as overrides; the key must be a config field."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(item, "is not KEY=VALUE", "write e.g. --set batch_size=8")
        key, value = item.split("=", 1)
        key = key.strip().replace("-", "_")
        out[key] = coerce(key, value)
    return out


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """One CLI flag per config field (`--batch-size`, `--offload/--no-offload`, ...), all defaulting
    to None so that only the flags given override the file and the environment."""
    parser.add_argument("--config", help="TOML or JSON file with config fields (lowest precedence "
                        "after the defaults; then env variables, then these flags)")
    for f in fields(RunConfig):
        flag = "--" + f.name.replace("_", "-")
        typ = FIELD_TYPES[f.name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        help_text = f"{f.metadata['help']} (default: {default})"
        if typ is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)
        else:
            parser.add_argument(flag, dest=f.name, default=None, type=str, help=help_text)


def written_fields(args: argparse.Namespace) -> set[str]:
    """The fields a launch wrote: its --config file's keys and the flags given (the rest are defaults,
    which a launcher's own settings may fill: torchrun's world, accelerate's YAML)."""
    written = {f.name for f in fields(RunConfig) if getattr(args, f.name, None) is not None}
    return written | (set(read_file(args.config)) if getattr(args, "config", None) else set())


def config_from_args(args: argparse.Namespace, env: Mapping[str, str]) -> RunConfig:
    overrides = {f.name: getattr(args, f.name) for f in fields(RunConfig)}
    return load_config(file=args.config, env=env, overrides=overrides)
