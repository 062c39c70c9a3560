"""After a failed check, the message names the cell it came from (issue 40, item 6): its grade id and the heading
above it, so a student whose view stayed at the bottom after Run All stopped knows where to scroll. A real
kernel gets the execute request JupyterLab sends (its `metadata.cellId`), in the notebook's folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat

from workshop.student.cell_label import label

ROOT = Path(__file__).resolve().parent.parent


def notebook(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 05 · Many nodes\n\n## 5. The bandwidth gate\n\nRead it."),
                nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_markdown_cell("Some words, no heading."),
                nbformat.v4.new_code_cell("from workshop.student import checks\n"
                                          "checks.choice(False, True, 'does the gate pass?')")]
    nb.cells[1].id, nb.cells[3].id = "nb05-answer", "nb05-test-gate"
    nb.cells[3].metadata["nbgrader"] = {"grade_id": "nb05-test-gate", "grade": True, "locked": True, "points": 1}
    path = folder / "05_multi_node.ipynb"
    nbformat.write(nb, path)
    return path


def test_a_cell_is_named_by_grade_id_and_the_heading_above_it(tmp_path: Path) -> None:
    notebook(tmp_path)
    assert label("nb05-test-gate", tmp_path, session="") == 'cell nb05-test-gate, under "5. The bandwidth gate"'
    assert label("nb05-answer", tmp_path, session="") == 'cell nb05-answer, under "5. The bandwidth gate"'
    assert label("no-such-cell", tmp_path, session="") == "" and label(None, tmp_path) == ""


def test_a_failed_check_in_a_kernel_names_its_cell(tmp_path: Path) -> None:
    from jupyter_client.manager import start_new_kernel

    path = notebook(tmp_path)
    code = "".join(json.loads(path.read_text())["cells"][3]["source"])
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path), startup_timeout=120,
                              env={"PYTHONPATH": str(ROOT), "PATH": str(Path(sys.executable).parent)})
    try:
        msg = kc.session.msg("execute_request", {"code": code, "silent": False, "store_history": True,
                                                 "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
                             metadata={"cellId": "nb05-test-gate"})        # what JupyterLab sends
        kc.shell_channel.send(msg)
        reply = kc.get_shell_msg(timeout=120)
        while reply["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
            reply = kc.get_shell_msg(timeout=120)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["evalue"] == ("does the gate pass?: False is not right "
                                          '(cell nb05-test-gate, under "5. The bandwidth gate")')
