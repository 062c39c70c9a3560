"""docs/design.md names every module of workshop/ once, in its module table, and no module that is gone: a newcomer
finds each file's one job and who uses it there. Reads the tree and the document, imports nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tree_modules(package: Path) -> list[str]:
    """`room/module` for every module of a room (its __init__ is the room itself, named in the rooms' table)."""
    return sorted(f"{p.parent.name}/{p.stem}" for p in package.glob("*/*.py") if p.name != "__init__.py")


def table_modules(text: str) -> list[str]:
    return sorted(re.findall(r"^\| `(\w+/\w+)` \|", text, flags=re.M))


def test_the_design_doc_names_every_module_once() -> None:
    named = table_modules((ROOT / "docs" / "design.md").read_text())
    assert len(named) == len(set(named)), "a module is named twice in docs/design.md's module table"
    assert named == tree_modules(ROOT / "workshop")


def test_the_check_sees_a_module_missing(tmp_path: Path) -> None:
    (tmp_path / "room").mkdir()
    for name in ("__init__", "a", "b"):
        (tmp_path / "room" / f"{name}.py").write_text("")
    assert tree_modules(tmp_path) == ["room/a", "room/b"]
    assert table_modules("| `room/a` | job | who |\n") != tree_modules(tmp_path)
