"""The lazy student: a submission that copies every value the helper printed, and thinks nothing.

Each answer cell of the release ends in nbgrader's stub (`raise NotImplementedError()`). The lazy
student replaces that stub with one generic filler: every answer left as `None` (in a dict, a
nested dict, or a plain variable) is looked up, by its key, in the tables the notebook has on
screen (every pandas DataFrame or Series among its variables). Functions the student should write
stay unwritten. tests/copying_student.py's copier starts from this filler and adds every answer the
notebook shows; the course promises that such a student earns at most 25 % of the autograded points of
any notebook (docs/grading.md).
"""

from __future__ import annotations

import nbformat

STUB = "raise NotImplementedError()"

FILLER = r'''
def _lazy_lookup(_path):
    import pandas as _pd
    _key = _path[-1]
    _row = _path[-2] if len(_path) >= 2 else None
    for _v in list(globals().values()):
        try:
            if isinstance(_v, _pd.DataFrame):
                if _row is not None and _row in _v.index and _key in _v.columns:
                    return _v.loc[_row, _key].item()
                if _row is not None and _key in _v.index and _row in _v.columns:
                    return _v.loc[_key, _row].item()
                if _key in _v.columns and len(_v) >= 1:
                    return _v[_key].iloc[-1].item()
                if _key in _v.index and len(_v.columns) >= 1:
                    return _v.loc[_key].iloc[-1].item()
            elif isinstance(_v, _pd.Series) and _key in _v.index:
                return _v[_key].item()
        except Exception:
            continue
    return None


def _lazy_fill(_obj, _path=()):
    if isinstance(_obj, dict):
        return {_k: _lazy_fill(_x, _path + (_k,)) for _k, _x in _obj.items()}
    return _lazy_lookup(_path) if _obj is None and _path else _obj


for _name, _value in list(globals().items()):
    if _name.startswith("_"):
        continue
    if isinstance(_value, dict):
        globals()[_name] = _lazy_fill(_value, ())
    elif _value is None:
        _found = _lazy_lookup((_name,))
        if _found is not None:
            globals()[_name] = _found
'''


def fill_like_a_lazy_student(nb: nbformat.NotebookNode) -> int:
    """Replace every answer cell's stub with the generic filler; the number of cells filled."""
    filled = 0
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution") and STUB in cell.source:
            # a stub inside a function body stays (the function is left unwritten): the filler there would
            # be a syntax error that stops the whole cell, the student's other answers with it
            lines = cell.source.split("\n")
            cell.source = "\n".join(FILLER.strip() if line == STUB else line for line in lines)
            filled += 1
    return filled
