"""The communication model: what each rank sends per optimizer step, by collective kind, for what the
course's runs execute; beside the memory model (workshop.results.memory), and checked the same way,
against what the runs measured (summary.json's `comm`, workshop.training.comm_recorder).

Why a model: before a job runs, a student should be able to say what each strategy sends and what
crosses the network, and afterwards set that beside the job's own collectives.

What a step runs, from the course's wrapping (accelerate's TRANSFORMER_BASED_WRAP of BloomBlock):
- FSDP units: each block (12h² + 13h elements); the embedding unit that accelerate groups with the
  tied lm_head and the final norm (V·h + 2h); the root, left with the embedding LayerNorm (2h).
  A student's `wrap_function` that shards the blocks and then the model has the blocks and one root
  holding all the rest (`wrapping="blocks_and_root"`).
- Per micro-batch, forward: one all-gather of every unit. Backward: `full_shard` gathers every block
  again (it resharded them after forward); the root and the embedding unit stay gathered (FSDP2 never
  reshards the root after forward, and accelerate keeps the embedding unit's tied weights
  gathered), and `shard_grad_op` re-gathers nothing. Activation checkpointing re-runs a block's forward
  inside its backward without a new all-gather (FSDP2 skips its forward hooks there); CPU offload
  changes where the shards live, not what is gathered.
- On the last micro-batch only (the Trainer skips the sync on the others): one reduce-scatter per
  unit; HSDP then all-reduces each unit's gradient shard among the replicas.
- Gradient clipping: the gradients' norms (one fp32 element per parameter tensor) all-reduced over
  the shard group (the sharded grads are DTensors); DDP's full gradients need none.
- DDP: one all-reduce of every gradient (P elements, fp32 even under autocast), in buckets, per step.
Sizes: FSDP2 pads each parameter's first dimension to a multiple of the shard group's size, so an
all-gather's output is n·Σ ⌈d0/n⌉·rest. Dtypes: the all-gathers move the compute dtype
(MixedPrecisionPolicy's param_dtype), the reduce-scatters and HSDP's all-reduces the reduce dtype;
the norms and DDP's gradients are fp32. The reduce dtype is the one the run applied (summary.json's
`mp_reduce_dtype`, read back from the units) where a run is given; else the course's rule: fp32 on
fp16 sites (workshop.training.hf_fsdp.reduce_in_fp32: loss-scaled fp16 gradients summed in fp16
overflow or lose the small ones), the compute dtype with bf16 (accelerate's policy), fp32 without
mixed precision.
Bytes each rank sends: the ring algorithm's (n-1)/n of the tensor for an all-gather or a
reduce-scatter, 2(n-1)/n for an all-reduce, over the collective's group of n ranks. Nodes hold
consecutive ranks (the launcher's layout); `network_bytes` is what a rank's ring sends to a rank on
another node, and a node's the sum over its ranks: the bytes that leave it. Not modelled: fp16's
GradScaler inf check (a few elements), the Trainer's bookkeeping outside the step (loss logging,
the stop flag, the batch's token count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from workshop.results.memory import Arch, get_arch
from workshop.training.config import FSDP_SHARDINGS as FSDP
from workshop.training.config import GRAD_OP_SHARDINGS, SHARDINGS
from workshop.training.config import HYBRID_SHARDINGS as HYBRID

# the sharding names are the training config's (one owner); RESHARDS: blocks resharded after forward, gathered
# again in backward
RESHARDS = tuple(s for s in FSDP if s not in GRAD_OP_SHARDINGS)
WRAPPINGS = ("accelerate", "blocks_and_root")
COMPUTE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
REDUCE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 4}   # the course's rule (module docstring)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
RING_SHARE = {"all_gather": lambda n: (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
              "all_reduce": lambda n: 2 * (n - 1) / n}
KINDS = ("all_gather", "reduce_scatter", "all_reduce")
MEASURES = ("elements", "bytes", "sent_elements", "sent_bytes")


@dataclass(frozen=True)
class Unit:
    """One FSDP unit: the shapes of its parameters, and whether backward gathers it again."""

    name: str
    shapes: tuple[tuple[int, ...], ...]
    regathered: bool

    def padded(self, n: int) -> int:
        """Elements of its all-gather output over n ranks: each first dimension padded to a multiple of n."""
        return sum(n * -(-s[0] // n) * math.prod(s[1:]) for s in self.shapes)

    @property
    def elements(self) -> int:
        return sum(math.prod(s) for s in self.shapes)


def block_shapes(h: int) -> tuple[tuple[int, ...], ...]:
    """A BloomBlock's parameters, in order: LayerNorm, qkv, dense, LayerNorm, h->4h, 4h->h."""
    return ((h,), (h,), (3 * h, h), (3 * h,), (h, h), (h,), (h,), (h,), (4 * h, h), (4 * h,), (h, 4 * h), (h,))


