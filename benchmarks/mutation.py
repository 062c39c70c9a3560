"""`make mutation`: how many one-line mistakes in the modules that grade students and instructors do the
fast tests catch? Runs mutmut 3 (pyproject's [tool.mutmut]: the modules, and the fast tests that reach
them; each mutant runs only the tests that reach its function), then writes
benchmarks/cpu/mutation-DATE.md: the score per module and the mutants that survive.

    .venv/bin/python benchmarks/mutation.py            # run, then report (about an hour on 2 busy cores)
    .venv/bin/python benchmarks/mutation.py --report   # report the last run (mutants/ as it was left)

Score: killed / (mutants that change behaviour). A mutant that times out was caught (it changed what
the code does so much that the tests could not finish). Mutants that do not change behaviour
(equivalent mutants) are listed, each with its reason, in benchmarks/mutation_equivalent.toml and
left out of the denominator; every other survivor counts against the score and is listed by name.
The tests are the fast tier's (`-m fast`, tests/tiers.py) of the files pyproject lists: no test that starts a
process runs once per mutant. Not part of CI: the suite's 40-minute budget is for the tests themselves.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENT = ROOT / "benchmarks" / "mutation_equivalent.toml"
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 36: "timeout", 24: "timeout",
          -24: "timeout", 152: "timeout", 255: "timeout", None: "not checked"}
TARGET = 0.85


def sample(per_module: int, seed: int = 0) -> list[str]:
    """Up to `per_module` mutants of each module, drawn at random (a fixed seed: the same draw for the same
    code), for a measured estimate of the score where the full run does not fit the time at hand."""
    import random

    names = sorted(results())
    rng = random.Random(seed)
    picked = []
    for module in sorted({module_of(m) for m in names}):
        mine = [m for m in names if module_of(m) == module]
        picked += sorted(rng.sample(mine, min(per_module, len(mine))))
    return picked


def run(children: int, names: list[str] | None = None) -> int:
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    mutmut = str(ROOT / ".venv" / "bin" / "mutmut")
    # the lowest priority: the machine's other work (a course run, the suite) keeps its cores
    return subprocess.run(["nice", "-n", "19", mutmut, "run", "--max-children", str(children), *(names or [])],
                          cwd=ROOT, env=env).returncode


def results() -> dict[str, str]:
    """Every mutant's status, from the .meta files mutmut leaves beside each mutated module."""
    out = {}
    for meta in sorted((ROOT / "mutants").rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        for name, code in data.get("exit_code_by_key", {}).items():
            out[name] = STATUS.get(code, "suspicious")
    return out


def module_of(mutant: str) -> str:
    return mutant.rsplit(".", 1)[0]


HELP_KEYWORDS = frozenset({"help", "description", "epilog"})
HELP_REASON = "argparse help text: changes `--help` only"


def help_text_only(mutant: str, root: Path = ROOT) -> bool:
    """Whether the mutant changes nothing but an argparse text a user reads in `--help` (a `help=`,
    `description=` or `epilog=` value, or its removal): an equivalent mutant, kept out of the score as the
    11-26 report kept each such one by hand. Read from the mutated module mutmut wrote (mutants/...): the
    mutant's function and the original, compared with those keywords dropped from every call."""
    import ast

    module, function = mutant.rsplit(".", 1)
    path = root / "mutants" / Path(*module.split(".")).with_suffix(".py")
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return False
    orig = function.rsplit("__mutmut_", 1)[0] + "__mutmut_orig"
    found = {node.name: node for node in ast.walk(tree)
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in (function, orig)}
    if set(found) != {function, orig}:
        return False
    (mutated, _), (original, had_help) = _without_help(found[function]), _without_help(found[orig])
    return had_help and mutated == original


def _without_help(function: "ast.FunctionDef | ast.AsyncFunctionDef") -> tuple[str, bool]:
    """The function's body with every call's help-text keywords dropped, and whether it held any."""
    import ast
    import copy

    body, dropped = copy.deepcopy(function.body), 0
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Call):
            kept = [k for k in node.keywords if k.arg not in HELP_KEYWORDS]
            dropped += len(node.keywords) - len(kept)
            node.keywords = kept
    return "\n".join(ast.dump(n) for n in body), dropped > 0


