"""The package's rooms hold: each imports only the rooms before it in LAYERS (training, slurm, results, comm,
bench, then the student's, the site admin's and the grader's rooms), so the student's code imports nothing of
the site's or the grader's; and no module imports itself back through others (lazy and type-checking imports count). Read from the source (AST), nothing imported: fast."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "workshop"
LAYERS = ("workshop.training", "workshop.slurm", "workshop.results", "workshop.comm", "workshop.bench",
          "workshop.student", "workshop.site", "workshop.grading")
TOP = {"workshop", "workshop.__main__", "workshop.cli"}


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, known: set[str]) -> set[str]:
    """The workshop modules `path` imports anywhere (top level, in functions, under TYPE_CHECKING)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("workshop")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("workshop"):
            for a in node.names:    # `from pkg import submodule` imports the submodule; else the module
                out.add(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module)
    return out


GRAPH = {name: imports(path, set(modules())) for name, path in modules().items()}


def layer(name: str) -> int | None:
    return next((i for i, p in enumerate(LAYERS) if name == p or name.startswith(p + ".")), None)


def test_every_module_lives_in_a_layer() -> None:
    assert {m for m in GRAPH if layer(m) is None} <= TOP


def test_each_layer_imports_only_the_layers_before_it() -> None:
    wrong = sorted(f"{m} imports {d}" for m, deps in GRAPH.items() if layer(m) is not None
                   for d in deps if d not in TOP and (layer(d) is None or layer(d) > layer(m)))
    assert wrong == []


def test_no_import_cycle() -> None:
    cycles = []
    for start in GRAPH:
        stack, seen = [(start, (start,))], set()
        while stack:
            node, path = stack.pop()
            for dep in GRAPH.get(node, ()):
                if dep == start:
                    cycles.append(" -> ".join((*path, dep)))
                elif dep not in seen:
                    seen.add(dep)
                    stack.append((dep, (*path, dep)))
    assert cycles == []
