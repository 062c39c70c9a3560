"""Static scan of a submission's editable cells for code that could talk the grading round.

nbgrader restores the source of every locked cell it finds by grade id (from the gradebook), but
runs everything else the student wrote in the same kernel first: answer cells, the parameters cell,
cells they inserted. Code there can rebind a name the test cells use, patch a module the checks
import, make an answer compare equal to anything, or hide the tracebacks by which nbgrader sees a
failed test. The independent re-run (`workshop.grading.integrity`) already withholds the points such code
wins; this scan says *why*, in one line per finding, for the instructor to read.

It reads code, it does not run it: a finding is a reason to look, not a proof. It works by
principle rather than by a list of known tricks: an exercise's answer is arithmetic on the notebook's
tables and the student's own functions, so in a cell the student wrote

- any dunder (`__dict__`, `__setattr__`, `__globals__`, a `def __eq__`, ...) but a few harmless ones,
- reflection by name (`setattr`, `vars`, `globals`, `exec`, `getattr` with a computed name, ...),
- an import of the interpreter's machinery (`sys`, `importlib`, `unittest.mock`, `ctypes`, `gc`, ...),
- any attribute assignment outside the student's own class, or an item assigned into a module,
- a read of the answer key: a name the instructor's cells bind for the tests only (`*reference*`,
  names a test cell binds, names only test cells read),
- a reference-only function (`REFERENCE_NAMES`, `REFERENCE_MODULES`): the course code a test cell computes
  its reference with, such as the memory model's `estimate` or `workshop.training.fsdp_rules`,
- a lesson tool that answers any case it is asked (`lab.predict`, `explore`) called inside a function of
  the student's, under its own name or another they bound it to (`ask = lab.predict`, a partial, an import
  as): a graded function is checked on cases no cell printed, and wrapping the tool is not a rule

is a finding. `workshop.grading.integrity` withholds the points of every test that runs after a flagged cell.

Debugging is not tampering: `sys`, `os`, `inspect` and `traceback` (`DEBUG_USES`) may be imported and used
to read (a version, the working folder, a function's source, a traceback), and IPython's `%time`, `%timeit`,
`%who`, `%pwd` and `?`/`??` may be used. Only a use outside those lists is a finding, so a student who
debugs and patches nothing keeps every point (docs/grading.md).
"""

from __future__ import annotations

import ast
import re
import symtable
from dataclasses import dataclass
from typing import Any, Callable, Iterable

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
# Interpreter frames: from one of them every namespace (the notebook's, a module's) is writable.
SUSPECT_ATTRIBUTES.update({attr: "reaches a frame (f_globals, f_locals: every namespace of the kernel)" for attr in (
    "f_globals", "f_locals", "f_back", "f_builtins", "tb_frame", "tb_next", "gi_frame", "cr_frame", "ag_frame")})

# What debugging needs of the interpreter's modules: reads that hand back plain data (a version, a folder
# listing, a function's source, a formatted traceback). A use outside this list (sys.modules, sys._getframe,
# os.system, inspect.currentframe, ...) is a finding; an import whose every use is listed is not.
DEBUG_USES: dict[str, frozenset[str]] = {
    "sys": frozenset({"version", "version_info", "platform", "executable", "getsizeof", "getrecursionlimit",
                      "maxsize", "byteorder", "implementation", "float_info", "argv", "getdefaultencoding",
                      "stdout.write", "stdout.flush", "stderr.write", "stderr.flush"}),
    "os": frozenset({"getcwd", "listdir", "getpid", "cpu_count", "sep", "linesep", "name", "path.join",
                     "path.exists", "path.isfile", "path.isdir", "path.basename", "path.dirname", "path.abspath",
                     "path.getsize", "path.splitext", "path.relpath"}),
    "os.path": frozenset({"join", "exists", "isfile", "isdir", "basename", "dirname", "abspath", "getsize",
                          "splitext", "relpath"}),
    "inspect": frozenset({"getsource", "getsourcelines", "getsourcefile", "getfile", "signature", "getdoc",
                          "getcomments", "isfunction", "ismethod", "isclass", "ismodule", "isbuiltin", "isroutine",
                          "getfullargspec", "cleandoc"}),
    "traceback": frozenset({"print_exc", "format_exc", "print_exception", "format_exception",
                            "format_exception_only", "print_stack", "format_stack", "print_tb", "format_tb",
                            "print_last"}),
}
# values whose own attributes are plain data too (sys.version_info.major)
DEBUG_VALUES = frozenset({"sys.version_info", "sys.float_info", "sys.implementation"})
# IPython magics for timing and looking: the code %time / %timeit run is scanned like the cell's own
SAFE_MAGICS = frozenset({"time", "timeit", "who", "whos", "who_ls", "pwd", "pinfo", "pinfo2", "pdef", "pdoc",
                         "psource"})
