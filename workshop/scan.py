"""Static scan of a submission's editable cells for code that could talk the grading round.

nbgrader restores the source of every locked cell it finds by grade id (from the gradebook), but
runs everything else the student wrote in the same kernel first: answer cells, the parameters cell,
cells they inserted. Code there can rebind a name the test cells use, patch a module the checks
import, make an answer compare equal to anything, or hide the tracebacks by which nbgrader sees a
failed test. The independent re-run (`workshop.integrity`) already withholds the points such code
wins; this scan says *why*, in one line per finding, for the instructor to read.

It reads code, it does not run it: a finding is a reason to look, not a proof.
"""

from __future__ import annotations

import ast
import re
import symtable
from dataclasses import dataclass
from typing import Iterable

# Attribute or name mentions that only tampering needs in an exercise answer.
SUSPECT_ATTRIBUTES = {
    "modules": "touches sys.modules", "stdout": "redirects or touches sys.stdout",
    "stderr": "redirects or touches sys.stderr", "excepthook": "replaces sys.excepthook (hides tracebacks)",
    "showtraceback": "patches IPython's showtraceback (hides tracebacks)",
    "set_custom_exc": "installs an IPython exception handler (hides tracebacks)",
    "events": "registers an IPython event hook", "settrace": "installs a trace function",
    "setprofile": "installs a profile function", "environ": "changes the environment grading reads",
    "putenv": "changes the environment grading reads", "unsetenv": "changes the environment grading reads",
    "dup2": "redirects a file descriptor (stdout/stderr)", "__globals__": "reaches into a function's globals",
    "__code__": "replaces a function's code", "__subclasses__": "walks the class hierarchy",
    "__builtins__": "touches builtins", "_replay": "touches the grader's replay switch",
}
SUSPECT_NAMES = {
    "setattr": "sets an attribute by name (setattr)", "delattr": "deletes an attribute by name (delattr)",
    "globals": "rewrites names through globals()", "locals": "rewrites names through locals()",
    "vars": "rewrites names through vars()", "exec": "runs generated code (exec)",
    "eval": "runs generated code (eval)", "compile": "compiles generated code",
    "__import__": "imports dynamically", "__builtins__": "touches builtins",
    "get_ipython": "uses IPython's shell (get_ipython, a %magic or !command): event hooks, output capture, "
                   "exception handlers",
    "redirect_stdout": "redirects stdout", "redirect_stderr": "redirects stderr",
}
SUSPECT_MODULES = {
    "builtins": "imports builtins", "importlib": "imports importlib (reloads or replaces modules)",
    "ctypes": "imports ctypes", "gc": "imports gc (finds objects to patch)", "inspect": "imports inspect",
    "subprocess": "starts processes", "atexit": "imports atexit", "signal": "imports signal",
}
COMPARISON_DUNDERS = {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__float__",
                      "__int__", "__index__", "__abs__", "__sub__", "__rsub__", "__round__", "__hash__",
                      "__getattr__", "__getattribute__", "__getitem__", "__instancecheck__"}
# Modules whose attributes a student's cell has no reason to assign.
MODULE_ROOTS = {"sys", "builtins", "os", "IPython", "workshop", "pandas", "pd", "numpy", "np", "math", "json", "io"}


@dataclass
class Cell:
    label: str        # grade id, or "inserted cell N"
    source: str
    locked_source: str | None = None   # the gradebook's source when this is a locked cell


def python_source(source: str) -> str:
    """IPython syntax (%magic, !command) as the Python it runs, so that the scan sees it."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:
        return source


def _tables(source: str) -> tuple[symtable.SymbolTable, list[symtable.SymbolTable]] | None:
    """The cell's module scope and every scope nested in it (functions, lambdas, comprehensions,
    classes), from Python's own compiler: what a name refers to is decided there, not guessed."""
    try:
        top = symtable.symtable(python_source(source), "<cell>", "exec")
    except (SyntaxError, ValueError):
        return None
    nested, stack = [], list(top.get_children())
    while stack:
        table = stack.pop()
        nested.append(table)
        stack.extend(table.get_children())
    return top, nested


