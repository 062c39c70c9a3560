"""No module of workshop/ reaches into another's private names (`from x import _name`, `module._name`): what
two modules share is public in its owner, so renaming a private helper never breaks a neighbour. Read from
the source (AST), nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "workshop"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def bound_modules(tree: ast.AST, known: set[str]) -> dict[str, str]:
    """The names in this source bound to a workshop module (`from workshop.x import y`, `import workshop.x as y`)."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("workshop"):
            bound |= {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names
                      if f"{node.module}.{a.name}" in known}
        elif isinstance(node, ast.Import):
            bound |= {a.asname: a.name for a in node.names if a.asname and a.name in known}
    return bound


def private_uses(path: Path, known: set[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    found = [f"{path.name}:{node.lineno} imports {node.module}.{a.name}" for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("workshop")
             for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    bound = bound_modules(tree, known)
    found += [f"{path.name}:{node.lineno} uses {bound[node.value.id]}.{node.attr}" for node in ast.walk(tree)
              if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
              and node.attr.startswith("_") and not node.attr.startswith("__")]
    return found


def test_no_module_uses_another_modules_private_name() -> None:
    paths = sorted(ROOT.rglob("*.py"))
    known = {module_name(p) for p in paths}
    assert [use for p in paths for use in private_uses(p, known)] == []


def test_the_check_sees_a_private_import(tmp_path: Path) -> None:
    """The rule above fails when a module does it: both forms, on a source written here."""
    (tmp_path / "m.py").write_text("from workshop.training.metrics import _x\nfrom workshop.results import plots\n"
                                   "plots._save(1, 2)\n")
    uses = private_uses(tmp_path / "m.py", {"workshop.results.plots"})
    assert uses == ["m.py:1 imports workshop.training.metrics._x", "m.py:3 uses workshop.results.plots._save"]