def report(statuses: dict[str, str], known: set[str] | None = None) -> tuple[str, float]:
    """The report's text and score over `statuses`; `known` (every mutant's name, where `statuses` is a sample)
    tells an equivalent that is gone from one that was not drawn."""
    equivalent = tomllib.loads(EQUIVALENT.read_text()).get("equivalent", {}) if EQUIVALENT.is_file() else {}
    equivalent.update({m: HELP_REASON for m, s in statuses.items()
                       if s in ("survived", "no tests") and m not in equivalent and help_text_only(m)})
    stale = sorted(set(equivalent) - (known if known is not None else set(statuses)))
    lines = [f"# Mutation score, {dt.date.today().isoformat()}", "",
             f"mutmut 3 over pyproject's [tool.mutmut] modules with the fast tests it lists (`make mutation`); "
             f"commit {_git('rev-parse', '--short', 'HEAD')}, {platform.node()}, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}.", "",
             "| module | mutants | killed | timeout | survived | no tests | equivalent | not checked | score |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    totals: Counter[str] = Counter()
    for module in sorted({module_of(m) for m in statuses}):
        mine = {m: s for m, s in statuses.items() if module_of(m) == module}
        c = Counter(mine.values())
        eq = sum(1 for m, s in mine.items() if m in equivalent and s not in ("killed", "not checked"))
        caught = c["killed"] + c["timeout"]
        changing = len(mine) - eq - c["not checked"]
        totals.update(c)
        totals["equivalent"] += eq
        totals["mutants"] += len(mine)
        lines.append(f"| {module} | {len(mine)} | {c['killed']} | {c['timeout']} | {c['survived']} | {c['no tests']} | "
                     f"{eq} | {c['not checked']} | {caught / changing:.1%} |" if changing
                     else f"| {module} | {len(mine)} | | | | | | {c['not checked']} | |")
    changing = totals["mutants"] - totals["equivalent"] - totals["not checked"]
    score = (totals["killed"] + totals["timeout"]) / changing if changing else 0.0
    strict = totals["killed"] / changing if changing else 0.0
    lines.append(f"| **all** | {totals['mutants']} | {totals['killed']} | {totals['timeout']} | {totals['survived']} | "
                 f"{totals['no tests']} | {totals['equivalent']} | {totals['not checked']} | **{score:.1%}** |")
    lines += ["", f"Score: {score:.1%} of the {changing} mutants that change behaviour are caught (killed or timed "
              f"out); target {TARGET:.0%}: {'met' if score >= TARGET else 'NOT met'}. Counting only the killed ones "
              f"(a timeout on a busy machine may be the machine's): {strict:.1%}.", ""]
    if totals["not checked"]:
        lines += [f"{totals['not checked']} mutant(s) were not checked (an interrupted run): the score is over the "
                  f"{changing} that were.", ""]
    lines += ["## Survivors left on purpose (equivalent mutants)", "",
              "Each changes the code but not what it does; `mutmut show NAME` prints the change.", ""]
    left = sorted(m for m in equivalent if statuses.get(m) not in (None, "killed"))
    lines += [f"- `{m}`: {equivalent[m]}" for m in left if equivalent[m] != HELP_REASON]
    helps = [m for m in left if equivalent[m] == HELP_REASON]
    if helps:
        lines += [f"- {len(helps)} that change an argparse help text only (`--help`; found by help_text_only): "
                  + ", ".join(f"`{m.rsplit('.', 1)[1]}` ({module_of(m)})" for m in helps)]
    killed_anyway = sorted(m for m in equivalent if statuses.get(m) == "killed")
    if killed_anyway or stale:
        lines += ["", "Listed as equivalent but killed or gone (the list is out of date): "
                  + ", ".join(f"`{m}`" for m in killed_anyway + stale)]
    others = sorted(m for m, s in statuses.items() if s in ("survived", "no tests", "suspicious") and m not in equivalent)
    lines += ["", "## Other survivors (they count against the score)", ""]
    lines += [f"- `{m}` ({statuses[m]})" for m in others] or ["none"]
    return "\n".join(lines) + "\n", score


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() or "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--report", action="store_true", help="only report the last run's results")
    p.add_argument("--children", type=int, default=2, help="mutants tested side by side")
    p.add_argument("--sample", type=int, default=0,
                   help="test only this many mutants of each module, drawn at random (needs the mutants generated "
                        "by an earlier run, which may be interrupted once it tests them); 0 = every mutant")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "cpu")
    args = p.parse_args(argv)
    if args.sample and not args.report and not results():
        print("mutation: --sample draws from the mutants mutmut has generated, and there are none under mutants/: "
              "run `.venv/bin/mutmut run` first and stop it (Ctrl-C) once it tests mutants, then --sample again "
              "(without them every mutant would be tested)", file=sys.stderr)
        return 2
    names = sample(args.sample) if args.sample else None
    if not args.report and run(args.children, names) != 0:
        print("mutation: mutmut failed (its output is above)", file=sys.stderr)
        return 2
    everything = results()
    statuses = {m: s for m, s in everything.items() if m in set(names)} if names else everything
    if not statuses:
        print("mutation: no mutmut results under mutants/: run without --report first", file=sys.stderr)
        return 2
    text, score = report(statuses, set(everything))
    if names:
        text = text.replace("\n\n| module", f"\n\nA sample: {args.sample} mutants of each module drawn at random "
                            "(seed 0), not all of them.\n\n| module", 1)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"mutation-{dt.date.today().isoformat()}.md"
    path.write_text(text)
    print(text.split("## Survivors")[0] + f"report: {path.relative_to(ROOT)}")
    return 0 if score >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