CODE_MAGICS = frozenset({"time", "timeit"})

# Reference-only: the course code a test cell computes its reference with. A student's cell that names
# one is flagged; docs/grading.md lists them with the cells they grade.
REFERENCE_NAMES: dict[str, str] = {
    "encode_for_training": "the training script's encoding (notebook 01's mask reference)",
    "estimate": "the memory model (workshop.results.memory)",
    "estimate_config": "the memory model (workshop.results.memory)",
    "root_params": "the memory model's count of the root unit",
    "logits_rows": "the memory model's positions projected onto the vocabulary per loss setting (notebook 02's logits)",
    "fsdp_rules": "the rules the predictions are graded against (workshop.grading.fsdp_rules)",
    "traffic": "the network traffic rule (workshop.grading.traffic)",
    "expected_steps": "the Trainer's step arithmetic notebook 04 grades (workshop.training.counted_steps)",
    "comm": "the communication model (workshop.comm.model): every collective a step runs",
    "diagnose": "workshop diagnose (the failure category notebook 05 grades)",
    "challenge": "notebook 03's budget challenge and the instructor's sweep (workshop.student.challenge)",
    "STATIC_RUNS": "the course's own settings of every run (workshop.student.runs)",
    "bus_factor": "the bus-bandwidth rule (workshop.comm.bandwidth)",
    "busbw_GBps": "the bus bandwidth the helper computed (notebook 05 grades yours)",
    "large_busbw_GBps": "the bus bandwidth the helper computed (notebook 05 grades yours)",
    "avg_busbw_GBps": "the bus bandwidth the helper computed (notebook 05 grades yours)",
    "max_busbw_GBps": "the bus bandwidth the helper computed (notebook 05 grades yours)",
    "inplace_busbw_GBps": "the bus bandwidth the helper computed (notebook 05 grades yours)",
    "gate_line_GBps": "the bus bandwidth the helper computed (notebook 05 grades yours)",
    # notebook 01 (#37): the training set the script builds encodes every example the way the mask check wants
    "EncodedDataset": "the training script's dataset (encodes with notebook 01's mask reference)",
    "answer_key": "notebooks 01 to 03's answer key (workshop.grading.answer_key)",
    "recipe_bytes": "notebook 01's answer key: stored bytes per parameter of a precision recipe",
    "params_that_fit_b": "notebook 01's answer key: the largest model whose state fits a card",
    "untrained_loss_measured": "notebook 01's answer key: the loss of an untrained model",
    "epoch_hours_at": "notebook 01's answer key: an epoch's hours at a throughput",
    "fsdp_state_gib": "notebook 02's answer key: per-GPU model state of a recipe the memory model lacks",
    "fewest_gpus_for": "notebook 02's answer key: the fewest GPUs for a per-GPU budget",
    "node_sent_gb": "notebook 03's answer key: GB one rank sends per step on the 8-GPU node",
}
CONSISTENCY = "the runs' loss tolerance notebooks 03 and 05 grade with (workshop.grading.consistency)"
REFERENCE_MODULES: dict[str, str] = {
    # the grader's rules, at their path and at the one they had before the grading room (a student who
    # types the old path, which fails in their install, still imports them where grading runs)
    "workshop.grading.fsdp_rules": REFERENCE_NAMES["fsdp_rules"],
    "workshop.training.fsdp_rules": REFERENCE_NAMES["fsdp_rules"],
    "workshop.grading.traffic": REFERENCE_NAMES["traffic"],
    "workshop.comm.traffic": REFERENCE_NAMES["traffic"],
    "workshop.grading.consistency": CONSISTENCY,
    "workshop.training.consistency": CONSISTENCY,
    "workshop.comm.model": REFERENCE_NAMES["comm"],
    "workshop.results.diagnose": REFERENCE_NAMES["diagnose"],
    "workshop.student.challenge": REFERENCE_NAMES["challenge"],
    "workshop.student.runs": REFERENCE_NAMES["STATIC_RUNS"],
    "workshop.site.budget": REFERENCE_NAMES["STATIC_RUNS"],
    "workshop.grading.answer_key": REFERENCE_NAMES["answer_key"],
    "workshop.grading.key_measures": REFERENCE_NAMES["answer_key"],
    "workshop.grading.references": "the hidden tests' reference values (workshop.grading.references)",
}
# Lesson tools that give the memory model's answer for any case asked: fine in a cell, not inside a
# function the tests call on cases of their own
TOOLS: dict[str, str] = {"predict": "lab.predict", "explore": "explore", "memory_explorer": "memory_explorer",
                         "show_explorer": "show_explorer"}

