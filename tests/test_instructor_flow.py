"""The instructor's day as docs/instructor.md writes it, performed step by step in a fresh course root.

The commands are read out of the guide itself (its bash blocks from "## Release" to "## On the
workshop day"), so the guide and this test cannot drift; README's instructor block must be made of
the same commands. Placeholders (`<student>`, `<student-home>`) are filled per student. Three
students of step 01: alice did the work (the session's course run: executed notebook and its jobs),
mallory did too but typed two numbers of her own, bob handed in the notebook untouched, without jobs/.
"""

from __future__ import annotations

import csv
import html
import os
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from tests.grading import append_to_cell
from workshop.grading.release import REPO, assignments

pytestmark = pytest.mark.slow

GUIDE = REPO / "docs" / "instructor.md"
PLACEHOLDER = re.compile(r"<([a-z][a-z-]*)>")


def bash_blocks(text: str) -> list[list[str]]:
    """The command lines of each ```bash block, in order."""
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [[ln for ln in b.splitlines() if ln.strip() and not ln.lstrip().startswith("#")] for b in blocks]


def section(text: str, first: str, stop: str) -> str:
    return text[text.index(first):text.index(stop)]


def flow_commands() -> list[str]:
    return [ln for block in bash_blocks(section(GUIDE.read_text(), "## Release", "## On the workshop day"))
            for ln in block]


def readme_commands() -> list[str]:
    readme = (REPO / "README.md").read_text()
    part = readme[readme.index("## For instructors"):]
    return bash_blocks(part[:part.index("\n## ", 3)])[0]


def command(line: str) -> str:
    return line.split("  #", 1)[0].strip()


def fresh_course_root(dest: Path) -> Path:
    """The repository's tracked files, as a clean clone has them, with this checkout's environment."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for name in filter(None, files.split("\0")):
        src = REPO / name
        if src.is_symlink():                    # workshop/slurm/files -> ../../slurm, as a clone has it
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).symlink_to(os.readlink(src))
        elif src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    (dest / ".venv").symlink_to(REPO / ".venv")
    return dest


def run(line: str, root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", "-c", line], cwd=root, env=env, capture_output=True, text=True, timeout=900)
    print(f"$ {line}\n{proc.stdout}{proc.stderr}")
    return proc


def test_readme_instructor_block_is_the_guides_commands() -> None:
    guide = {command(ln) for block in bash_blocks(GUIDE.read_text()) for ln in block}
    missing = [command(ln) for ln in readme_commands() if command(ln) not in guide]
    assert readme_commands() and missing == []


@pytest.mark.heavy(reason="the whole instructor day as docs/instructor.md writes it: release, three students' "
                          "notebooks executed, collect, grade, feedback, verify (183 s on 2026-11-26)", cpu_s=900)
def test_the_guide_as_written(course_run: Path, tmp_path: Path) -> None:
    root = fresh_course_root(tmp_path / "course")
    write_model_answer(root / "solutions" / "01_baseline" / "01_baseline.ipynb")
    homes = {s: tmp_path / "home" / s for s in ("alice", "bob", "mallory")}
    for home in homes.values():
        home.mkdir(parents=True)
    results: dict[str, int] = {}
    for line in flow_commands():
        names = set(PLACEHOLDER.findall(line))
        assert names <= {"student", "student-home"}, f"the guide has a placeholder this test cannot fill: {line}"
        if line.startswith("mkdir -p submitted/"):          # collection: the students have done their work
            student_work(homes, course_run)
        for student in (sorted(homes) if names else [None]):
            typed = line if student is None else line.replace("<student-home>", str(homes[student])).replace(
                "<student>", student)
            proc = run(typed, root)
            results[command(line)] = proc.returncode
            if command(line).startswith("workshop verify"):
                verify_out = proc.stdout
            elif command(line).startswith("python -m workshop.grading.grade --jobs"):
                grade_out = proc.stdout
            if not command(line).startswith("workshop verify"):
                assert proc.returncode == 0, f"{typed} exited {proc.returncode}"
    # release: the course's own gradebook knows every assignment and its grade cells
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        assert sorted(a.name for a in gb.assignments) == assignments()
        assert all(gb.find_notebook(a, a).grade_cells for a in assignments())
    # grading: progress, one line for the submission without jobs/, and the grades
    assert re.search(r"\[autograde 3/3\] .*about 0 s left", grade_out), grade_out
    assert re.search(r"^bob/01_baseline: no jobs/ folder", grade_out, flags=re.M), grade_out
    grades = {r["student"]: r for r in csv.DictReader((root / "grades.csv").open())}
    cells = list(csv.DictReader((root / "grade_cells.csv").open()))
    code = {s: {c["cell"]: (float(c["score"]), float(c["max_score"])) for c in cells
                if c["student"] == s and c["cell_type"] == "code"} for s in homes}
    assert len(code["alice"]) >= 5 and all(score == top for score, top in code["alice"].values())
    assert all(score == 0 for score, _ in code["bob"].values())
    for student in homes:   # every graded cell has its row, and they add up to the submission's score
        assert sum(float(c["max_score"]) for c in cells if c["student"] == student) == float(grades[student]["max_score"])
        assert sum(float(c["score"]) for c in cells if c["student"] == student) == float(grades[student]["score"])
    # mallory handed in a copy of alice's jobs: the review names both, and withholds none of alice's points
    # (that one run is her only flag); mallory's two numbers of her own lost their points in nbgrader
    # already, so the review withholds nothing more and flags only the shared run
    for student, other in (("alice", "mallory"), ("mallory", "alice")):
        row = grades[student]
        reasons = row["flag_reasons"].split("; ")
        assert int(row["flags"]) == len(reasons) == 1, row
        assert "one run handed in twice" in reasons[0] and other in reasons[0], row
    assert float(grades["alice"]["verified_score"]) == float(grades["alice"]["score"])
    typed = {"nb01-16-test-last-logged-loss", "nb01-18-test-train-samples-per-s"}   # her two numbers
    assert float(grades["mallory"]["verified_score"]) == float(grades["mallory"]["score"]) \
        == sum(top for _, top in code["mallory"].values()) - sum(code["mallory"][cell][1] for cell in typed)
    assert "no jobs/ folder" in grades["bob"]["flag_reasons"]
    failed = {c["cell"] for c in cells if c["student"] == "mallory" and c["failed"] == "True"}
    assert failed == typed
    # feedback: every failed check's message is in the student's feedback
    feedback = (root / "feedback" / "mallory" / "01_baseline" / "01_baseline.html").read_text()
    graded = nbformat.read(root / "autograded" / "mallory" / "01_baseline" / "01_baseline.ipynb", as_version=4)
    for cell in graded.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") in failed:
            errors = [o for o in cell.outputs if o.output_type == "error"]
            assert errors and html.escape(errors[0].evalue, quote=False) in feedback, errors
    # the reflection's model answer: in formgrader's view of the submission, not in the student's feedback
    assert MODEL_ANSWER in formgrader_view(root / "autograded" / "alice" / "01_baseline" / "01_baseline.ipynb")
    assert MODEL_ANSWER not in (root / "feedback" / "alice" / "01_baseline" / "01_baseline.html").read_text()
    assert MODEL_ANSWER not in feedback
    # verify: alice's and mallory's jobs are one job handed in twice; bob handed in none
    assert results["workshop verify submitted/"] == 1
    assert re.search(r"mallory\s+01_baseline\s+local-\d+\s+FLAGGED\s+the same log .*alice/01_baseline", verify_out), \
        verify_out


MODEL_ANSWER = "Model: the loss falls because ... Rubric: 1 point for naming the bottleneck"
REFLECTION = "nb01-26-reflection"


def write_model_answer(source: Path) -> None:
    """The instructor writes the reflection's model answer and rubric into solutions/ (before releasing)."""
    nb = nbformat.read(source, as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == REFLECTION)
    assert cell.cell_type == "markdown" and cell.metadata["nbgrader"]["solution"]
    cell.source = MODEL_ANSWER
    nbformat.write(nb, source)


