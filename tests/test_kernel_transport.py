"""`make course` prints no "Kernel is running over TCP without encryption": the course's kernels talk to
papermill over Unix sockets (workshop.grading.ipc_kernel). A real papermill run of a one-cell notebook through
the course's runner, the kernel's stderr read at the file descriptor (the kernel inherits it); beside it the
same notebook through papermill's default kernel manager, which shows the warning, so that its absence is the
transport's doing and not a lost stderr."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from workshop.grading.run_all import run_notebook

WARNING = "running over TCP without encryption"
# the kernel says which transport it was started with, and where its sockets are
CELL = ("from ipykernel.kernelapp import IPKernelApp\n"
        "app = IPKernelApp.instance()\n"
        "import json; print(json.dumps({'transport': app.transport, 'ip': app.ip}))")


def one_cell_notebook(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / f"{name}.ipynb")
    return folder


def printed(notebook: Path) -> dict[str, str]:
    return json.loads(nbformat.read(notebook, as_version=4).cells[-1].outputs[0]["text"])


def test_the_course_runner_starts_its_kernel_over_unix_sockets_without_the_warning(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    src = one_cell_notebook(tmp_path / "src", "tiny")
    out = run_notebook("tiny", tmp_path / "results", {}, cell_timeout=120, source=src)
    seen = printed(out)
    assert seen["transport"] == "ipc"
    assert Path(seen["ip"]).is_absolute()                   # the kernel's folder and papermill's may differ
    assert not list(Path(seen["ip"]).parent.glob(Path(seen["ip"]).name + "-*"))   # its sockets were removed
    captured = capfd.readouterr()
    assert WARNING not in captured.err + captured.out


def test_papermills_default_kernel_shows_the_warning_the_runner_avoids(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    import papermill

    src = one_cell_notebook(tmp_path / "src", "tiny")
    out = tmp_path / "tcp.ipynb"
    papermill.execute_notebook(str(src / "tiny.ipynb"), str(out), kernel_name="python3", progress_bar=False,
                               execution_timeout=120, cwd=str(tmp_path))
    assert printed(out)["transport"] == "tcp"
    captured = capfd.readouterr()
    assert WARNING in captured.err + captured.out


@pytest.mark.slow   # nbgrader's API starts the kernel behind a method call, which the tier's reading cannot follow
def test_the_graders_autograde_kernels_start_over_unix_sockets_without_the_warning(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """nbgrader's autograde, as `workshop.grading.grade` runs it (its worker's API), on a one-cell assignment:
    the kernel that re-executes the submission reports the `ipc` transport and prints no warning."""
    import shutil

    from workshop.grading import grade

    root = tmp_path / "course"
    (root / "nbgrader_config.py").parent.mkdir()
    (root / "nbgrader_config.py").write_text("c = get_config()\nc.CourseDirectory.course_id = 'tiny'\n")
    one_cell_notebook(root / "source" / "tiny", "tiny")
    db = root / "gradebook.db"
    api = grade._worker_api(root, db)
    assert api.generate_assignment("tiny", force=True, create=True)["success"]
    submitted = root / "submitted" / "alice" / "tiny"
    submitted.mkdir(parents=True)
    shutil.copy2(root / "notebooks" / "tiny" / "tiny.ipynb", submitted)
    ok, why, _ = grade.autograde_one(root, db, "tiny", "alice")
    assert ok, why
    seen = printed(root / "autograded" / "alice" / "tiny" / "tiny.ipynb")
    assert seen["transport"] == "ipc" and Path(seen["ip"]).is_absolute()
    assert not list(Path(seen["ip"]).parent.glob(Path(seen["ip"]).name + "-*"))   # its sockets were removed
    captured = capfd.readouterr()
    assert WARNING not in captured.err + captured.out
