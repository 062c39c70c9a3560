"""Two students who think nothing, as docs/grading.md defines them, for tests/test_course.py.

- The **copier** answers every graded cell by copying what the notebook shows: the figures its tables and
  prints display, the words of its text and of a job's log, and what the lesson's tools print for this
  site's own runs (`lab.predict` asked run by run, at top level, as the notebook invites). Where nothing
  shows an answer, the lazy student's lookup fills the cell (tests/lazy_student.py). No cell of theirs is
  flagged: what they earn, nbgrader and the review agree on.
- The **caller** answers every graded cell by calling the course code that computes the reference
  (`encode_for_training`, the memory model's `estimate`, `fsdp_rules`, the sweep, `diagnose`, ...) and
  otherwise hands in the executed solution: nbgrader gives them (nearly) every point; the integrity scan
  names the reference-only code, and the review withholds every point scored after it.

The course promises that either earns at most 25 % of each notebook's autograded points in the verified
score. Each answer below is the cell's whole source.
"""

from __future__ import annotations

import nbformat

from tests.lazy_student import fill_like_a_lazy_student

COPIER: dict[str, dict[str, str]] = {
    "01_baseline": {
        "nb01-mask-answer": '''
def encode(tok, example, max_length):
    return dict(shown)   # the one encoded example the notebook shows''',
        "nb01-predict": '''
bytes_per_param = {"weights": 4, "gradients": 4, "adam_exp_avg": 4, "adam_exp_avg_sq": 4}   # section 5 measured 4, 4, 8
transient_bytes_per_param = {"bf16_weight_copy": None}   # no table shows it
bloom_560m_state_gb = None''',
        "nb01-13-baseline-table": '''
row = measured.iloc[0]
baseline = {"final_train_loss": row["final_train_loss"], "train_samples_per_s": row["train_samples_per_s"]}''',
    },
    "02_fsdp_single_gpu": {
        "nb02-07-predict": '''
_seen = {"baseline": lab.predict("baseline"), "full_shard": lab.predict("fsdp_1gpu"),
         "full_shard+offload": lab.predict("fsdp_1gpu", offload=True)}   # the memory model for this site's runs


def predict_memory(arch, run, world_size):
    return {k: float(_seen[run][k]) for k in ("params", "grads", "optimizer", "host")}


memory_prediction = {run: predict_memory(arch, run, 1) for run in _seen}''',
        "nb02-36-shard-predict": '''
def shard_shape(shape, world_size, rank):
    return list(shape)   # the run's read-back: its one rank holds every parameter whole


rank2_shapes = {name: shard_shape(shape, 3, 2) for name, shape in bloom_560m_shapes.items()}''',
        "nb02-logits-predict": '''
def logits_mb(batch_size, seq_len, answer_positions, vocab, precision, loss):
    return 0.5 * batch_size * seq_len   # the text: "about half a megabyte per position"


logits_prediction = {loss: logits_mb(6, 384, None, 250880, "bf16", loss) for loss in ("full", "answer_only")}''',
        "nb02-logits-settings": '''
my_logits_settings = {"loss": "answer_only"}   # the setting the text names''',
    },
    "03_sharding_strategies": {
        "nb03-05-predict": '''
runs = {   # the run names are the strategies' names (the table at the top)
    "ddp": dict(step="strategies", sharding="ddp"),
    "full_shard": dict(step="strategies", sharding="full_shard"),
    "shard_grad_op": dict(step="strategies", sharding="shard_grad_op"),
    "offload": dict(step="strategies", sharding="full_shard", offload=True),
    "activation_checkpointing": dict(step="strategies", sharding="full_shard", activation_checkpointing=True),
}''',
        "nb03-ranking": '''
_peaks = {name: float(lab.predict(**spec)["peak"]) for name, spec in runs.items()}   # the tool, run by run
memory_ranking = sorted(_peaks, key=_peaks.get)
held_fraction = {name: 1.0 if name == "ddp" else 0.5 for name in [*runs, "hybrid_shard"]}   # section 3's measurement''',
        "nb03-settings": '''
my_settings = dict(sharding="full_shard", offload=False, activation_checkpointing=True, batch_size=site.batch_size,
                   grad_acc=1)   # section 2's checkpointing run, whose peak fitted the budget''',
        "nb03-comm-predict": '''
def sent_elements(strategy, n_ranks, model, micro_batches=1):
    share = (n_ranks - 1) / n_ranks   # the table "How many bytes each strategy sends", as it prints them
    if strategy == "ddp":
        return {"all_reduce": 2 * share * model["params"]}
    if strategy == "shard_grad_op":
        return {"all_gather": share * model["params"], "reduce_scatter": share * model["params"]}
    return {"all_gather": 2 * share * model["params"], "reduce_scatter": share * model["params"]}


comm_prediction = {name: sent_elements(spec["sharding"], site.world_size, run_model) for name, spec in runs.items()}''',
    },
    "04_multi_gpu": {
        "nb04-predict": '''
_ran = {n: lab.find("multi_gpu", procs_per_node=n).summary() for n in gpu_counts}   # section 4's jobs


def optimizer_steps(train_size, epochs, batch_size, grad_acc, world_size):
    return _ran[max(gpu_counts)]["steps"]


def model_state_mb(n_params, world_size):
    rank = max((_ran.get(world_size) or _ran[max(gpu_counts)])["tensor_mem_mb_per_rank"], key=lambda r: r["peak"])
    return {"grads_mb": rank["grads"], "optimizer_mb": rank["optimizer"]}


activations_vs_one_gpu = "same"   # section 5: activations stay the same at every N
prediction = {n: {"steps": optimizer_steps(0, 0, 0, 0, n), **model_state_mb(n_params, n)} for n in gpu_counts}''',
    },
    "05_multi_node": {
        "nb05-gate-predict": '''
def busbw_over_algbw(collective, n_ranks):
    return 2 * (n_ranks - 1) / n_ranks   # the formula in section 1


highest_busbw_at = "largest"   # the gate reads the largest message
n_gate = lab.config("bandwidth", nodes=2).world_size''',
        "nb05-gate-answer": '''
busbw_largest = None
gate_passes = bandwidth.state().value == "COMPLETED"   # the gate's job fails when the gate does''',
        "nb05-predict-traffic": '''
crosses_network = {"full_shard": ["all_gather", "reduce_scatter"], "hybrid_shard": ["all_reduce"]}   # the text says so


def network_gb_per_node(strategy, nodes, gpus_per_node, psi_gb):
    n = nodes * gpus_per_node   # the rules as the text prints them
    return 3 * (n - 1) / n * psi_gb if strategy == "full_shard" else 2 * (nodes - 1) / nodes * psi_gb / gpus_per_node''',
        "nb05-mesh-answer": '''
def hsdp_mesh(nodes, gpus_per_node):
    return [2, 2]   # this site's layout''',
        "nb05-diagnose-answer": '''
failure = "rendezvous"   # the log's last lines: RendezvousConnectionError
fixed = None''',
    },
}