def formgrader_view(autograded: Path) -> str:
    """The page formgrader serves for a submission: its own exporter and template on the autograded notebook."""
    from nbconvert.exporters import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers

    exporter = HTMLExporter(template_name="formgrade", extra_template_basedirs=[handlers.template_path])
    resources = {"assignment_id": "01_baseline", "notebook_id": "01_baseline", "submission_id": "x", "index": 0,
                 "total": 1, "base_url": "", "student": "alice", "last_name": "", "first_name": "",
                 "notebook_path": str(autograded)}
    page, _ = exporter.from_filename(str(autograded), resources=resources)
    return page


def student_work(homes: dict[str, Path], course_run: Path) -> None:
    """What the students did with their handed-out folder before it was collected."""
    for student in ("alice", "mallory"):
        folder = homes[student] / "01_baseline"
        shutil.rmtree(folder)
        shutil.copytree(course_run / "01_baseline", folder, ignore=shutil.ignore_patterns("tables", "plots"))
    path = homes["mallory"] / "01_baseline" / "01_baseline.ipynb"
    nb = nbformat.read(path, as_version=4)
    append_to_cell(nb, "nb01-13-baseline-table",
                   'baseline["last_logged_loss"] = 1.234\nbaseline["train_samples_per_s"] = 999.0')
    nbformat.write(nb, path)


def test_a_step_that_cannot_work_says_which_and_what_to_run(tmp_path: Path) -> None:
    """No gradebook entry: one line per submission naming the fix (nbgrader's own error is a traceback)."""
    root = fresh_course_root(tmp_path / "course")
    for student in ("ann", "ben"):
        shutil.copytree(REPO / "notebooks" / "01_baseline", root / "submitted" / student / "01_baseline")
    proc = run("python -m workshop.grading.grade", root)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stdout.splitlines() if "NOT GRADED" in ln]
    assert len(lines) == 2 and all("has no assignment '01_baseline': run scripts/release.sh" in ln for ln in lines)
