"""Generate the student release (notebooks/) from the instructor source (solutions/) with nbgrader.

    python -m workshop.grading.release            # rewrite notebooks/ and enter every assignment in gradebook.db
    python -m workshop.grading.release --check    # exit 1 when notebooks/ is not what solutions/ generates

The release is never edited by hand; the test suite runs `--check`'s comparison. Writing the release
also records each assignment, its notebooks and grade cells in the course's own gradebook (the
`db_url` of nbgrader_config.py): autograde finds nothing to grade against without them.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def assignments(root: Path = REPO) -> list[str]:
    return sorted(p.name for p in (root / "solutions").iterdir() if p.is_dir() and not p.name.startswith("."))


def nbgrader_config(root: Path, release_dir: Path, db: Path) -> "object":
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.release_directory = str(release_dir)
    config.CourseDirectory.db_url = f"sqlite:///{db}"
    return config


# What running a notebook leaves beside it; never part of a release.
RUN_OUTPUTS = ["jobs", "tables", "plots", "merged", "results"]


def venv_on_path() -> None:
    """nbgrader runs `alembic` by name: the tools of this interpreter's environment must be on PATH."""
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def course_gradebook(root: Path = REPO) -> Path:
    """The gradebook file nbgrader_config.py names (relative sqlite URLs are read from the course root)."""
    from traitlets.config.loader import PyFileConfigLoader

    url = str(PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config().CourseDirectory.db_url)
    if not url.startswith("sqlite:///"):
        raise ValueError(f"nbgrader_config.py: db_url {url!r} is not an sqlite file; the workshop's tools need one "
                         "(sqlite:///gradebook.db)")
    path = Path(url.removeprefix("sqlite:///"))
    return path if path.is_absolute() else root / path


def generate(release_dir: Path, root: Path = REPO, gradebook: Path | None = None) -> list[str]:
    """Run nbgrader generate_assignment for every assignment into `release_dir`; the names done.

    `gradebook`: the database that records the assignments and their grade cells (None: a throwaway
    one, for comparisons that must leave the course untouched)."""
    from nbgrader.apps import NbGraderAPI

    venv_on_path()
    release_dir = release_dir.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        config = nbgrader_config(root, release_dir, gradebook.resolve() if gradebook else Path(tmp) / "gradebook.db")
        config.CourseDirectory.ignore = list(config.CourseDirectory.ignore) + RUN_OUTPUTS
        api = NbGraderAPI(config=config)
        done = []
        for name in assignments(root):
            result = api.generate_assignment(name, force=True)
            if not result["success"]:
                raise RuntimeError(f"nbgrader could not generate {name}:\n{result.get('log', '')}"
                                   f"{result.get('error', '')}")
            done.append(name)
        for notebook in release_dir.glob("*/*.ipynb"):
            set_course_kernel(notebook)
    return done


def set_course_kernel(notebook: Path) -> None:
    """Open the notebook with the course kernel the student guide promises ("FSDP workshop (bloom_env)",
    registered by `python -m workshop.student.kernel`), not whichever "Python 3" JupyterLab finds first."""
    import nbformat

    from workshop.student.kernel import DISPLAY_NAME, KERNEL_NAME

    nb = nbformat.read(notebook, as_version=nbformat.NO_CONVERT)
    nb.metadata["kernelspec"] = {"display_name": DISPLAY_NAME, "language": "python", "name": KERNEL_NAME}
    nb.metadata["language_info"] = kernel_language_info()
    nbformat.write(nb, notebook)


def kernel_language_info() -> dict[str, object]:
    """What the course kernel reports as its language (ipykernel's kernel_info reply), which JupyterLab writes
    into the notebook's metadata as soon as the kernel connects: a notebook released with less (nbgrader
    keeps only {"name": "python"}) showed unsaved changes right after it opened. Python's version is this
    environment's: a site whose course environment has another patch release shows the change once."""
    from ipykernel.ipkernel import IPythonKernel

    return dict(IPythonKernel.language_info)


def differences(expected: Path, actual: Path) -> list[str]:
    """Files that differ, or exist on one side only, between two release trees."""
    out: list[str] = []

    def walk(cmp: filecmp.dircmp, prefix: str) -> None:
        out.extend(f"{prefix}{n} (only in the fresh generation)" for n in cmp.left_only)
        out.extend(f"{prefix}{n} (not generated from solutions/)" for n in cmp.right_only)
        _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
        out.extend(f"{prefix}{n} (differs)" for n in mismatch + errors)
        for name, sub in cmp.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(filecmp.dircmp(expected, actual, ignore=["__pycache__", ".ipynb_checkpoints"]), "")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workshop.grading.release", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            diff = differences(Path(tmp), REPO / "notebooks")
        if diff:
            print("notebooks/ is out of date with solutions/ (run scripts/release.sh):\n  " + "\n  ".join(diff))
            return 1
        print("notebooks/ matches a fresh nbgrader generation of solutions/")
        return 0
    gradebook = course_gradebook()
    with tempfile.TemporaryDirectory() as tmp:
        done = generate(Path(tmp) / "notebooks", gradebook=gradebook)
        target = REPO / "notebooks"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(Path(tmp) / "notebooks", target)
    print(f"generated notebooks/ for {', '.join(done)}; {gradebook.name} knows each assignment and its grade cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
