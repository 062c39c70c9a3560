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

import functools

import nbformat

from tests.lazy_student import fill_like_a_lazy_student
from tests.terminal_student import type_terminal_answers

COPIER: dict[str, dict[str, str]] = {
    "01_baseline": {
        "nb01-mask-answer": '''
def encode(tok, example, max_length):
    return dict(shown)   # the one encoded example the notebook shows''',
        "nb01-predict": '''
bytes_per_param = {"weights": 4, "gradients": 4, "adam_exp_avg": 4, "adam_exp_avg_sq": 4}   # section 5 measured 4, 4, 8
transient_bytes_per_param = {"bf16_weight_copy": None}   # no table shows it
bloom_560m_state_gb = None''',
        "nb01-untrained-answer": '''
untrained_loss = None   # no cell shows a loss before the run; the run's own loss comes later''',
        "nb01-eight-bit": '''
eight_bit_bytes_per_param = {"weights": 4, "gradients": 4, "master_weights": 4, "adam_exp_avg": 4,
                             "adam_exp_avg_sq": 4}   # the text's "fp32 master copy", the Trainer's 4 B each
largest_model_b = {"trainer": None, "eight_bit": None}   # no cell or tool prints it''',
        "nb01-13-baseline-table": '''
row = measured.iloc[0]
baseline = {"last_logged_loss": row["last_logged_loss"], "train_samples_per_s": row["train_samples_per_s"]}''',
    },
    "02_fsdp_single_gpu": {
        "nb02-07-predict": '''
_seen = {"baseline": lab.predict("baseline"), "full_shard": lab.predict("fsdp_1gpu"),
         "full_shard+offload": lab.predict("fsdp_1gpu", offload=True)}   # the memory model for this site's runs


def predict_memory(arch, run, world_size):
    return {k: float(_seen[run][k]) for k in ("params", "grads", "optimizer", "host")}


memory_prediction = {run: predict_memory(arch, run, 1) for run in _seen}''',
        "nb02-26-wrap-predict": '''
wrap_prediction = {"units": 24 + 1 + 1, "root_params": 2048}   # the Units table: 24 blocks, the embedding unit, the root''',
        "nb02-36-shard-predict": '''
def shard_shape(shape, world_size, rank):
    return list(shape)   # the run's read-back: its one rank holds every parameter whole


rank2_shapes = {name: shard_shape(shape, 3, 2) for name, shape in bloom_560m_shapes.items()}''',
        "nb02-eight-bit": '''
eight_bit_7b1_gib = None   # no cell, table or tool shows an 8-bit optimizer
fewest_gpus_7b1 = 8        # the largest GPU count the text shows''',
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
        "nb03-comm-bytes": '''
sent_gb = {"ddp": 3.36, "shard_grad_op": 1.68, "full_shard": 2.13}   # the worked example of the text (4 V100s)
fewer_bytes_than_ddp = ["shard_grad_op", "full_shard"]               # as the example has it''',
    },
    "04_multi_gpu": {
        "nb04-settings": '''
settings = {n: {"batch_size": micro_batch_max, "grad_acc": global_batch // (micro_batch_max * n)} for n in gpu_counts}   # the plan's printed figures''',
        "nb04-predict": '''
_ran = {n: lab.find("multi_gpu", procs_per_node=n).summary() for n in gpu_counts}   # section 4's jobs


def optimizer_steps(train_size, epochs, batch_size, grad_acc, world_size):
    return _ran[max(gpu_counts)]["steps"]


def model_state_mb(n_params, world_size, optimizer="adamw"):
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
        "nb05-links-answer": '''
def network_seconds(strategy, nodes, gpus_per_node, psi_gb):
    return None   # no cell prints a time''',
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
        "nb01-untrained-answer": '''
from workshop.grading import answer_key

untrained_loss = answer_key.untrained_loss_measured(tok, examples[:2], config.max_length)''',
        "nb01-eight-bit": '''
from workshop.grading.answer_key import params_that_fit_b, recipe_bytes

eight_bit_bytes_per_param = recipe_bytes("eight_bit")
largest_model_b = {recipe: params_that_fit_b(recipe) for recipe in ("trainer", "eight_bit")}''',
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
from workshop.grading import fsdp_rules


def shard_shape(shape, world_size, rank):
    return list(fsdp_rules.shard0_local_shape(shape, world_size, rank))


rank2_shapes = {name: shard_shape(shape, 3, 2) for name, shape in bloom_560m_shapes.items()}''',
        "nb02-eight-bit": '''
from workshop.grading.answer_key import fewest_gpus_for, fsdp_state_gib

eight_bit_7b1_gib = fsdp_state_gib("bloom-7b1", 8)
fewest_gpus_7b1 = fewest_gpus_for("bloom-7b1", 9)''',
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
from workshop.student.runs import STATIC_RUNS

runs = {name: spec for name, spec in STATIC_RUNS["03_sharding_strategies"].items() if name != "budget challenge"}''',
        "nb03-ranking": '''
from workshop.grading import fsdp_rules

memory_ranking = sorted(runs, key=lambda name: float(lab.predict(**runs[name])["peak"]))
held_fraction = {name: fsdp_rules.held_fraction(spec["sharding"], 16) for name, spec in runs.items()}
held_fraction["hybrid_shard"] = fsdp_rules.held_fraction("hybrid_shard", 16, replicas=2)''',
        "nb03-comm-predict": '''
from workshop.comm import model as comm


def sent_elements(strategy, n_ranks, model, micro_batches=1):
    name = next(m for m in ("tiny", "bloom-560m", "bloom-7b1") if comm.model_facts(m) == model)
    by_kind = comm.predict(name, strategy, n_ranks, grad_acc=micro_batches).by_kind(0)
    return {kind: sums["sent_elements"] for kind, sums in by_kind.items()}


comm_prediction = {name: sent_elements(spec["sharding"], site.world_size, run_model, micro_batches)
                   for name, spec in runs.items()}''',
        "nb03-comm-bytes": '''
from workshop.grading import answer_key

sent_gb = answer_key.node_sent_gb()
fewer_bytes_than_ddp = [s for s in ("shard_grad_op", "full_shard") if sent_gb[s] < sent_gb["ddp"]]''',
        "nb03-settings": '''
_row = challenge.load_sweep(lab.profile, lab.overrides).table().iloc[0]   # the sweep's fastest that fits
my_settings = dict(sharding=str(_row["sharding"]), offload=bool(_row["offload"]),
                   activation_checkpointing=bool(_row["activation_checkpointing"]), batch_size=int(_row["batch_size"]),
                   grad_acc=int(_row["grad_acc"]))''',
    },
    "04_multi_gpu": {
        "nb04-settings": '''
from workshop.grading import fsdp_rules

settings = {n: fsdp_rules.fewest_micro_batches(global_batch, micro_batch_max, n) for n in gpu_counts}''',
        "nb04-predict": '''
from workshop.results.memory import estimate
from workshop.training.counted_steps import expected_steps


def optimizer_steps(train_size, epochs, batch_size, grad_acc, world_size):
    return expected_steps(train_size, epochs, batch_size, grad_acc, world_size)


def model_state_mb(n_params, world_size, optimizer="adamw"):
    b = fsdp_rules.model_state_bytes(n_params, world_size, optimizer)
    return {"grads_mb": b["grads"] / 2**20, "optimizer_mb": b["optimizer"] / 2**20}


activations_vs_one_gpu = "1/N"
prediction = {n: {"steps": optimizer_steps(base.train_size, base.epochs, settings[n]["batch_size"],
                                           settings[n]["grad_acc"], n), **model_state_mb(n_params, n)}
              for n in gpu_counts}''',
        "nb04-amdahl": '''
from workshop.grading import fsdp_rules

_r = max(gpu_counts) / min(gpu_counts)
amdahl_fits = fsdp_rules.amdahl_applies(scaling[max(gpu_counts)]["speedup"], _r)
serial_fraction = fsdp_rules.serial_fraction(scaling[max(gpu_counts)]["speedup"], _r) if amdahl_fits else None


def speedup_at(n, serial):
    return fsdp_rules.amdahl_speedup(serial, n / min(gpu_counts))''',
    },
    "05_multi_node": {
        "nb05-gate-predict": '''
from workshop.comm.bandwidth import bus_factor


def busbw_over_algbw(collective, n_ranks):
    return bus_factor(n_ranks, collective)


highest_busbw_at = "largest"''',
        "nb05-gate-answer": '''
busbw_largest = measured_bw.rows[-1].busbw_GBps
gate_passes = measured_bw.large_busbw_GBps >= lab.profile.min_busbw_GBps''',
        "nb05-predict-traffic": '''
from workshop.grading import traffic

crosses_network = {s: traffic.crossing(s, 2, 2) for s in ("full_shard", "hybrid_shard")}


def network_gb_per_node(strategy, nodes, gpus_per_node, psi_gb):
    return traffic.network_bytes_per_node(strategy, nodes, gpus_per_node, psi_gb)''',
        "nb05-links-answer": '''
from workshop.grading import fsdp_rules


def network_seconds(strategy, nodes, gpus_per_node, psi_gb):
    return fsdp_rules.network_seconds(strategy, nodes, gpus_per_node, psi_gb, busbw_largest)''',
        "nb05-mesh-answer": '''
from workshop.grading import fsdp_rules


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


# ---------------------------------------------------------------------------------------------------------------
# The copier's strategies, one student each (tests/test_course.py grades each and all of them together):
#
# - "printed": COPIER above, what the notebook's prints, tables, text words and a job's log show;
# - "formulas": every formula the text and the hints (visible in the locked test cells) state, applied;
# - "helpers": every public function of `workshop` (and every method of the notebook's `lab`) whose name shares
#   a word with a graded answer's name, called with the arguments its parameter names find in the notebook;
# - "challenge": notebook 03's budget challenge searched with the memory model (`lab.predict`, at top level):
#   the largest micro-batch that fits, no offload, no checkpointing;
# - "together": per cell, the formulas where the text gives one, else what the notebook prints, plus the
#   challenge search and every helper the integrity scan does not flag (the flagged ones withhold every point);
# - "terminal": what the student's install computes in JupyterLab's terminal, typed into the cells as values
#   (tests/terminal_student.py): no cell names reference code, so nothing is flagged.
#
# What none of them does is what only a reader's count shows (docs/grading.md): rearranging a stated formula,
# reading a value off a plot, or adapting a helper's arguments by hand.

FORMULAS: dict[str, dict[str, str]] = {
    "01_baseline": {
        "nb01-predict": '''
bytes_per_param = {"weights": 4, "gradients": 4, "adam_exp_avg": 4, "adam_exp_avg_sq": 4}   # the text's "4 + 4 + 8"
transient_bytes_per_param = {"bf16_weight_copy": 2}   # the text's "the 2 B copy"
bloom_560m_state_gb = 16 * 559_214_592 / 1e9   # the hint: the stored bytes x the parameters''',
        "nb01-13-baseline-table": '''
row = measured.iloc[0]
baseline = {"last_logged_loss": row["last_logged_loss"], "train_samples_per_s": row["train_samples_per_s"]}''',
        "nb01-epoch-answer": '''
squad_epoch_hours = 87_599 / measured.iloc[0]["train_samples_per_s"] / 3600   # the hint's formula''',
    },
    "02_fsdp_single_gpu": {
        "nb02-07-predict": """
def predict_memory(arch, run, world_size):
    # no cell states the rule: notebook 01's bytes per parameter (4 + 4 + 8), and the introduction's "FSDP
    # splits every parameter, gradient and optimizer state" across the N GPUs, "offload moves [them] to host memory"
    P, MB = arch.params, 2**20
    if run == "baseline":
        return {"params": 4 * P / MB, "grads": 4 * P / MB, "optimizer": 8 * P / MB, "host": 0}
    shard = P / world_size
    if run == "full_shard":
        return {"params": 4 * shard / MB, "grads": 4 * shard / MB, "optimizer": 8 * shard / MB, "host": 0}
    return {"params": 0, "grads": 0, "optimizer": 0, "host": 16 * shard / MB}


memory_prediction = {run: predict_memory(arch, run, 1) for run in ("baseline", "full_shard", "full_shard+offload")}
memory_prediction""",
        "nb02-eight-bit": """
_h, _V, _L = 4096, 250_880, 30                               # the text's BLOOM-7b1
_block = 12 * _h**2 + 13 * _h                                # one block, 12h² + 13h (the printed formula)
_P = _V * _h + 4 * _h + _L * _block                          # P = Vh + 4h + L(12h² + 13h), as printed
# bf16 weights 2 B; gradients 2 B (the convention notebooks 01 and 02 state: a gradient is stored in the dtype of
# its parameter); the fp32 master copy 4 B; 8-bit AdamW's two moments 1 B each (notebook 01's text). A strict
# reader's copier applies the stated rule, and so reaches the key: issue 48's rebalancing is still to come.
_stored_bytes = 2 + 2 + 4 + 1 + 1


def _state_gib(n):
    gathered = 2 * (_V * _h + 2 * _h + 2 * _block)          # the embedding unit and two blocks in flight, bf16
    return (_stored_bytes * _P / n + gathered) / 2**30


eight_bit_7b1_gib = _state_gib(8)
fewest_gpus_7b1 = next(n for n in range(1, 10_000) if _state_gib(n) <= 9)   # the text's budget
eight_bit_7b1_gib, fewest_gpus_7b1""",
        "nb02-11-settings": """
blocks = {"version": 2, "transformer_layer_cls_to_wrap": ["BloomBlock"], "reshard_after_forward": True}   # the bullets
my_fsdp = {
    "full_shard": {"fsdp": "full_shard auto_wrap", "fsdp_config": blocks},
    "full_shard+offload": {"fsdp": "full_shard auto_wrap offload", "fsdp_config": {**blocks, "cpu_offload": True}},
}
my_fsdp""",
        "nb02-26-wrap-predict": """
h, V, L = 4096, 250_880, 30   # the text's BLOOM-7b1
# one unit per block and the root; the Units table's root row: `word_embeddings_layernorm`, 2,048 = 2h
wrap_prediction = {"units": L + 1, "root_params": 2 * h}
wrap_prediction""",
        "nb02-28-wrap-function": """
def shard_model(model):
    policy = MixedPrecisionPolicy(param_dtype=COMPUTE_DTYPE, reduce_dtype=torch.float32)   # as the text dictates
    for block in model.transformer.h:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)


my_wrap = job_settings(shard_model, "shard_model.py")   # writes the file your job imports
my_wrap""",
        "nb02-36-shard-predict": """
import math


def shard_shape(shape, world_size, rank):
    rows = shape[0]
    chunk = math.ceil(rows / world_size)                           # "⌈d₀/N⌉ rows"
    return [max(0, min(chunk, rows - rank * chunk)), *shape[1:]]   # "fewer (or none) on the last ranks"


rank2_shapes = {name: shard_shape(shape, 3, 2) for name, shape in bloom_560m_shapes.items()}
rank2_shapes""",
        "nb02-logits-predict": """
def logits_mb(batch_size, seq_len, answer_positions, vocab, precision, loss):
    rows = batch_size * seq_len if loss == "full" else answer_positions   # "every position"; "one row per such position"
    return rows * vocab * (4 if precision == "fp32" else 2) / 2**20       # "4 bytes per element in fp32, 2 in bf16 or fp16"


# "the answer's tokens and the EOS after them": 5 + 1 positions per example
logits_prediction = {loss: logits_mb(6, 384, 6 * (5 + 1), 250880, "bf16", loss) for loss in ("full", "answer_only")}
logits_prediction""",
        "nb02-logits-settings": """
my_logits_settings = {"loss": "answer_only"}   # the setting the text names""",
    },
    "03_sharding_strategies": {
        "nb03-05-predict": """
runs = {   # the text: sharding in the course's words; offload and checkpointing on a full_shard run
    "ddp": dict(step="strategies", sharding="ddp"),
    "full_shard": dict(step="strategies", sharding="full_shard"),
    "shard_grad_op": dict(step="strategies", sharding="shard_grad_op"),
    "offload": dict(step="strategies", sharding="full_shard", offload=True),
    "activation_checkpointing": dict(step="strategies", sharding="full_shard", activation_checkpointing=True),
}""",
        "nb03-ranking": """
_peaks = {name: float(lab.predict(**spec)["peak"]) for name, spec in runs.items()}   # the tool the text names
memory_ranking = sorted(_peaks, key=_peaks.get)
# the table at the top: ddp keeps everything, every FSDP run 1/N (N = 16); hybrid_shard shards within
# groups of S = 8 GPUs (the hint: "the GPUs of a shard group share one copy")
held_fraction = {name: 1.0 if spec["sharding"] == "ddp" else 1 / 16 for name, spec in runs.items()}
held_fraction["hybrid_shard"] = 1 / 8
memory_ranking, held_fraction""",
        "nb03-comm-predict": """
def sent_elements(strategy, n_ranks, model, micro_batches=1):
    share = (n_ranks - 1) / n_ranks                      # the ring rule: (N-1)/N, 2(N-1)/N for an all-reduce
    if strategy == "ddp":                                # the table at the top: "all-reduce of the gradients"
        return {"all_reduce": 2 * share * model["params"]}
    gathers = 2 if strategy == "full_shard" else 1       # "all-gather in forward *and* in backward" / "once"
    # "a rank runs micro_batches forwards and backwards per optimizer step, and only the last of them
    # synchronises the gradients"
    return {"all_gather": micro_batches * gathers * share * model["params"], "reduce_scatter": share * model["params"]}


comm_prediction = {name: sent_elements(spec["sharding"], site.world_size, run_model, micro_batches)
                   for name, spec in runs.items()}
comm_prediction""",
        "nb03-comm-bytes": """
_bloom = {"params": 559214592, "kept_gathered": 256905216, "tensors": 293}   # printed by the cell above
_micro = 64 // (8 * 4)   # micro-batch x accumulation x GPUs = the global batch (section 4's rule)
# the concept's dtypes: DDP's fp32 gradients, FSDP's units in the compute dtype, reduce-scatters in the reduce dtype
_el = {s: sent_elements(s, 8, _bloom, _micro) for s in ("ddp", "shard_grad_op", "full_shard")}
sent_gb = {"ddp": _el["ddp"]["all_reduce"] * 4 / 1e9}   # "DDP's gradients travel in fp32"
for _s in ("shard_grad_op", "full_shard"):   # all-gathers in the compute dtype, reduce-scatters in the reduce dtype
    # (bf16: fp32 only on fp16 sites), clipping's norms fp32
    sent_gb[_s] = ((_el[_s]["all_gather"] + _el[_s]["reduce_scatter"]) * 2 + _el[_s].get("all_reduce", 0) * 4) / 1e9
fewer_bytes_than_ddp = [s for s in ("shard_grad_op", "full_shard") if sent_gb[s] < sent_gb["ddp"]]
sent_gb, fewer_bytes_than_ddp""",
    },
    "04_multi_gpu": {
        "nb04-settings": '''
settings = {n: {"batch_size": micro_batch_max, "grad_acc": global_batch // (micro_batch_max * n)}
            for n in gpu_counts}   # batch_size x grad_acc x N = global_batch, batch_size at most micro_batch_max''',
        "nb04-predict": '''
import math


def optimizer_steps(train_size, epochs, batch_size, grad_acc, world_size):
    per_epoch = math.ceil(math.ceil(train_size / (batch_size * world_size)) / grad_acc)   # the bulleted recipe
    return math.ceil(epochs * per_epoch)


def model_state_mb(n_params, world_size, optimizer="adamw"):
    return {"grads_mb": 4 * n_params / world_size / 2**20,   # "16 B ... becomes 16 B / N": 4 B gradient,
            "optimizer_mb": 8 * n_params / world_size / 2**20}   # 8 B of AdamW moments


activations_vs_one_gpu = "same"   # section 5's text: "activations stay"
prediction = {n: {"steps": optimizer_steps(base.train_size, base.epochs, settings[n]["batch_size"],
                                           settings[n]["grad_acc"], n), **model_state_mb(n_params, n)}
              for n in gpu_counts}''',
        "nb04-12-scaling-table": '''
smallest = min(gpu_counts)
scaling = {n: {"speedup": measured.loc[n, "samples_per_s"] / measured.loc[smallest, "samples_per_s"],
               "efficiency": measured.loc[n, "samples_per_s"] / measured.loc[smallest, "samples_per_s"] / (n / smallest)}
           for n in gpu_counts}   # the text's speed-up and efficiency''',
        "nb04-amdahl": '''
amdahl_fits = True   # the text asks for a fraction: assume there is one
serial_fraction = 1 - scaling[max(gpu_counts)]["efficiency"]   # what the efficiency lost: no text states it


def speedup_at(n, serial):
    return n / min(gpu_counts) * (1 - serial)   # the efficiency 1 - serial held at every N''',
    },
    "05_multi_node": {
        "nb05-gate-predict": '''
def busbw_over_algbw(collective, n_ranks):
    return 2 * (n_ranks - 1) / n_ranks if collective == "all_reduce" else (n_ranks - 1) / n_ranks   # section 1


highest_busbw_at = "largest"   # "the gate reads the bus bandwidth at the largest message"
n_gate = lab.config("bandwidth", nodes=2).world_size''',
        "nb05-gate-answer": '''
busbw_largest = raw["algbw_GBps"].iloc[-1] * busbw_over_algbw("all_reduce", measured_bw.n_ranks)   # the hint's product
gate_passes = bool(max(busbw_largest, raw["inplace_algbw_GBps"].iloc[-1] * busbw_over_algbw("all_reduce", measured_bw.n_ranks))
                   >= lab.profile.min_busbw_GBps)''',
        "nb05-predict-traffic": '''
crosses_network = {"full_shard": ["all_gather", "reduce_scatter"], "hybrid_shard": ["all_reduce"]}   # the text says so


def network_gb_per_node(strategy, nodes, gpus_per_node, psi_gb):
    n = nodes * gpus_per_node   # the ring rules as the text prints them, for one rank
    return 3 * (n - 1) / n * psi_gb if strategy == "full_shard" else 2 * (nodes - 1) / nodes * psi_gb / gpus_per_node''',
        "nb05-links-answer": '''
def network_seconds(strategy, nodes, gpus_per_node, psi_gb):
    return network_gb_per_node(strategy, nodes, gpus_per_node, psi_gb) / busbw_largest   # bytes over bandwidth''',
        "nb05-mesh-answer": '''
def hsdp_mesh(nodes, gpus_per_node):
    return [nodes, gpus_per_node]   # "sharded inside a node and replicated across nodes"''',
        "nb05-diagnose-answer": '''
failure = "rendezvous"   # the log's last lines: RendezvousConnectionError
fixed = None''',
    },
}

