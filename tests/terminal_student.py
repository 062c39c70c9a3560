"""The terminal student (issue 48, item 6): a reader who opens JupyterLab's terminal, imports what the student's
install holds, computes a graded answer there and types the printed value into the answer cell.

No cell of theirs names reference code, so the integrity scan has nothing to flag: what the route earns, the
verified score keeps. It is measured in the student's real install, not in the instructor's: the course package
built as a wheel from the checkout (pyproject.toml's `exclude` decides what it leaves out, today the grading room
`workshop.grading`), put first on the path of a Python started outside the checkout. A route through a module
the wheel leaves out stops with ModuleNotFoundError and its cell keeps the lazy filler's answer.

What each route tries is what the issue's reader tried: the answer key's functions, the reference models
(`workshop.comm.model`, `memory`; `workshop.training.fsdp_rules` and `workshop.comm.traffic` at the paths the
reader found them, which the grading room holds now, so those routes stop at ModuleNotFoundError too), the
course's own run settings.
Only values are typed; a function answer is graded on cases no cell shows, and a function that calls a model
from a cell is the caller's route, which the scan flags (tests/copying_student.py).
"""

from __future__ import annotations

import ast
import atexit
import functools
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent

# By notebook and answer cell: what the reader runs in the terminal, binding the cell's answer names.
TERMINAL: dict[str, dict[str, str]] = {
    "01_baseline": {
        "nb01-eight-bit": '''
from workshop.grading.answer_key import params_that_fit_b, recipe_bytes
eight_bit_bytes_per_param = recipe_bytes("eight_bit")
largest_model_b = {recipe: params_that_fit_b(recipe) for recipe in ("trainer", "eight_bit")}''',
        "nb01-untrained-answer": '''
from workshop.grading import answer_key
untrained_loss = answer_key.untrained_loss_measured''',   # needs the notebook's tokenizer: the import decides
    },
    "02_fsdp_single_gpu": {
        "nb02-eight-bit": '''
from workshop.grading.answer_key import fewest_gpus_for, fsdp_state_gib
eight_bit_7b1_gib = fsdp_state_gib("bloom-7b1", 8)
fewest_gpus_7b1 = fewest_gpus_for("bloom-7b1", 9)''',
        "nb02-26-wrap-predict": '''
from workshop.results.memory import get_arch
_a = get_arch("bloom-7b1")
wrap_prediction = {"units": _a.layers + 1, "root_params": _a.root_params}''',
    },
    "03_sharding_strategies": {
        "nb03-ranking": '''
from workshop.site.budget import STATIC_RUNS
import workshop.training.fsdp_rules as fsdp_rules
_runs = {n: s for n, s in STATIC_RUNS["03_sharding_strategies"].items() if n != "budget challenge"}
held_fraction = {n: fsdp_rules.held_fraction(s["sharding"], 16) for n, s in _runs.items()}
held_fraction["hybrid_shard"] = fsdp_rules.held_fraction("hybrid_shard", 16, replicas=2)''',
        "nb03-comm-bytes": '''
from workshop.comm import model as comm
sent_gb = {s: sum(k["sent_bytes"] for k in comm.predict("bloom-560m", s, 8, precision="bf16", grad_acc=2)
                  .by_kind(0).values()) / 1e9 for s in ("ddp", "shard_grad_op", "full_shard")}
fewer_bytes_than_ddp = [s for s in ("shard_grad_op", "full_shard") if sent_gb[s] < sent_gb["ddp"]]''',
    },
    "04_multi_gpu": {
        # the serial fraction fitted from the student's own table (their jobs' samples per second by GPU count, the
        # numbers the notebook prints) with the rules the reader found: Amdahl's verdict and its fraction
        "nb04-amdahl": '''
import workshop.training.fsdp_rules as fsdp_rules
import json, pathlib
_rate = {s["world_size"]: s["train_samples_per_s"] for s in (json.loads(p.read_text())
         for p in pathlib.Path("jobs").glob("multi_gpu-*/run/summary.json"))}
_ratio, _speedup = max(_rate) / min(_rate), _rate[max(_rate)] / _rate[min(_rate)]
amdahl_fits = fsdp_rules.amdahl_applies(_speedup, _ratio)
serial_fraction = fsdp_rules.serial_fraction(_speedup, _ratio) if amdahl_fits else None''',
    },
    "05_multi_node": {
        "nb05-predict-traffic": '''
import workshop.comm.traffic as traffic
crosses_network = {s: traffic.crossing(s, 2, 2) for s in ("full_shard", "hybrid_shard")}''',
    },
}

