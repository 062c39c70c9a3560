"""A cell whose kernel reply never comes (nteract/papermill#711) must not hang the course forever:
`workshop.grading.run_all` gives up on it after --cell-timeout and runs the notebook once more, in the same
folder, so that what the first run left (its jobs) is found. A real papermill run and kernel."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from workshop.grading.run_all import run_notebook

# the first run's cell outlasts the limit (as a lost reply does); the second run finds the first's file
SLOW_ONCE = """
import os, time
first = not os.path.exists("left-by-the-first-run")
open("left-by-the-first-run", "w").close()
time.sleep(30 if first else 0)
runs = "second" if not first else "first"
"""


def test_a_hung_cell_runs_the_notebook_again_in_the_same_folder(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
                                         nbformat.v4.new_code_cell(SLOW_ONCE), nbformat.v4.new_code_cell("print(runs)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, src / "demo.ipynb")
    out = run_notebook("demo", tmp_path / "results", {}, cell_timeout=8, source=src)
    done = nbformat.read(out, as_version=4)
    assert done.metadata["workshop"]["run_again_after_a_hung_cell"] is True
    assert done.cells[-1].outputs[0]["text"].strip() == "second"
    assert (tmp_path / "results" / "demo" / "left-by-the-first-run").exists()


def test_a_cell_that_hangs_twice_fails_the_notebook(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import time; time.sleep(30)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, src / "stuck.ipynb")
    with pytest.raises(TimeoutError):
        run_notebook("stuck", tmp_path / "results", {}, cell_timeout=3, source=src)