CHALLENGE: dict[str, dict[str, str]] = {
    "03_sharding_strategies": {
        "nb03-settings": '''
_per_gpu = terms["global_batch"] // terms["gpus"]
_fits = []
for _sharding in terms["strategies"]:   # the memory model, asked at top level, for every plain choice
    for _b in range(1, _per_gpu + 1):
        if _per_gpu % _b == 0:
            _s = dict(sharding=_sharding, offload=False, activation_checkpointing=False, batch_size=_b,
                      grad_acc=_per_gpu // _b)
            _peak = float(lab.predict("strategies", **_s)["peak"])
            if _peak <= terms["budget_mb"]:
                _fits.append((_b, -_peak, _s))
my_settings = max(_fits, key=lambda f: f[:2])[2] if _fits else dict(
    sharding="full_shard", offload=False, activation_checkpointing=True, batch_size=1, grad_acc=_per_gpu)''',
    },
}

# The challenge's rules as section 4 states them ("micro-batch x accumulation x GPUs must make the global batch",
# ask lab.predict against the budget, no offload, recomputation or extra micro-batches a fitting choice avoids):
# the formulas copier applies them as the challenge search does.
FORMULAS["03_sharding_strategies"]["nb03-settings"] = CHALLENGE["03_sharding_strategies"]["nb03-settings"]

