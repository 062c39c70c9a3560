"""Static scan of a submission's editable cells for code that could talk the grading round.

nbgrader restores the source of every locked cell it finds by grade id (from the gradebook), but
runs everything else the student wrote in the same kernel first: answer cells, the parameters cell,
cells they inserted. Code there can rebind a name the test cells use, patch a module the checks
import, make an answer compare equal to anything, or hide the tracebacks by which nbgrader sees a
failed test. The independent re-run (`workshop.course.integrity`) already withholds the points such code
wins; this scan says *why*, in one line per finding, for the instructor to read.

It reads code, it does not run it: a finding is a reason to look, not a proof. It works by
principle rather than by a list of known tricks: an exercise's answer is arithmetic on the notebook's
tables and the student's own functions, so in a cell the student wrote

- any dunder (`__dict__`, `__setattr__`, `__globals__`, a `def __eq__`, ...) but a few harmless ones,
- reflection by name (`setattr`, `vars`, `globals`, `exec`, `getattr` with a computed name, ...),
- an import of the interpreter's machinery (`sys`, `importlib`, `unittest.mock`, `ctypes`, `gc`, ...),
- any attribute assignment outside the student's own class, or an item assigned into a module,
- a read of the answer key: a name the instructor's cells bind for the tests only (`*reference*`,
  names a test cell binds, names only test cells read)

is a finding. `workshop.course.integrity` withholds the points of every test that runs after a flagged cell.
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
SUSPECT_NAMES.update({
    "getattr": "reads an attribute by a computed name (getattr)",   # a literal name is read as an attribute
    "publish_display_data": "publishes display data (could forge an answer record)",
})
SUSPECT_MODULES = {
    "builtins": "imports builtins", "importlib": "imports importlib (reloads or replaces modules)",
    "ctypes": "imports ctypes", "gc": "imports gc (finds objects to patch)", "inspect": "imports inspect",
    "subprocess": "starts processes", "atexit": "imports atexit", "signal": "imports signal",
    "sys": "imports sys (sys.modules, sys.stderr, hooks)", "unittest": "imports unittest (mock.patch replaces objects)",
    "types": "imports types (builds modules and functions)", "threading": "imports threading",
    "multiprocessing": "starts processes", "runpy": "runs code by module name", "pickle": "imports pickle",
    "marshal": "imports marshal", "code": "imports code (runs generated code)", "codeop": "compiles generated code",
    "operator": "imports operator (attrgetter, setitem on modules)"
}
# Dunders an answer may use: a function's name and docstring, a package's version
HARMLESS_DUNDERS = {"__name__", "__doc__", "__version__", "__qualname__"}
# Dunder methods a student's own small class may define: construction and printing decide no comparison
HARMLESS_DUNDER_DEFS = {"__init__", "__repr__", "__str__", "__post_init__"}
DUNDER = re.compile(r"^__\w+__$")
ANSWER_RECORD = "vnd.fsdp-workshop.answer"   # the MIME type of checks' answer records (workshop.course.checks.MIME)
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


def _imported(source: str) -> set[str]:
    tables = _tables(source)
    return set() if tables is None else {s.get_name() for s in tables[0].get_symbols() if s.is_imported()}


def answer_key(locked: dict[str, str], tests: set[str], answers: Iterable[str]) -> set[str]:
    """Names the instructor's cells bind for the tests only: what a student's cell has no reason to read.

    `locked`: every locked cell's source by grade id (test cells included), `tests`: the grade ids of the
    graded test cells, `answers`: the model answers' source (solution cells). A name is the answer key when
    a locked cell binds it and it holds "reference" (`state_reference`), or a test cell binds it
    (`model_ranking`), or a locked cell imports it and only test cells read it (the reference function a
    test compares with, `encode_for_training`), or only a reference cell (grade id `*reference*`, such as
    nb05-gate-reference) binds it and no model answer reads it (`gate`, `largest`, `PSI_GB`). `lab`, `measured`, `tok` and the other tables and inputs
    the lesson shows stay readable."""
    bound_by = {name: _bound(source) for name, source in locked.items()}
    bound = set().union(*bound_by.values()) if bound_by else set()
    imported = set().union(*(_imported(src) for n, src in locked.items() if n not in tests)) if locked else set()
    in_tests: set[str] = set()
    read_by_tests: set[str] = set()
    read_elsewhere: set[str] = set()
    for name, source in locked.items():
        if name in tests:
            in_tests |= bound_by[name]
            read_by_tests |= _read(source)
        else:
            read_elsewhere |= _read(source) - bound_by[name]
    for source in answers:
        read_elsewhere |= _read(source)
    # the course's reference cells are named so (nb01-predict-reference): what they alone bind is the key
    in_references: set[str] = set()
    elsewhere: set[str] = set()
    for name, names in bound_by.items():
        if name not in tests:
            (in_references if "reference" in name.lower() else elsewhere).update(names)
    answered = set().union(*(_read(source) for source in answers)) if answers else set()
    return {n for n in bound if "reference" in n.lower() or n in in_tests
            or (n in imported and n in read_by_tests and n not in read_elsewhere)
            or (n in in_references and n not in imported and n not in elsewhere and n not in answered)}


def _dunder(name: str) -> bool:
    return bool(DUNDER.match(name)) and name not in HARMLESS_DUNDERS


def _literal_name(node: ast.Call) -> str | None:
    """getattr(obj, "name"): the name when it is a literal, else None."""
    if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
        return node.args[1].value
    return None


def findings(source: str, protected: set[str], modules: set[str], key: set[str] | frozenset[str] = frozenset()) -> list[tuple[int, str]]:
    """(line, what) for every suspect construct in one cell's source (a cell the student could edit)."""
    tree = parse(source)
    if tree is None:
        return []
    out: list[tuple[int, str]] = []
    own = _bound(source)
    rebound = protected & own   # a comprehension's `name` or a function's local is not the test's
    for name in sorted((key - own) & _read(source)):
        out.append((0, f"reads `{name}`, which the instructor's cells bind for the tests (the answer key)"))
    # the student's own modules (import x as y) and classes: where an attribute assignment lands
    imported = set(modules)
    classes: list[ast.ClassDef] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ClassDef):
            classes.append(node)
    in_class = {id(n) for c in classes for n in ast.walk(c)}
    plain_getattr = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                     and n.func.id == "getattr" and _literal_name(n) is not None}   # getattr(x, "name")
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)) and node.id in rebound:
            out.append((line, f"rebinds `{node.id}`, which the test cells use"))
        elif isinstance(node, ast.Name) and node.id in SUSPECT_NAMES and id(node) not in plain_getattr:
            out.append((line, SUSPECT_NAMES[node.id]))
        elif isinstance(node, ast.Name) and _dunder(node.id):
            out.append((line, f"uses `{node.id}` (interpreter internals)"))
        elif isinstance(node, ast.Call) and id(node.func) in plain_getattr:
            name = _literal_name(node) or ""
            if _dunder(name) or name in SUSPECT_ATTRIBUTES:
                out.append((line, f"reads `{name}` by getattr (interpreter internals)"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and ANSWER_RECORD in node.value:
            out.append((line, "names the answer records' MIME type (forges an answer record)"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _dunder(node.value):
            out.append((line, f"names `{node.value}` in a string (interpreter internals by name)"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in rebound:
            out.append((line, f"redefines `{node.name}`, which the test cells use"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _dunder(node.name) \
                and node.name not in HARMLESS_DUNDER_DEFS:
            out.append((line, f"defines {node.name}: an object that can pass a comparison or lookup it should fail"
                        if node.name in COMPARISON_DUNDERS else f"defines {node.name} (changes how Python treats "
                                                                "the object)"))
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
                if _dunder(a.name):
                    out.append((line, f"imports `{a.name}` (interpreter internals)"))
        elif isinstance(node, ast.Attribute):
            if node.attr in SUSPECT_ATTRIBUTES:
                out.append((line, SUSPECT_ATTRIBUTES[node.attr]))
            elif _dunder(node.attr):
                out.append((line, f"uses `.{node.attr}` (interpreter internals)"))
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                root = _root(node)
                if root in imported or root in protected or root in MODULE_ROOTS:
                    out.append((line, f"assigns `{_dotted(node)}` (patches a module or an object the tests use)"))
                elif id(node) not in in_class:   # `self.x = ...` in the student's own class is theirs
                    out.append((line, f"assigns the attribute `{_dotted(node)}` (an answer needs no attribute "
                                      "assignment)"))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
            root = _root(node)
            if root in imported or root in MODULE_ROOTS:
                out.append((line, f"assigns `{_dotted(node)}` (patches a module)"))
    return out


def without_hidden_tests(source: str) -> str:
    """A test cell as the release shows it: nbgrader strips the hidden tests, the gradebook keeps them."""
    return re.sub(r"[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[ \t]*\n?", "", source, flags=re.S).strip()


def scan_findings(cells: list[Cell], protected: set[str], key: set[str] | frozenset[str] = frozenset()) -> list[tuple[int, str]]:
    """(index of the cell in `cells`, "where: what") per finding, for the cells a student could edit or add."""
    modules: set[str] = set()
    for cell in cells:
        tree = parse(cell.locked_source or cell.source)
        if tree is not None:
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    modules.update((a.asname or a.name).split(".")[0] for a in node.names)
    reasons: list[tuple[int, str]] = []
    for i, cell in enumerate(cells):
        if cell.locked_source is not None:
            if cell.source.strip() not in (cell.locked_source.strip(), without_hidden_tests(cell.locked_source)):
                reasons.append((i, f"{cell.label}: a locked cell was edited (nbgrader ran the original)"))
            continue
        seen: set[str] = set()
        for line, what in sorted(findings(cell.source, protected, modules, key)):
            if what not in seen:
                seen.add(what)
                reasons.append((i, f"{cell.label} line {line}: {what}" if line else f"{cell.label}: {what}"))
    return reasons


def scan_cells(cells: list[Cell], protected: set[str], key: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """One reason per finding, "where: what", for the cells a student could edit or add."""
    return [reason for _, reason in scan_findings(cells, protected, key)]