# Dunders an answer may use: a function's name and docstring, a package's version
HARMLESS_DUNDERS = {"__name__", "__doc__", "__version__", "__qualname__"}
# Dunder methods a student's own small class may define: construction and printing decide no comparison
HARMLESS_DUNDER_DEFS = {"__init__", "__repr__", "__str__", "__post_init__"}
DUNDER = re.compile(r"^__\w+__$")
ANSWER_RECORD = "vnd.fsdp-workshop.answer"   # the MIME type of checks' answer records (workshop.student.checks.MIME)
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


def read_names(source: str) -> set[str]:
    """Every name a cell reads from the notebook's namespace (at module level or from a function or lambda)."""
    return _read(source)


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


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def debug_aliases(sources: Iterable[str]) -> dict[str, str]:
    """{name: module} for every import of a debugging module (`DEBUG_USES`) in these cells: `import sys`,
    `import os.path as osp`. The canonical names count too, in case a cell uses one imported elsewhere."""
    out = {name: name for name in DEBUG_USES if "." not in name}
    for source in sources:
        tree = parse(source)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in DEBUG_USES:
                        out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    return out


def tool_aliases(sources: Iterable[str]) -> dict[str, str]:
    """{name: tool} for every name these cells bind to a lesson tool itself rather than to an answer it
    gave: `ask = lab.predict`, `ask = functools.partial(lab.predict, ...)`, `again = ask`,
    `from workshop.student.explorer import explore as ex`. Calling such a name inside a function is calling
    the tool (`peak = lab.predict(...)["peak"]` binds an answer, not the tool)."""
    out: dict[str, str] = {}
    trees = [t for t in (parse(s) for s in sources) if t is not None]

    def tool_in(value: ast.AST) -> str | None:
        calls = {id(n.func) for n in ast.walk(value) if isinstance(n, ast.Call)}
        for node in ast.walk(value):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            if id(node) not in calls and isinstance(getattr(node, "ctx", None), ast.Load):
                if name in TOOLS:
                    return TOOLS[name]
                if isinstance(node, ast.Name) and name in out:
                    return out[name]
        return None

    while True:   # until no new alias appears (an alias of an alias)
        before = dict(out)
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    out.update({a.asname: TOOLS[a.name] for a in node.names if a.asname and a.name in TOOLS})
                elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                    tool = tool_in(node.value)
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets if tool else ():
                        out.update({n.id: tool for n in ast.walk(target) if isinstance(n, ast.Name)})
        if out == before:
            return out


