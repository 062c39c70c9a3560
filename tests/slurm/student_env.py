"""What the Unix user `student` runs in the Slurm tests: the package under test and the test venv's packages,
from a place `student` can read, wherever the checkout lives (issue 55).

A newcomer who clones as root into a folder other users cannot enter (`mktemp -d`, `/root`: mode 0700) gave
`student` a checkout and a venv it could not read: `ModuleNotFoundError: No module named 'workshop'` in a job,
after 20 minutes of suite, and nothing saying why. When `student` cannot read them, the session makes a
student-readable view: the checkout's files and the venv's site-packages hard-linked (the same files, so what
runs is still the code under test; copied where hard links cannot cross file systems) into a folder of the
cluster's shared directory, removed at the session's end. When they are readable, the view is the checkout
itself and costs nothing. Where even the view cannot be read (a clone made under umask 077: a hard link shares
its file's mode), the session stops at its first student-side test, within seconds, naming the fix.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
STUDENT = "student"
# the checkout's parts a job of `student` reads (the package, its batch templates and profiles); the rest
# (.git, .venv, results) stays where it is
CHECKOUT_PARTS = ("workshop", "slurm", "notebooks", "pyproject.toml")


@dataclass(frozen=True)
class StudentView:
    """Where `student` finds the checkout (`repo`: on PYTHONPATH, `import workshop`) and the test venv's
    packages (`site`); `made` is the folder made for the view, None when the originals are readable."""

    repo: Path
    site: Path
    made: Path | None = None

    def pth(self) -> str:
        """A .pth file's text that puts both on a student interpreter's path."""
        return f"{self.repo}\n{self.site}\n"


def venv_site() -> Path:
    """The test venv's site-packages (this interpreter's)."""
    return Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def can_read(path: Path, user: str = STUDENT) -> bool:
    """Whether `user` can read `path` (every folder above it entered): asked of the system as that user, so
    groups and ACLs count as they will for the job."""
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    return subprocess.run([runuser, "-u", user, "--", "test", "-r", str(path)], capture_output=True,
                          timeout=30).returncode == 0


def closed_folder(path: Path, user: str = STUDENT) -> Path | None:
    """The first folder above `path` that `user` cannot enter, for the message; None if each one opens."""
    for folder in reversed(path.parents):
        runuser = shutil.which("runuser") or "/usr/sbin/runuser"
        if subprocess.run([runuser, "-u", user, "--", "test", "-x", str(folder)], capture_output=True,
                          timeout=30).returncode != 0:
            return folder
    return None


def _link_tree(src: Path, dest: Path) -> None:
    """`dest` as a tree of hard links to `src`'s files (folders made anew); a copy across file systems, where a
    link cannot go. `cp` rather than shutil: the venv's 55,000 files link in about 2 s."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["cp", "-al", str(src), str(dest)], capture_output=True, timeout=600).returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)
        subprocess.run(["cp", "-a", str(src), str(dest)], check=True, capture_output=True, timeout=1200)


def _open_up(top: Path) -> None:
    """Every folder under `top` 0755 (made anew, they may have copied a closed mode). Files keep theirs: a hard
    link shares its mode with the checkout's file, and a file closed there stays closed (then the check after
    says so)."""
    for folder, _, _ in os.walk(top):
        os.chmod(folder, 0o755)
    top.chmod(0o755)


def make_view(shared: Path, readable: Callable[[Path], bool] = can_read) -> StudentView:
    """The student's view of the code under test: the originals when `student` can read them, else links to them
    in a new folder of `shared` (a folder every user can enter)."""
    site = venv_site()
    if readable(ROOT / "workshop" / "__init__.py") and readable(site):
        return StudentView(ROOT, site)
    made = shared / f"under-test-{os.getpid()}"
    shutil.rmtree(made, ignore_errors=True)
    made.mkdir(mode=0o755)
    made.chmod(0o755)
    for part in CHECKOUT_PARTS:
        if (ROOT / part).exists():
            _link_tree(ROOT / part, made / "repo" / part)
    _link_tree(site, made / "site")
    _open_up(made)
    view = StudentView(made / "repo", made / "site", made)
    unread = [p for p in (view.repo / "workshop" / "__init__.py", view.site) if not readable(p)]
    if unread:
        message = unreadable_message(unread[0], made)
        shutil.rmtree(made, ignore_errors=True)
        raise RuntimeError(message)
    return view


def unreadable_message(path: Path, made: Path) -> str:
    """Why `student` cannot read the code under test even through the view (`path`, in `made`), and what to
    change: a folder closed to others above the view, or the files' own modes (a clone made under umask 077:
    a hard link shares its file's mode)."""
    closed = closed_folder(path)
    if closed is not None and not closed.is_relative_to(made):
        why = f"the folder {closed} is closed to other users (mode {closed.stat().st_mode & 0o777:04o})"
        fix = f"`chmod o+rx {closed}`, or set WORKSHOP_SLURM_DIR to a folder every user can enter"
    else:
        original = ROOT / path.relative_to(made / "repo") if path.is_relative_to(made / "repo") else venv_site()
        why = f"{original} is not readable by other users (mode {original.stat().st_mode & 0o777:04o}; a clone made " \
              f"under umask 077?)"
        fix = f"`chmod -R o+rX {ROOT} {venv_site()}`, or clone under umask 022"
    return (f"the Slurm tests run jobs as the user '{STUDENT}', who cannot read the code under test: {why}. "
            f"Fix: {fix}.")


def student_venv(view: StudentView, venv: Path, run_as_student: Callable[..., object]) -> Path:
    """A venv of the system Python 3 made by `student` (root's venv interpreter may live where `student` cannot
    go), seeing the view as a student's conda env sees the course repo; `workshop` and `torchrun` scripts in
    its bin. Returns the path of its `workshop`."""
    run_as_student("/usr/bin/python3", "-m", "venv", "--without-pip", str(venv))
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "workshop-under-test.pth").write_text(view.pth())
    for name, entry in (("workshop", "workshop.cli"), ("torchrun", "torch.distributed.run")):
        script = venv / "bin" / name
        script.write_text(f"#!{venv}/bin/python\nimport sys\nfrom {entry} import main\nsys.exit(main())\n")
        script.chmod(0o755)
    return venv / "bin" / "workshop"