def _bound(source: str) -> set[str]:
    """Names the cell binds in the notebook's namespace: at module level (assignment, def, class,
    import, loop target, a walrus in a comprehension) or through `global`. A comprehension's or a
    lambda's own variables, a function's locals and parameters stay where they are."""
    tables = _tables(source)
    if tables is None:
        return set()
    top, nested = tables
    out = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    for table in nested:
        out |= {s.get_name() for s in table.get_symbols() if s.is_declared_global() and s.is_assigned()}
    return out


def _read(source: str) -> set[str]:
    """Names the cell reads from the notebook's namespace, at module level or from a nested scope."""
    tables = _tables(source)
    if tables is None:
        return set()
    top, nested = tables
    out = {s.get_name() for s in top.get_symbols() if s.is_referenced()}
    for table in nested:
        out |= {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
    return out


def parse(source: str) -> ast.AST | None:
    try:
        return ast.parse(python_source(source))
    except SyntaxError:
        return None


def bound_names(source: str) -> set[str]:
    """Every name a cell binds (assignment, def, class, import, loop target, global)."""
    return _bound(source)


def protected_names(locked_sources: Iterable[str]) -> set[str]:
    """Names the locked cells bind and later read (lab, checks, reference, runs, ...): a student's
    cell that rebinds one changes what the tests run."""
    bound: set[str] = set()
    free: set[str] = set()
    for source in locked_sources:
        here = _bound(source)
        bound |= here
        free |= _read(source) - here
    return bound & free


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:
        return "an attribute"


def findings(source: str, protected: set[str], modules: set[str]) -> list[tuple[int, str]]:
    """(line, what) for every suspect construct in one cell's source."""
    tree = parse(source)
    if tree is None:
        return []
    out: list[tuple[int, str]] = []
    rebound = protected & _bound(source)   # a comprehension's `name` or a function's local is not the test's
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)) and node.id in rebound:
            out.append((line, f"rebinds `{node.id}`, which the test cells use"))
        elif isinstance(node, ast.Name) and node.id in SUSPECT_NAMES:
            out.append((line, SUSPECT_NAMES[node.id]))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in rebound:
            out.append((line, f"redefines `{node.name}`, which the test cells use"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in COMPARISON_DUNDERS:
            out.append((line, f"defines {node.name}: an object that can pass a comparison or lookup it should fail"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.split(".")[0] in SUSPECT_MODULES:
                    out.append((line, SUSPECT_MODULES[name.split(".")[0]]))
            for a in node.names:
                if (a.asname or a.name).split(".")[0] in rebound:
                    out.append((line, f"rebinds `{(a.asname or a.name).split('.')[0]}` by an import, which the test "
                                      "cells use"))
                if a.name in SUSPECT_NAMES:
                    out.append((line, SUSPECT_NAMES[a.name]))
        elif isinstance(node, ast.Attribute):
            if node.attr in SUSPECT_ATTRIBUTES:
                out.append((line, SUSPECT_ATTRIBUTES[node.attr]))
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                root = _root(node)
                if root in modules or root in protected or root in MODULE_ROOTS:
                    out.append((line, f"assigns `{_dotted(node)}` (patches a module or an object the tests use)"))
    return out


def without_hidden_tests(source: str) -> str:
    """A test cell as the release shows it: nbgrader strips the hidden tests, the gradebook keeps them."""
    return re.sub(r"[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[ \t]*\n?", "", source, flags=re.S).strip()


def scan_cells(cells: list[Cell], protected: set[str]) -> list[str]:
    """One reason per finding, "where: what", for the cells a student could edit or add."""
    modules: set[str] = set()
    for cell in cells:
        tree = parse(cell.locked_source or cell.source)
        if tree is not None:
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    modules.update((a.asname or a.name).split(".")[0] for a in node.names)
    reasons: list[str] = []
    for cell in cells:
        if cell.locked_source is not None:
            if cell.source.strip() not in (cell.locked_source.strip(), without_hidden_tests(cell.locked_source)):
                reasons.append(f"{cell.label}: a locked cell was edited (nbgrader ran the original)")
            continue
        seen: set[str] = set()
        for line, what in sorted(findings(cell.source, protected, modules)):
            if what not in seen:
                seen.add(what)
                reasons.append(f"{cell.label} line {line}: {what}")
    return reasons