def _debug_use(node: ast.Name, module: str, parents: dict[int, ast.AST]) -> tuple[str, bool]:
    """The dotted use of a debugging module that starts at `node` (`sys.version_info.major`), and whether it
    only reads: a listed use (DEBUG_USES), an attribute of a listed value, or a chain printed as it is."""
    attrs, top = [], node
    while isinstance(parents.get(id(top)), ast.Attribute) and parents[id(top)].value is top:   # type: ignore[attr-defined]
        top = parents[id(top)]
        attrs.append(top.attr)   # type: ignore[attr-defined]
    chain = ".".join([module, *attrs])
    if isinstance(getattr(top, "ctx", None), (ast.Store, ast.Del)):
        return chain, False
    parent = parents.get(id(top))
    printed = (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "print"
               and top in parent.args) or (isinstance(parent, ast.keyword) and parent.arg == "file"
                                           and isinstance(parents.get(id(parent)), ast.Call)
                                           and getattr(parents[id(parent)].func, "id", None) == "print")
    root = module.split(".")[0]
    uses = {f"{module}.{u}" for u in DEBUG_USES.get(module, ())} | {f"{root}.{u}" for u in DEBUG_USES[root]}
    listed = any(chain == u or (u in DEBUG_VALUES and chain.startswith(u + ".")) for u in uses)
    return chain, bool(attrs) and listed or printed


def _magic_calls(tree: ast.AST) -> tuple[set[int], list[tuple[int, str]]]:
    """IPython's safe magics as the transformed source calls them (`get_ipython().run_line_magic('time', ...)`):
    the ids of their `get_ipython` names (not a finding), and the code %time / %timeit run (scanned)."""
    skip, code = set(), []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("run_line_magic", "run_cell_magic")
                and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name)
                and node.func.value.func.id == "get_ipython" and not node.func.value.args
                and node.args and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args)):
            continue
        magic = node.args[0].value   # type: ignore[attr-defined]
        if magic not in SAFE_MAGICS:
            continue
        skip.add(id(node.func.value.func))
        if magic in CODE_MAGICS:
            code.append((node.lineno, node.args[-1].value))   # type: ignore[attr-defined]
    return skip, code