CALLER: dict[str, dict[str, str]] = {
    "01_baseline": {
        "nb01-mask-answer": '''
def encode(tok, example, max_length):
    return data.encode_for_training(tok, example, max_length)''',
        "nb01-predict": '''
from workshop.results.memory import estimate

_b = estimate("bloom-560m", "none", 1, "bf16", batch_size=1, max_length=1)
bytes_per_param = {"weights": _b.params / _b.n_params, "gradients": _b.grads / _b.n_params,
                   "adam_exp_avg": _b.optimizer / _b.n_params / 2, "adam_exp_avg_sq": _b.optimizer / _b.n_params / 2}
transient_bytes_per_param = {"bf16_weight_copy": 2}
bloom_560m_state_gb = (_b.params + _b.grads + _b.optimizer) / 1e9''',
    },
    "02_fsdp_single_gpu": {
        "nb02-07-predict": '''
from workshop.results.memory import estimate


def predict_memory(arch, run, world_size):
    bd = estimate(arch, "none" if run == "baseline" else "full_shard", world_size, cfg.precision,
                  offload=run.endswith("offload"), device="cpu" if device == "cpu" else "cuda")
    return {k: v for k, v in bd.as_mb().items() if k in ("params", "grads", "optimizer", "host")}


memory_prediction = {run: predict_memory(arch, run, 1) for run in ("baseline", "full_shard", "full_shard+offload")}''',
        "nb02-26-wrap-predict": '''
_a = get_arch("bloom-7b1")
wrap_prediction = {"units": _a.layers + 1, "root_params": _a.root_params}''',
        "nb02-36-shard-predict": '''
from workshop.training import fsdp_rules


def shard_shape(shape, world_size, rank):
    return list(fsdp_rules.shard0_local_shape(shape, world_size, rank))


rank2_shapes = {name: shard_shape(shape, 3, 2) for name, shape in bloom_560m_shapes.items()}''',
        "nb02-logits-predict": '''
from workshop.results.memory import estimate


def logits_mb(batch_size, seq_len, answer_positions, vocab, precision, loss):
    model = next(m for m in ("tiny", "bloom-560m") if get_arch(m).vocab == vocab)
    bd = estimate(model, "full_shard", 1, precision, batch_size, seq_len, loss=loss, answer_tokens=answer_positions)
    return bd.logits / 2**20


logits_prediction = {loss: logits_mb(6, 384, 36, 250880, "bf16", loss) for loss in ("full", "answer_only")}''',
        "nb02-logits-settings": '''
my_logits_settings = {"loss": "answer_only"}''',
    },
    "03_sharding_strategies": {
        "nb03-05-predict": '''
from workshop.course.budget import STATIC_RUNS

runs = {name: spec for name, spec in STATIC_RUNS["03_sharding_strategies"].items() if name != "budget challenge"}''',
        "nb03-ranking": '''
from workshop.training import fsdp_rules

memory_ranking = sorted(runs, key=lambda name: float(lab.predict(**runs[name])["peak"]))
held_fraction = {name: fsdp_rules.held_fraction(spec["sharding"], 16) for name, spec in runs.items()}
held_fraction["hybrid_shard"] = fsdp_rules.held_fraction("hybrid_shard", 16, replicas=2)''',
        "nb03-comm-predict": '''
from workshop.results import comm


def sent_elements(strategy, n_ranks, model, micro_batches=1):
    name = next(m for m in ("tiny", "bloom-560m", "bloom-7b1") if comm.model_facts(m) == model)
    by_kind = comm.predict(name, strategy, n_ranks, grad_acc=micro_batches).by_kind(0)
    return {kind: sums["sent_elements"] for kind, sums in by_kind.items()}


comm_prediction = {name: sent_elements(spec["sharding"], site.world_size, run_model, micro_batches)
                   for name, spec in runs.items()}''',
        "nb03-settings": '''
_row = challenge.load_sweep(lab.profile, lab.overrides).table().iloc[0]   # the sweep's fastest that fits
my_settings = dict(sharding=str(_row["sharding"]), offload=bool(_row["offload"]),
                   activation_checkpointing=bool(_row["activation_checkpointing"]), batch_size=int(_row["batch_size"]),
                   grad_acc=int(_row["grad_acc"]))''',
    },
    "04_multi_gpu": {
        "nb04-settings": '''
from workshop.training import fsdp_rules

settings = {n: fsdp_rules.fewest_micro_batches(global_batch, micro_batch_max, n) for n in gpu_counts}''',
        "nb04-predict": '''
from workshop.results.memory import estimate


def optimizer_steps(train_size, epochs, batch_size, grad_acc, world_size):
    return fsdp_rules.expected_steps(train_size, epochs, batch_size, grad_acc, world_size)


def model_state_mb(n_params, world_size):
    mb = estimate(get_arch(base.model), "full_shard", world_size).as_mb()
    return {"grads_mb": mb["grads"] * n_params / get_arch(base.model).params,
            "optimizer_mb": mb["optimizer"] * n_params / get_arch(base.model).params}


activations_vs_one_gpu = "1/N"
prediction = {n: {"steps": optimizer_steps(base.train_size, base.epochs, settings[n]["batch_size"],
                                           settings[n]["grad_acc"], n), **model_state_mb(n_params, n)}
              for n in gpu_counts}''',
    },
    "05_multi_node": {
        "nb05-gate-predict": '''
from workshop.results.bandwidth import bus_factor


def busbw_over_algbw(collective, n_ranks):
    return bus_factor(n_ranks, collective)


highest_busbw_at = "largest"''',
        "nb05-gate-answer": '''
busbw_largest = measured_bw.rows[-1].busbw_GBps
gate_passes = measured_bw.large_busbw_GBps >= lab.profile.min_busbw_GBps''',
        "nb05-predict-traffic": '''
from workshop.results import traffic

crosses_network = {s: traffic.crossing(s, 2, 2) for s in ("full_shard", "hybrid_shard")}


def network_gb_per_node(strategy, nodes, gpus_per_node, psi_gb):
    return traffic.network_bytes_per_node(strategy, nodes, gpus_per_node, psi_gb)''',
        "nb05-mesh-answer": '''
from workshop.training import fsdp_rules


def hsdp_mesh(nodes, gpus_per_node):
    return fsdp_rules.hsdp_mesh(nodes, gpus_per_node)''',
        "nb05-diagnose-answer": '''
from workshop.results.diagnose import diagnose

failure = diagnose(failed.log_path)[0].kind
fixed = {k: v for k, v in broken.items() if not k.startswith("rdzv_")}''',
    },
}


def _replace(nb: nbformat.NotebookNode, answers: dict[str, str]) -> None:
    ids = {cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"): cell for cell in nb.cells}
    for grade_id, source in answers.items():
        ids[grade_id].source = source.strip("\n")


def copy_like_a_copier(assignment: str):
    """An edit for `Course.submit` of the blank release: the copier's answers."""
    def edit(nb: nbformat.NotebookNode) -> None:
        fill_like_a_lazy_student(nb)
        _replace(nb, COPIER[assignment])
    return edit


def call_like_a_caller(assignment: str):
    """An edit for `Course.submit` of the executed solution: the caller's answers."""
    return lambda nb: _replace(nb, CALLER[assignment])