def units(model: str | Arch, sharding: str = "full_shard", wrapping: str = "accelerate") -> list[Unit]:
    """The FSDP units in the order forward gathers them: the root, (the embedding unit,) the blocks."""
    if wrapping not in WRAPPINGS:
        raise ValueError(f"unknown wrapping {wrapping!r}; use one of {', '.join(WRAPPINGS)}")
    arch = get_arch(model)
    h, V = arch.hidden, arch.vocab
    regather = sharding in RESHARDS
    blocks = [Unit(f"transformer.h.{i}", block_shapes(h), regather) for i in range(arch.layers)]
    if wrapping == "blocks_and_root":
        return [Unit("", ((V, h), (h,), (h,), (h,), (h,)), False), *blocks]
    return [Unit("", ((h,), (h,)), False),
            Unit("transformer.word_embeddings, transformer.ln_f, lm_head", ((V, h), (h,), (h,)), False), *blocks]


def model_facts(model: str | Arch, wrapping: str = "accelerate") -> dict[str, int]:
    """What a prediction of one rank's collectives starts from, as notebook 03 asks it: the parameters
    (`params`), the elements of the units full_shard keeps gathered from forward to backward (`kept_gathered`:
    the root and the embedding unit), and the parameter tensors (`tensors`: clipping all-reduces one fp32
    partial norm for each)."""
    the_units = units(model, "full_shard", wrapping)
    return {"params": sum(u.elements for u in the_units),
            "kept_gathered": sum(u.elements for u in the_units if not u.regathered),
            "tensors": sum(len(u.shapes) for u in the_units)}


@dataclass(frozen=True)
class Collective:
    """One predicted collective of a rank's step."""

    kind: str
    elements: int
    dtype_bytes: int
    group: tuple[int, ...]
    unit: str = ""

    @property
    def sent_elements(self) -> int:
        n = len(self.group)
        return round(RING_SHARE[self.kind](n) * self.elements) if n > 1 else 0

    @property
    def sent_bytes(self) -> int:
        n = len(self.group)
        return round(RING_SHARE[self.kind](n) * self.elements * self.dtype_bytes) if n > 1 else 0


