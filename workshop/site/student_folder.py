"""`workshop student-folder DEST`: the folder a student works in, written from the release alone.

    workshop student-folder ~/fsdp-workshop                # in the course root: its notebooks/, one folder each
    workshop student-folder DEST --release other/notebooks  # from another release tree

A student works in this folder, never in a clone of the repository: a clone holds `solutions/` (every
answer), the gradebook and the references the checks compare against (issue 48). The folder holds what
the notebooks and their jobs need and nothing else: each assignment's release notebook (answers blank,
hidden tests stripped) and the other files nbgrader released beside it. The jobs write their own `jobs/`
folder next to each notebook when they run; the site profile and the batch templates come from the course
environment (`WORKSHOP_PROFILE`, `WORKSHOP_SLURM_FILES`), not from this folder.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]   # the release's default: notebooks/ of the checkout this runs from


# What never enters a student's folder, by name, wherever it sits in the release tree.
NEVER = ("solutions", "gradebook.db", ".git", "source", "autograded", "submitted", "feedback")
# Text that only an instructor's notebook holds: nbgrader strips both from a release.
INSTRUCTOR_MARKERS = ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS")


def refuse_instructor_files(release: Path) -> None:
    """Stop before copying a tree that is not a release: an answer or a hidden test in it would reach students."""
    for path in release.rglob("*"):
        if path.name in NEVER:
            raise SystemExit(f"{path}: not part of a student's folder; point --release at the release (notebooks/)")
        if path.suffix == ".ipynb" and any(m in path.read_text(errors="replace") for m in INSTRUCTOR_MARKERS):
            raise SystemExit(f"{path} holds answers or hidden tests: it is not a release notebook; "
                             "regenerate the release with scripts/release.sh")


def write(dest: Path, release: Path = CHECKOUT / "notebooks") -> list[Path]:
    """Copy every assignment of `release` into `dest`; the notebooks written. An existing notebook is kept
    (the student's work), and said so, rather than overwritten."""
    refuse_instructor_files(release)
    written = []
    for assignment in sorted(p for p in release.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for src in sorted(assignment.rglob("*")):
            if src.is_dir():
                continue
            target = dest / assignment.name / src.relative_to(assignment)
            if target.exists():
                print(f"kept {target}: it is already there (your work); delete it first to start over")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
            written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="workshop student-folder", description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path, help="the student's course folder (made if missing)")
    parser.add_argument("--release", type=Path, default=Path("notebooks"),
                        help="the release tree to copy (default: notebooks/ of the course root you run it in)")
    args = parser.parse_args(argv)
    if not args.release.is_dir():
        print(f"workshop student-folder: no release at {args.release}: pass --release", file=sys.stderr)
        return 2
    written = write(args.dest.expanduser(), args.release)
    notebooks = [p for p in written if p.suffix == ".ipynb"]
    print(f"{args.dest}: {len(notebooks)} notebook(s) written, {len(written) - len(notebooks)} other file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
