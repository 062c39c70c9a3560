"""The student's install (issue 48, item 1): the course package as bloom_env.yml installs it (`pip install .` of the
checkout, not editable) holds no grading room, so in a fresh virtual environment the answer key does not import and
no `solutions/` or notebook lands in site-packages; it carries what the jobs need (the batch templates, the site
profiles, the OOD app: workshop/slurm/files, a link to the checkout's slurm/ that the wheel copies). The
instructor's editable install (`make venv`, the grading environment of docs/instructor.md) reads `workshop.grading`
from the checkout."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
# The references only hidden tests compare against, moved into the grading room (issue 48, item 1): old path -> new.
# A student who types either path in their install gets ModuleNotFoundError; the scan flags both where grading runs.
MOVED_REFERENCES = {"workshop.training.fsdp_rules": "workshop.grading.fsdp_rules",
                    "workshop.comm.traffic": "workshop.grading.traffic",
                    "workshop.training.consistency": "workshop.grading.consistency"}
DEV_SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def hidden_test_imports() -> dict[str, set[str]]:
    """Every module a hidden test block of solutions/ imports (`### BEGIN HIDDEN TESTS` ... `END`), with the cells
    that import it: read from the notebooks, so that a hidden test added tomorrow is counted too."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            for block in re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", source, flags=re.S):
                for node in ast.walk(ast.parse(block)):
                    names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                             else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                    for name in names:
                        found.setdefault(name, set()).add(cell.get("id", path.name))
    return found


def test_hidden_tests_import_the_grading_room_and_plain_python_only() -> None:
    """What a hidden test compares against lives where grading runs: a module of the course's package a hidden test
    imports is one the student's install leaves out (checked there, below); anything else is Python's own."""
    imports = hidden_test_imports()
    assert imports, "no hidden test imports anything: the parse above is broken"
    other = {m: sorted(c) for m, c in imports.items()
             if m.split(".")[0] != "workshop" and m.split(".")[0] not in sys.stdlib_module_names}
    assert other == {}
    student = {m: sorted(c) for m, c in imports.items() if m.split(".")[0] == "workshop"
               and not (m == "workshop.grading" or m.startswith("workshop.grading."))}
    assert student == {}, "a hidden test imports a module the student's install holds: put its reference in " \
                          "workshop/grading/references.py (python -m workshop.grading.references --write)"


def course_copy(tmp_path: Path) -> Path:
    """The checkout's package files in a folder of their own (a build writes build/ and *.egg-info beside them);
    workshop/slurm/files is copied as the files it links to."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "workshop", src / "workshop", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "slurm", src / "slurm")
    for name in ("pyproject.toml", "README.md", "bloom_env.yml"):
        shutil.copy2(ROOT / name, src / name)
    return src


def build_wheel(tmp_path: Path) -> Path:
    """`pip wheel` of a copy of the checkout's package files."""
    src = course_copy(tmp_path)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(src)], check=True, capture_output=True, text=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    return wheel


def bloom_env_course_line() -> str:
    """The pip line of bloom_env.yml that installs the course package (the last one)."""
    env = yaml.safe_load((ROOT / "bloom_env.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    return pip[-1]


def test_the_wheel_carries_the_jobs_files_and_no_grading_room(tmp_path: Path) -> None:
    names = zipfile.ZipFile(build_wheel(tmp_path)).namelist()
    assert [n for n in names if n.startswith("workshop/grading/") or "solutions/" in n or n.endswith(".ipynb")] == []
    assert "workshop/student/lab.py" in names                         # the course itself is there
    assert "workshop/training/counted_steps.py" in names              # the budget's step arithmetic stays
    moved = {m.rsplit(".", 1)[1] + ".py" for m in MOVED_REFERENCES}
    assert [n for n in names if n.rsplit("/", 1)[-1] in moved] == []
    for part in ("templates/job.sh", "profiles/ci.toml", "profiles/example-hpc.toml", "ood/form.yml.erb"):
        assert f"workshop/slurm/files/{part}" in names, part
    assert not [n for n in names if n.startswith("workshop/slurm/files/admin/")]   # the site admin's Epilog


def test_the_students_install_as_bloom_env_yml_writes_it(tmp_path: Path) -> None:
    """bloom_env.yml's own line, as pip runs it beside the file, into a fresh venv that sees the pinned packages
    (the dev venv's site-packages, on a .pth line: its editable finder is not loaded from there)."""
    line = bloom_env_course_line()
    assert line == ".", f"bloom_env.yml installs the course as {line!r}: a student's install must not be editable"
    src = course_copy(tmp_path)
    venv = tmp_path / "student"
    # without a pip of its own: the venv's bundled setuptools would shadow the pinned one (no bdist_wheel)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = venv / "lib" / DEV_SITE.parent.name / "site-packages"
    (site / "zz-pinned-packages.pth").write_text(f"{DEV_SITE}\n")
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                          "--no-build-isolation", "--no-index", line], cwd=src, capture_output=True, text=True)
    assert pip.returncode == 0, pip.stderr[-3000:]
    shutil.rmtree(src)                                               # nothing of the checkout is left to read
    # from a folder that is not the checkout, as a student's course folder is not (`python -c` reads its cwd first)
    key = subprocess.run([python, "-c", "from workshop.grading import answer_key"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert key.returncode == 1 and "ModuleNotFoundError: No module named 'workshop.grading'" in key.stderr
    for old, new in MOVED_REFERENCES.items():                         # the grader's rules, at either path
        for path, missing in ((old, old), (new, "workshop.grading")):
            ref = subprocess.run([python, "-c", f"import {path}"], cwd=tmp_path, capture_output=True, text=True)
            assert ref.returncode == 1 and f"ModuleNotFoundError: No module named '{missing}'" in ref.stderr, path
    for module in sorted(m for m in hidden_test_imports() if m.split(".")[0] == "workshop"):   # item 1, to the letter
        ref = subprocess.run([python, "-c", f"import {module}"], cwd=tmp_path, capture_output=True, text=True)
        assert ref.returncode == 1 and "ModuleNotFoundError: No module named 'workshop.grading" in ref.stderr, module
    ran = subprocess.run([python, "-c", "import workshop.slurm.profiles as p; print(p.__file__); print(p.TEMPLATES_DIR);"
                          "print(p.load_profile('ci').source)"], cwd=tmp_path, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    module, templates, profile = ran.stdout.splitlines()
    assert all(path.startswith(str(site)) for path in (module, templates, profile)), ran.stdout
    assert (Path(templates) / "job.sh").is_file()
    assert not [p for p in venv.rglob("*") if p.name == "solutions" or p.suffix == ".ipynb" or p.name == "grading"]
    # docs/student.md's kernel line, as written, from this install alone (scripts/ is the checkout's, not theirs)
    (line,) = re.findall(r"`(python -m workshop\.student\.kernel [^`]+)`", (ROOT / "docs" / "student.md").read_text())
    env = dict(os.environ, HOME=str(tmp_path / "home"), PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    env.pop("JUPYTER_DATA_DIR", None)
    kernel = subprocess.run(["bash", "-c", line.replace("<your-site>", "ci")], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert kernel.returncode == 0, kernel.stderr
    spec = json.loads((tmp_path / "home" / ".local/share/jupyter/kernels/fsdp-workshop/kernel.json").read_text())
    assert spec["argv"][0] == python and spec["env"]["WORKSHOP_PROFILE"] == "ci"