@dataclass
class CommPrediction:
    """Per rank: the step's collectives and their sums by kind, in the shape of summary.json's `comm`."""

    world_size: int
    procs_per_node: int
    collectives: list[list[Collective]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def node_of(self, rank: int) -> int:
        return rank // self.procs_per_node

    def by_kind(self, rank: int) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for c in self.collectives[rank]:
            slot = out.setdefault(c.kind, dict.fromkeys(("calls", *MEASURES), 0))
            slot["calls"] += 1
            slot["elements"] += c.elements
            slot["bytes"] += c.elements * c.dtype_bytes
            slot["sent_elements"] += c.sent_elements
            slot["sent_bytes"] += c.sent_bytes
        return {k: out[k] for k in KINDS if k in out}

    def split(self, rank: int) -> dict[str, dict[str, int]]:
        """Sent bytes by kind: in groups inside one node, in groups that span nodes, and to another node."""
        out: dict[str, dict[str, int]] = {"intra_node_bytes": {}, "inter_node_bytes": {}, "network_bytes": {}}
        for c in self.collectives[rank]:
            nodes = [self.node_of(g) for g in c.group]
            where = "inter_node_bytes" if len(set(nodes)) > 1 else "intra_node_bytes"
            out[where][c.kind] = out[where].get(c.kind, 0) + c.sent_bytes
            me = c.group.index(rank)
            if len(c.group) > 1 and nodes[(me + 1) % len(c.group)] != nodes[me] and c.sent_bytes:
                out["network_bytes"][c.kind] = out["network_bytes"].get(c.kind, 0) + c.sent_bytes
        return out

    def per_rank(self) -> list[dict[str, Any]]:
        return [{"rank": r, "node": self.node_of(r), "by_kind": self.by_kind(r), **self.split(r)}
                for r in range(self.world_size)]

    def per_node(self) -> dict[int, dict[str, Any]]:
        """Each node's ranks and the bytes that leave it per step, by kind (its ranks' network_bytes)."""
        out: dict[int, dict[str, Any]] = {}
        for entry in self.per_rank():
            node = out.setdefault(entry["node"], {"ranks": [], "network_bytes": {}})
            node["ranks"].append(entry["rank"])
            for kind, v in entry["network_bytes"].items():
                node["network_bytes"][kind] = node["network_bytes"].get(kind, 0) + v
        return out


def predict(model: str | Arch = "bloom-560m", sharding: str = "full_shard", world_size: int = 1, nodes: int = 1,
            precision: str = "bf16", grad_acc: int = 1, offload: bool = False, activation_checkpointing: bool = False,
            replicas: int = 1, wrapping: str = "accelerate", clip: bool = True,
            param_dtype: str | None = None, reduce_dtype: str | None = None) -> CommPrediction:
    """Every collective of one optimizer step on every rank (see the module docstring).

    `offload` and `activation_checkpointing` are accepted, and change nothing: both keep the same
    collectives (a test holds the measured runs to it). `clip` is the Trainer's gradient clipping
    (max_grad_norm > 0, its default). `param_dtype` and `reduce_dtype` are the dtypes a run applied
    (summary.json's mp_param_dtype, mp_reduce_dtype: "float32", "bfloat16", "float16"); None: the
    course's rule for `precision`."""
    for name, value in (("param_dtype", param_dtype), ("reduce_dtype", reduce_dtype)):
        if value is not None and value not in DTYPE_BYTES:
            raise ValueError(f"{name}={value!r} is not a dtype the model knows; use one of {', '.join(DTYPE_BYTES)}")
    if sharding not in SHARDINGS:
        raise ValueError(f"unknown sharding {sharding!r}; use one of {', '.join(SHARDINGS)}")
    if precision not in COMPUTE_BYTES:
        raise ValueError(f"unknown precision {precision!r}; use fp32, bf16 or fp16")
    if min(world_size, nodes, grad_acc, replicas) < 1 or world_size % nodes:
        raise ValueError(f"world_size ({world_size}) must be a multiple of nodes ({nodes}); all of them >= 1")
    if sharding == "none" and world_size != 1:
        raise ValueError("sharding 'none' is one process: use world_size=1, or ddp/an FSDP strategy")
    if sharding in HYBRID and world_size % replicas:
        raise ValueError(f"{sharding}: {replicas} replicas do not divide world size {world_size}")
    arch = get_arch(model)
    pred = CommPrediction(world_size, world_size // nodes)
    for rank in range(world_size):
        pred.collectives.append(_rank_step(arch, sharding, world_size, precision, grad_acc,
                                           replicas if sharding in HYBRID else 1, wrapping, clip, rank,
                                           param_dtype, reduce_dtype))
    if precision == "fp16":
        pred.notes.append("fp16: the GradScaler's inf check adds a few elements of all-reduce, not counted")
    return pred


def _rank_step(arch: Arch, sharding: str, world: int, precision: str, grad_acc: int, replicas: int,
               wrapping: str, clip: bool, rank: int, param_dtype: str | None = None,
               reduce_dtype: str | None = None) -> list[Collective]:
    if sharding == "none" or (sharding == "ddp" and world == 1):
        return []
    everyone = tuple(range(world))
    if sharding == "ddp":
        return [Collective("all_reduce", arch.params, 4, everyone, "gradients (DDP buckets)")]
    shard = world // replicas
    row, col = divmod(rank, shard)  # the mesh [replicas, shard], row-major as DeviceMesh lays it out
    shard_group = tuple(range(row * shard, (row + 1) * shard))
    replica_group = tuple(range(col, world, shard))
    compute = DTYPE_BYTES[param_dtype] if param_dtype else COMPUTE_BYTES[precision]
    # the applied reduce dtype; none applied (no policy): FSDP2 reduces in the parameters' dtype
    reduce_bytes = DTYPE_BYTES[reduce_dtype] if reduce_dtype else compute if param_dtype else REDUCE_BYTES[precision]
    the_units = units(arch, sharding, wrapping)
    out: list[Collective] = []
    sharded = shard > 1  # FSDP2 calls no all-gather or reduce-scatter on a one-rank shard group
    for micro in range(grad_acc if sharded else 0):
        out += [Collective("all_gather", u.padded(shard), compute, shard_group, u.name) for u in the_units]
        out += [Collective("all_gather", u.padded(shard), compute, shard_group, u.name)
                for u in reversed(the_units) if u.regathered]
    for u in reversed(the_units):
        if sharded:
            out.append(Collective("reduce_scatter", u.padded(shard), reduce_bytes, shard_group, u.name))
        if replicas > 1:
            out.append(Collective("all_reduce", u.padded(shard) // shard, reduce_bytes, replica_group, u.name))
    if clip and sharded:  # the norms of DTensor gradients on a one-rank mesh need no collective
        tensors = sum(len(u.shapes) for u in the_units)
        out.append(Collective("all_reduce", tensors, 4, shard_group, "gradient norms (clipping)"))
    return out


# ---------------------------------------------------------------------------------------- runs


def wrapping_of(summary: dict[str, Any]) -> str:
    """The course's wrapping, unless the run's units show a student's blocks-and-root one."""
    names = summary.get("fsdp_unit_names") or []
    return "blocks_and_root" if names and not any("word_embeddings" in n for n in names) else "accelerate"


def predict_config(cfg: Any, summary: dict[str, Any] | None = None) -> CommPrediction:
    """The prediction for a RunConfig (or run_args.json's config dict), with what the run's summary says
    it applied (the sharding, its mesh, its units) where a summary is given."""
    get = (lambda k, d=None: cfg.get(k, d)) if isinstance(cfg, dict) else (lambda k, d=None: getattr(cfg, k, d))
    s = summary or {}
    nodes = int(s.get("nodes") or get("nodes", 1) or 1)
    world = int(s.get("world_size") or get("world_size") or nodes * int(get("procs_per_node", 1) or 1))
    sharding = s.get("sharding_applied") or get("sharding", "none")
    if sharding == "none" and world > 1:
        sharding = "ddp"
    replicas = 1
    if sharding in HYBRID:  # the mesh the run applied, else the config's rule (replica groups: one per node)
        mesh = s.get("mesh")
        replicas = int(mesh[0]) if mesh else int(get("hybrid_replicas", 0) or nodes)
    global_batch = int(s.get("global_batch") or get("global_batch", 0) or 0)
    batch = int(s.get("batch_size") or get("batch_size", 1) or 1)
    grad_acc = int(s.get("grad_acc") or (global_batch // (batch * world) if global_batch else get("grad_acc", 1)) or 1)
    return predict(s.get("model") or get("model", "tiny"), sharding, world, nodes, s.get("precision") or
                   get("precision", "fp32"), grad_acc, bool(get("offload", False)),
                   bool(get("activation_checkpointing", False)), replicas, wrapping_of(s),
                   param_dtype=_applied_dtype(s.get("mp_param_dtype")),
                   reduce_dtype=_applied_dtype(s.get("mp_reduce_dtype")) or _applied_dtype(s.get("mp_param_dtype")))


def _applied_dtype(value: Any) -> str | None:
    """A summary's applied dtype name, None where none was applied or units differ ("mixed")."""
    return value if value in DTYPE_BYTES else None


COMPARED = (*MEASURES, "calls")
SPLITS = ("intra_node_bytes", "inter_node_bytes", "network_bytes")


def compare(summary: dict[str, Any], config: dict[str, Any]) -> list[dict[str, Any]]:
    """Predicted vs measured per rank, kind and measure (elements, bytes, sent_elements, sent_bytes, calls,
    and the sent bytes split intra-node, inter-node and to the network) for one run that measured its
    collectives; [] for one that did not (its `comm` says why). DDP's calls are its buckets, which the
    model does not predict: its row has predicted None."""
    comm = summary.get("comm") or {}
    if comm.get("status") != "measured":
        return []
    pred = predict_config(config, summary)
    ddp = (summary.get("sharding_applied") or config.get("sharding")) == "ddp"
    rows = []
    for measured in comm.get("per_rank", []):
        rank = measured["rank"]
        predicted = pred.per_rank()[rank] if rank < pred.world_size else {"by_kind": {}}
        kinds = [k for k in KINDS if k in measured["by_kind"] or k in predicted["by_kind"]]
        kinds += [k for k in measured["by_kind"] if k not in kinds]
        for kind in kinds:
            got, want = measured["by_kind"].get(kind, {}), predicted["by_kind"].get(kind, {})
            for m in COMPARED:
                w = None if (m == "calls" and ddp) else want.get(m, 0)
                rows.append(_row(rank, kind, m, w, got.get(m, 0)))
        for split in SPLITS:
            for kind in sorted(set(measured.get(split, {})) | set(predicted.get(split, {})), key=_order):
                rows.append(_row(rank, kind, split, predicted.get(split, {}).get(kind, 0),
                                 measured.get(split, {}).get(kind, 0)))
    return rows


def _order(kind: str) -> int:
    return KINDS.index(kind) if kind in KINDS else len(KINDS)


def _row(rank: int, kind: str, measure: str, predicted: float | None, measured: float) -> dict[str, Any]:
    error = None if predicted is None or not measured else round((predicted - measured) / measured, 6)
    if predicted is not None and not measured:
        error = 0.0 if not predicted else None
    return {"rank": rank, "kind": kind, "measure": measure, "predicted": predicted, "measured": measured,
            "rel_error": error}


def course_table(model: str = "bloom-560m", precision: str = "bf16", world_size: int = 4,
                 sharding: Sequence[str] = ("ddp", "shard_grad_op", "full_shard")) -> str:
    """Elements each rank sends per step by kind for the course's strategies (what notebook 03 quotes)."""
    lines = [f"{model}, {precision}, {world_size} ranks on one node: elements sent per rank and step (ring)",
             f"  {'strategy':<16}" + "".join(f"{k:>18}" for k in (*KINDS, "total"))]
    for s in sharding:
        kinds = predict(model, s, world_size, 1, precision).by_kind(0)
        sent = [kinds.get(k, {}).get("sent_elements", 0) for k in KINDS]
        lines.append(f"  {s:<16}" + "".join(f"{v:>18,}" for v in (*sent, sum(sent))))
    return "\n".join(lines)