def findings(source: str, protected: set[str], modules: set[str], key: set[str] | frozenset[str] = frozenset(),
             debug: dict[str, str] | None = None, theirs: set[str] | frozenset[str] = frozenset(),
             tools: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """(line, what) for every suspect construct in one cell's source (a cell the student could edit).

    `debug`: the debugging modules' names in the notebook (`debug_aliases`); by default this cell's own imports.
    `theirs`: names the student's cells bind by assignment (a `traffic = ...` of theirs is not the module).
    `tools`: names bound to a lesson tool in the notebook (`tool_aliases`); by default this cell's own."""
    tree = parse(source)
    if tree is None:
        return []
    own = _bound(source)
    debug = debug_aliases([source]) if debug is None else {**debug, **debug_aliases([source])}
    debug = {alias: module for alias, module in debug.items() if alias not in theirs}
    tools = tool_aliases([source]) if tools is None else {**tools, **tool_aliases([source])}
    out = _namespace_reads(_read(source), own, key, theirs)
    skip_names, magic_code = _magic_calls(tree)
    for line, code in magic_code:   # what %time and %timeit run is the student's code too
        out += [(line, what) for _, what in findings(code, protected, modules, key, debug, theirs, tools)]
    rules = _CellRules(tree, protected, modules, own - _imported(source), protected & own, debug, skip_names)
    return out + rules.run() + _tool_calls(tree, tools)


def _namespace_reads(read: set[str], own: set[str], key: set[str] | frozenset[str],
                     theirs: set[str] | frozenset[str]) -> list[tuple[int, str]]:
    """The answer key and the reference-only names the cell reads: a read has no one line, so these are line 0."""
    out = [(0, f"reads `{name}`, which the instructor's cells bind for the tests (the answer key)")
           for name in sorted((key - own) & read)]
    out += [(0, f"uses `{name}`, {REFERENCE_NAMES[name]}: reference-only, the tests compute their answers "
                "with it (docs/grading.md)") for name in sorted((set(REFERENCE_NAMES) - own - set(theirs)) & read)]
    return out


def _tool_calls(tree: ast.AST, tools: dict[str, str]) -> list[tuple[int, str]]:
    """A function of the student's that asks a lesson tool answers the tool's cases, not the rule's: one finding
    per mention of a tool inside each function (a nested function's mention counts for each function around it)."""
    out: list[tuple[int, str]] = []
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    for function in functions:
        for node in ast.walk(function):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            tool = TOOLS.get(name) or (tools.get(name) if isinstance(node, ast.Name) else None)
            if tool and isinstance(getattr(node, "ctx", None), ast.Load):
                alias = f" (as `{name}`)" if name not in TOOLS else ""
                out.append((getattr(node, "lineno", 0), f"a function of yours calls `{tool}`{alias}: the tests call "
                                                        "your function on cases of their own, so it must hold the "
                                                        "rule itself"))
    return out


class _CellRules(ast.NodeVisitor):
    """The per-node rules of one cell's scan, one kind of node per `visit_*` method.

    `run` visits the nodes in `ast.walk`'s order (breadth first) rather than recursing, because the order of
    the findings follows it. Where a node could meet several rules, a method lists them in the order they
    are tried and only the first that finds something counts (`_first`): a name is reported once, as the
    most specific thing it does."""

    def __init__(self, tree: ast.AST, protected: set[str], modules: set[str], own_not_imported: set[str],
                 rebound: set[str], debug: dict[str, str], skip_names: set[int]) -> None:
        self.tree = tree
        self.protected = protected
        self.rebound = rebound   # a comprehension's `name` or a function's local is not the test's
        self.debug = debug
        self.own_not_imported = own_not_imported   # a debugging module's name the student rebound is theirs
        self.skip_names = skip_names
        self.parents = _parents(tree)
        # the student's own modules (import x as y) and classes: where an attribute assignment lands
        self.imported = set(modules)
        classes: list[ast.ClassDef] = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.imported.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.ClassDef):
                classes.append(node)
        self.in_class = {id(n) for c in classes for n in ast.walk(c)}
        self.plain_getattr = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)   # getattr(x, "name")
                              and isinstance(n.func, ast.Name) and n.func.id == "getattr" and _literal_name(n) is not None}
        self.debug_imports: dict[str, int] = {}   # module: first line that uses it beyond debugging
        self.debug_reads: set[int] = set()   # attribute nodes inside a listed debugging read
        self.out: list[tuple[int, str]] = []

    def run(self) -> list[tuple[int, str]]:
        """Every finding of the cell's nodes: the debugging uses first (they decide which attributes are only
        read), then each node's rules, then the import of each debugging module used beyond reading."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Name):
                self._debugging_module(node)
        for node in ast.walk(self.tree):
            self.visit(node)
        for module, line in self.debug_imports.items():
            self.out.append((line, SUSPECT_MODULES.get(module, f"imports {module} (beyond reading: docs/grading.md)")))
        return self.out

    def generic_visit(self, node: ast.AST) -> None:
        """No recursion: `run` reaches every node itself, in the order the findings keep."""

    def _first(self, node: ast.AST, *rules: Callable[[Any], str | None]) -> None:
        """The finding of the first rule that has one for `node`, if any."""
        for rule in rules:
            what = rule(node)
            if what:
                self.out.append((getattr(node, "lineno", 0), what))
                return

    def _debugging_module(self, node: ast.Name) -> None:
        """A debugging module (`DEBUG_USES`) may be read, not used otherwise: the import is a finding only then."""
        if not (isinstance(node.ctx, ast.Load) and node.id in self.debug and node.id not in self.own_not_imported):
            return
        chain, reads = _debug_use(node, self.debug[node.id], self.parents)
        if reads:
            top: ast.AST = node
            while isinstance(self.parents.get(id(top)), ast.Attribute):
                top = self.parents[id(top)]
                self.debug_reads.add(id(top))
        else:
            self.out.append((node.lineno, f"uses `{chain}`, more than debugging needs (reads of a version, a folder, "
                                          "a source or a traceback: docs/grading.md)"))
            self.debug_imports.setdefault(self.debug[node.id].split(".")[0], node.lineno)

    def visit_Name(self, node: ast.Name) -> None:
        self._first(node, self._rebinds, self._suspect_name, self._dunder_name)

    def _rebinds(self, node: ast.Name) -> str | None:
        if isinstance(node.ctx, (ast.Store, ast.Del)) and node.id in self.rebound:
            return f"rebinds `{node.id}`, which the test cells use"
        return None

    def _suspect_name(self, node: ast.Name) -> str | None:
        if node.id in SUSPECT_NAMES and id(node) not in self.plain_getattr and id(node) not in self.skip_names:
            return SUSPECT_NAMES[node.id]
        return None

    def _dunder_name(self, node: ast.Name) -> str | None:
        return f"uses `{node.id}` (interpreter internals)" if _dunder(node.id) else None

    def visit_Call(self, node: ast.Call) -> None:
        self._first(node, self._getattr_by_name)

    def _getattr_by_name(self, node: ast.Call) -> str | None:
        """getattr(x, "name") is read as `x.name`: judged by the name it reads."""
        if id(node.func) not in self.plain_getattr:
            return None
        name = _literal_name(node) or ""
        if _dunder(name) or name in SUSPECT_ATTRIBUTES:
            return f"reads `{name}` by getattr (interpreter internals)"
        if name in REFERENCE_NAMES:
            return f"uses `{name}` by getattr, {REFERENCE_NAMES[name]}: reference-only"
        return None

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self._first(node, self._answer_record, self._dunder_string, self._bandwidth_column)

    def _answer_record(self, node: ast.Constant) -> str | None:
        return "names the answer records' MIME type (forges an answer record)" if ANSWER_RECORD in node.value else None

    def _dunder_string(self, node: ast.Constant) -> str | None:
        return f"names `{node.value}` in a string (interpreter internals by name)" if _dunder(node.value) else None

    def _bandwidth_column(self, node: ast.Constant) -> str | None:
        if node.value.endswith("busbw_GBps"):
            return f"reads the column `{node.value}`, the bus bandwidth the helper computed: reference-only"
        return None

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._first(node, self._redefines, self._dunder_method)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._first(node, self._redefines)

    def _redefines(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str | None:
        return f"redefines `{node.name}`, which the test cells use" if node.name in self.rebound else None

    def _dunder_method(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
        """A dunder method changes how Python treats the object; a comparison's can make a wrong answer pass."""
        if not _dunder(node.name) or node.name in HARMLESS_DUNDER_DEFS:
            return None
        if node.name in COMPARISON_DUNDERS:
            return f"defines {node.name}: an object that can pass a comparison or lookup it should fail"
        return f"defines {node.name} (changes how Python treats the object)"

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        """Every rule of an import applies: one statement can import several things."""
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        found = [what for name in names for what in self._imported_module(node, name)]
        found += self._imported_reference_module(node)
        found += [what for alias in node.names for what in self._imported_name(alias)]
        self.out += [(node.lineno, what) for what in found]

    visit_ImportFrom = visit_Import

    def _imported_module(self, node: ast.Import | ast.ImportFrom, name: str) -> list[str]:
        """A suspect module, a debugging module's unlisted name (`from os import system`), a reference module."""
        out: list[str] = []
        root = name.split(".")[0]
        if root in DEBUG_USES and isinstance(node, ast.Import):
            return out   # judged by its uses (`_debugging_module`)
        if root in DEBUG_USES:   # from os import getcwd: each name must be a listed read
            bad = [a.name for a in node.names if a.name not in DEBUG_USES.get(name, ())]
            if bad:
                out.append(SUSPECT_MODULES.get(root, f"imports {root}") + f": {', '.join(bad)}")
        elif root in SUSPECT_MODULES:
            out.append(SUSPECT_MODULES[root])
        module = next((m for m in REFERENCE_MODULES if name == m or name.startswith(m + ".")), None)
        if module is not None:
            out.append(f"imports {module}, {REFERENCE_MODULES[module]}: reference-only")
        return out

    def _imported_reference_module(self, node: ast.Import | ast.ImportFrom) -> list[str]:
        """`from workshop.comm import traffic`: the reference module imported as a member of its package."""
        if not (isinstance(node, ast.ImportFrom) and node.module):
            return []
        return [f"imports {node.module}.{a.name}: reference-only" for a in node.names
                if f"{node.module}.{a.name}" in REFERENCE_MODULES]

    def _imported_name(self, alias: ast.alias) -> list[str]:
        """What the name an import binds does: rebind a test's name, or bring in a suspect or reference name."""
        out: list[str] = []
        bound = (alias.asname or alias.name).split(".")[0]
        if bound in self.rebound:
            out.append(f"rebinds `{bound}` by an import, which the test cells use")
        if alias.name in SUSPECT_NAMES:
            out.append(SUSPECT_NAMES[alias.name])
        if alias.name in REFERENCE_NAMES:
            out.append(f"imports `{alias.name}`, {REFERENCE_NAMES[alias.name]}: reference-only")
        if _dunder(alias.name):
            out.append(f"imports `{alias.name}` (interpreter internals)")
        return out

    def visit_Attribute(self, node: ast.Attribute) -> None:
        """What the attribute names (unless a debugging read), then where an assignment to it lands."""
        if id(node) not in self.debug_reads:
            self._first(node, self._suspect_attribute, self._dunder_attribute, self._reference_attribute)
        self._first(node, self._assigned_attribute)

    def _suspect_attribute(self, node: ast.Attribute) -> str | None:
        return SUSPECT_ATTRIBUTES.get(node.attr)

    def _dunder_attribute(self, node: ast.Attribute) -> str | None:
        return f"uses `.{node.attr}` (interpreter internals)" if _dunder(node.attr) else None

    def _reference_attribute(self, node: ast.Attribute) -> str | None:
        if node.attr in REFERENCE_NAMES:
            return (f"uses `.{node.attr}`, {REFERENCE_NAMES[node.attr]}: reference-only, the tests compute their "
                    "answers with it (docs/grading.md)")
        return None

    def _assigned_attribute(self, node: ast.Attribute) -> str | None:
        """An answer needs no attribute assignment, but `self.x = ...` in the student's own class is theirs."""
        if not isinstance(node.ctx, (ast.Store, ast.Del)):
            return None
        root = _root(node)
        if root in self.imported or root in self.protected or root in MODULE_ROOTS:
            return f"assigns `{_dotted(node)}` (patches a module or an object the tests use)"
        if id(node) not in self.in_class:
            return f"assigns the attribute `{_dotted(node)}` (an answer needs no attribute assignment)"
        return None

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self._first(node, self._assigned_item)

    def _assigned_item(self, node: ast.Subscript) -> str | None:
        root = _root(node)
        if isinstance(node.ctx, (ast.Store, ast.Del)) and (root in self.imported or root in MODULE_ROOTS):
            return f"assigns `{_dotted(node)}` (patches a module)"
        return None


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
    debug = debug_aliases(cell.locked_source or cell.source for cell in cells)
    tools = tool_aliases(cell.source for cell in cells if cell.locked_source is None)
    # names the student binds by assignment and nothing imports (`sys = sys` does not make `sys` theirs)
    theirs = set().union(*(_bound(c.source) - _imported(c.source) for c in cells if c.locked_source is None))
    theirs -= set().union(*(_imported(c.locked_source or c.source) for c in cells))
    reasons: list[tuple[int, str]] = []
    for i, cell in enumerate(cells):
        if cell.locked_source is not None:
            if cell.source.strip() not in (cell.locked_source.strip(), without_hidden_tests(cell.locked_source)):
                reasons.append((i, f"{cell.label}: a locked cell was edited (nbgrader ran the original)"))
            continue
        seen: set[str] = set()
        for line, what in sorted(findings(cell.source, protected, modules, key, debug, theirs, tools)):
            if what not in seen:
                seen.add(what)
                reasons.append((i, f"{cell.label} line {line}: {what}" if line else f"{cell.label}: {what}"))
    return reasons


def scan_cells(cells: list[Cell], protected: set[str], key: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """One reason per finding, "where: what", for the cells a student could edit or add."""
    return [reason for _, reason in scan_findings(cells, protected, key)]