# Run in the student's install: each route alone, its bound values printed as literals (or why it stopped).
_RUNNER = '''
import json, sys
out = {}
for grade_id, source in json.load(sys.stdin).items():
    names = {}
    try:
        exec(source, names)
        out[grade_id] = {"values": {k: repr(v) for k, v in names.items() if not k.startswith("_")
                                    and not callable(v) and type(v).__name__ != "module"}}
    except Exception as e:
        out[grade_id] = {"error": f"{type(e).__name__}: {e}"}
print(json.dumps(out))
'''


@functools.lru_cache(maxsize=1)
def students_install() -> Path:
    """The course package as the student installs it (the wheel, unpacked into a folder of its own)."""
    from tests.test_student_install import build_wheel

    where = Path(tempfile.mkdtemp(prefix="terminal-student-"))
    atexit.register(shutil.rmtree, where, True)
    wheel = build_wheel(where)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                    str(where / "site"), str(wheel)], check=True, capture_output=True, text=True)
    return where / "site"


@functools.lru_cache(maxsize=None)
def terminal_values(assignment: str) -> dict[str, dict[str, str]]:
    """What each route of `assignment` printed in the student's terminal: {grade_id: {"values": {name: literal}}}
    or {grade_id: {"error": why it stopped}}. The course's Python, its own package shadowed by the wheel's
    copy (first on the path), started outside the checkout as a student's terminal is."""
    site = students_install()
    # the instructor's editable install maps `workshop.*` to the checkout through a finder of its own: the student's
    # environment has none, so it goes, and the wheel's copy is all that `workshop` holds
    first = (f"import sys; sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, '__module__', '')"
             f".startswith('__editable__')]; sys.path.insert(0, {str(site)!r}); import workshop; "
             f"assert workshop.__file__.startswith({str(site)!r}), workshop.__file__")
    ran = subprocess.run([sys.executable, "-c", f"{first}; exec({_RUNNER!r})"],
                         input=json.dumps(TERMINAL.get(assignment, {})), cwd=site.parent, capture_output=True,
                         text=True, check=True, timeout=300)
    return json.loads(ran.stdout.strip().splitlines()[-1])


def terminal_answers(nb: nbformat.NotebookNode, assignment: str) -> dict[str, str]:
    """By answer cell, the lines the terminal student types: each value the cell's release binds that a route
    printed, as a literal."""
    release: dict[str, set[str]] = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution"):
            release[meta["grade_id"]] = {t.id for node in ast.parse(cell.source).body if isinstance(node, ast.Assign)
                                         for t in node.targets if isinstance(t, ast.Name)}
    out = {}
    for grade_id, result in terminal_values(assignment).items():
        typed = {k: v for k, v in result.get("values", {}).items() if k in release.get(grade_id, ())}
        if typed:
            out[grade_id] = "\n".join(f"{k} = {v}" for k, v in typed.items())
    return out


def type_terminal_answers(nb: nbformat.NotebookNode, assignment: str) -> None:
    """The terminal student's notebook: in each answer cell a route answered, the typed values stand where the
    release's top-level `raise NotImplementedError()` was; every other cell stays blank. No lazy filler (its
    `globals()` is a finding): nothing in the notebook is flagged, so the verified score keeps what this earns."""
    ids = {cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"): cell for cell in nb.cells}
    for grade_id, typed in terminal_answers(nb, assignment).items():
        lines = ids[grade_id].source.split("\n")
        at = max(i for i, line in enumerate(lines) if line == "raise NotImplementedError()")
        ids[grade_id].source = "\n".join(lines[:at] + typed.split("\n") + lines[at + 1:])