# Routes a reader found that share no word with the graded name (the list): tried by the helpers copier too.
NAMED_HELPER_ROUTES: dict[str, dict[str, str]] = {
    "01_baseline": {"encode": "data.EncodedDataset(tok, [example], max_length)[0]"},
}

STOPWORDS = {"mb", "gb", "per", "at", "of", "the", "to", "vs", "one", "gpu", "gpus", "your", "my", "all", "is", "in"}


def _words(name: str) -> set[str]:
    return {w for w in name.lower().split("_") if len(w) >= 3 and w not in STOPWORDS}


@functools.lru_cache(maxsize=1)
def public_helpers() -> list[tuple[str, str, list[str], list[str]]]:
    """Every public function of the `workshop` package and every public method of `Lab`: (where, name, required
    parameters, all parameters). `where` is a module to import from, or "lab" for the notebook's own `lab`."""
    import importlib
    import inspect
    import pkgutil

    import workshop
    from workshop.student.lab import Lab

    found: list[tuple[str, str, list[str], list[str]]] = []

    def add(where: str, name: str, fn: object, skip_self: bool = False) -> None:
        try:
            params = list(inspect.signature(fn).parameters.values())[int(skip_self):]
        except (TypeError, ValueError):
            return
        plain = [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        found.append((where, name, [p.name for p in plain if p.default is p.empty], [p.name for p in plain]))

    for info in pkgutil.walk_packages(workshop.__path__, "workshop."):
        if info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception:   # a module that needs what this machine lacks: a student's kernel lacks it too
            continue
        for name, obj in vars(module).items():
            if not name.startswith("_") and inspect.isfunction(obj) and obj.__module__ == module.__name__:
                add(info.name, name, obj)
    for name, obj in vars(Lab).items():
        if not name.startswith("_") and inspect.isfunction(obj):
            add("lab", name, obj, skip_self=True)
    return found


def _flagged(where: str, name: str, inside_function: bool) -> bool:
    """Whether the integrity scan flags this helper in a student's cell (reference-only code, or a lesson tool
    inside a function)."""
    from workshop.grading import scan

    if name in scan.REFERENCE_NAMES or where in scan.REFERENCE_MODULES:
        return True
    short = where.rsplit(".", 1)[-1]
    return short in scan.REFERENCE_NAMES or (inside_function and name in scan.TOOLS)


def _answer_names(nb: nbformat.NotebookNode) -> tuple[dict[str, dict[str, list[str] | None]], set[str], dict[str, str]]:
    """By answer cell: the graded names it binds (a function's parameters, or None for a value); and every
    name a locked cell of the notebook binds at top level (what a helper's parameter may be given)."""
    import ast

    answers: dict[str, dict[str, list[str] | None]] = {}
    known: set[str] = set()
    signatures: dict[str, str] = {}   # a function answer's parameters as the release writes them (defaults kept)
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        names: dict[str, list[str] | None] = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                names[node.name] = [a.arg for a in node.args.args]
                signatures[node.name] = ast.unparse(node.args)
            elif isinstance(node, ast.Assign):
                names.update({t.id: None for t in node.targets if isinstance(t, ast.Name)})
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                known.update((a.asname or a.name).split(".")[0] for a in node.names)
        if meta.get("solution"):
            answers[meta["grade_id"]] = names
        elif meta.get("locked") or not meta:
            known.update(names)
    return answers, known, signatures


def _helper_calls(graded: str, params: list[str] | None, known: set[str], helpers, assignment: str,
                  keep_flagged: bool) -> list[tuple[str, str]]:
    """(import line, call expression) for every helper that matches `graded` and whose required parameters
    the answer's own parameters or the notebook's names supply."""
    words = _words(graded)
    calls = []
    route = NAMED_HELPER_ROUTES.get(assignment, {}).get(graded)
    if route:
        calls.append(("", route))
    for where, name, required, every in sorted(helpers, key=lambda h: (h[1] != graded, h[0], h[1])):
        if name != graded and not words & _words(name):
            continue
        # every call is tried inside a `lambda`, which the scan reads as a function: a lesson tool there is flagged
        if not keep_flagged and _flagged(where, name, inside_function=True):
            continue
        supply = set(params or ()) | known
        if not set(required) <= supply:
            continue
        args = ", ".join(f"{p}={p}" for p in every if p in supply)
        if where == "lab":
            calls.append(("", f"lab.{name}({args})"))
        else:
            alias = f"_h_{where.replace('.', '_')}_{name}"
            calls.append((f"from {where} import {name} as {alias}", f"{alias}({args})"))
    return calls


def helper_source(nb: nbformat.NotebookNode, assignment: str, keep_flagged: bool = True,
                  answered: frozenset[str] = frozenset()) -> dict[str, str]:
    """The helpers copier's code, appended to each answer cell: every matching helper tried in turn; a value
    is bound when the cell left it None (or a dict holding None), a function answers with the first helper
    that does not raise."""
    helpers = public_helpers()
    answers, known, signatures = _answer_names(nb)
    out: dict[str, str] = {}
    for grade_id, names in answers.items():
        lines: list[str] = []
        for graded, params in names.items():
            if params is not None and graded in answered:   # another strategy wrote this function already
                continue
            calls = _helper_calls(graded, params, known, helpers, assignment, keep_flagged)
            if not calls:
                continue
            lines += sorted({imp for imp, _ in calls if imp})
            tries = ", ".join(f"lambda: {call}" for _, call in calls)
            if params is not None:
                lines.append(f"def {graded}({signatures[graded]}):\n    for _call in ({tries},):\n        try:\n"
                             f"            return _call()\n        except Exception:\n            pass\n"
                             f"    raise NotImplementedError()")
            else:
                lines.append(f"for _call in ({tries},):\n    if {graded} is None or (isinstance({graded}, dict) and "
                             f"None in {graded}.values()):\n        try:\n            {graded} = _call()\n"
                             f"        except Exception:\n            pass")
        if lines:
            out[grade_id] = "\n".join(lines)
    return out


STRATEGIES = ("printed", "formulas", "helpers", "challenge", "together", "terminal")


def _append(nb: nbformat.NotebookNode, answers: dict[str, str]) -> None:
    """Each source added to its cell right after the student's part (the last function the cell defines, or
    the filler at top level), before what the cell then computes with those functions: a call of a function
    left unwritten would stop the cell first."""
    import ast

    ids = {cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"): cell for cell in nb.cells}
    for grade_id, source in answers.items():
        if grade_id not in ids:
            continue
        lines = ids[grade_id].source.rstrip("\n").split("\n")
        body = ast.parse("\n".join(lines)).body
        ends = [node.end_lineno for node in body if isinstance(node, ast.FunctionDef)
                or (isinstance(node, ast.For) and "_name" in ast.unparse(node.target))]   # the lazy filler's loop
        cut = max(ends) if ends else len(lines)
        ids[grade_id].source = "\n".join(lines[:cut] + source.strip("\n").split("\n") + lines[cut:])


def copy_by(strategy: str, assignment: str):
    """An edit for `Course.submit` of the blank release: the copier's answers by one strategy, or all together.
    Answer cells another branch renamed are left to the lazy filler (no KeyError: the strategy earns less)."""
    import ast

    def edit(nb: nbformat.NotebookNode) -> None:
        if strategy == "terminal":   # values typed from the student's terminal (tests/terminal_student.py)
            type_terminal_answers(nb, assignment)
            return
        ids = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb.cells}
        pick = lambda answers: {k: v for k, v in answers.get(assignment, {}).items() if k in ids}   # noqa: E731
        mine = {}
        for use, answers in (("printed", COPIER), ("formulas", FORMULAS), ("challenge", CHALLENGE)):
            if strategy in (use, "together"):
                mine.update(pick(answers))   # later strategies win a cell: formulas over what is printed
        written = frozenset(node.name for source in mine.values() for node in ast.parse(source).body
                            if isinstance(node, ast.FunctionDef) and "return None" not in ast.unparse(node))
        helpers = (helper_source(nb, assignment, keep_flagged=strategy == "helpers", answered=written)
                   if strategy in ("helpers", "together") else {})
        fill_like_a_lazy_student(nb)
        _replace(nb, mine)
        _append(nb, helpers)
    return edit
