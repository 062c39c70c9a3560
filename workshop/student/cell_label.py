"""Which cell a failed check came from, named so a student can find it: its grade id and the heading above it.

A failed check stops Run All, and JupyterLab's view stays where the student was (often the bottom), far
from the error. The message then says where to scroll: `(cell nb05-test-gate, under "5. The bandwidth gate")`.
JupyterLab sends the running cell's id with each execution request (`metadata.cellId`); the notebook file (the kernel's JPY_SESSION_NAME, else a notebook in the
kernel's folder that has a cell of that id) gives its grade id and heading. Where any of this is missing
(a plain Python process, nbgrader's executor, which shows the error under its cell anyway) the label is ''.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def current_cell_id() -> str | None:
    """The id of the cell running now, when the front end sent one."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    try:
        parent = kernel.get_parent("shell") if kernel is not None else {}
    except (AttributeError, TypeError):
        parent = {}
    return (parent or {}).get("metadata", {}).get("cellId")


def label(cell_id: str | None, folder: str | Path | None = None, session: str | None = None) -> str:
    """'cell <grade id>, under "<heading>"' for the cell of that id; '' when it cannot be found."""
    if not cell_id:
        return ""
    session = os.environ.get("JPY_SESSION_NAME", "") if session is None else session
    where = Path.cwd() if folder is None else Path(folder)
    candidates = [Path(session)] if session.endswith(".ipynb") and Path(session).is_file() else []
    candidates += sorted(where.glob("*.ipynb"))
    for path in candidates:
        try:
            cells = json.loads(path.read_text()).get("cells", [])
        except (OSError, ValueError):
            continue
        heading = ""
        for cell in cells:
            if cell.get("cell_type") == "markdown":
                text = "".join(cell.get("source", []))
                titles = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
                heading = titles[-1] if titles else heading
            if cell.get("id") == cell_id:
                grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or cell_id
                return f'cell {grade_id}' + (f', under "{heading}"' if heading else "")
    return ""


def where_now() -> str:
    """' (cell ..., under "...")' for the running cell, or ''."""
    found = label(current_cell_id())
    return f" ({found})" if found else ""
