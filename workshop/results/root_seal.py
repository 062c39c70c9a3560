"""The root seal (issue 48, item 5): what the site's Slurm Epilog recorded, as root, when each job ended.

A job's digest (run/digest.json) is written by the job itself, that is by the student's own process: with
no key anyone can recompute it, and a key the job can read the student can read too. The Epilog
(`slurm/admin/seal-epilog.sh`, installed by the site's admin: docs/instructor.md, "The root seal") runs as
root at the end of every job and writes `<job id>.sha256` (sha256sum's format, names relative to the job's
folder) into a folder only root can write. A log or a result edited after its job ended no longer has the
SHA-256 recorded there, whoever re-made its digest. `workshop verify --seal-dir DIR` reads it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import stat
from pathlib import Path

SEAL_ENV = "WORKSHOP_SEAL_DIR"     # verify's default --seal-dir; the Epilog's own variable of the same name


def read_seal(path: Path) -> dict[str, str]:
    """{name relative to the job folder: SHA-256 hex} from a sha256sum listing (text or binary mode)."""
    out = {}
    for line in path.read_text(errors="replace").splitlines():
        value, sep, name = line.partition(" ")
        if sep and len(value) == 64 and name[:1] in (" ", "*"):
            out[name[1:]] = value
    return out


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def not_roots(path: Path) -> str | None:
    """Why `path` cannot be a seal (another owner than root, or writable by group or others), else None."""
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a link, not the Epilog's file"
    if st.st_uid != 0 or st.st_mode & 0o022:
        return f"{path} is not root's alone (uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}): not a seal"
    return None


def root_seal_problems(folder: Path, job: str, seal_dir: Path) -> list[str]:
    """What in a job folder differs from the root seal of `job`: a file edited or missing since the job ended,
    no seal at all, or a seal students could have written."""
    seal = seal_dir / f"{job}.sha256"
    if not seal.is_file():
        return [f"no root seal of job {job} in {seal_dir}: the site's Epilog did not record it "
                "(not a job of this cluster, or one that ended before the Epilog was installed)"]
    for path in (seal_dir, seal):
        if (why := not_roots(path)) is not None:
            return [why]
    sealed_at = dt.datetime.fromtimestamp(seal.stat().st_mtime).astimezone().isoformat(timespec="seconds")
    recorded = read_seal(seal)
    problems = []
    if f"slurm-{job}.out" not in recorded:
        problems.append(f"the root seal of job {job} names no log slurm-{job}.out (its log went elsewhere)")
    for name, value in sorted(recorded.items()):
        path = folder / name
        if not path.is_file():
            problems.append(f"{name} is missing: the root seal recorded it when job {job} ended ({sealed_at})")
        elif _sha256(path) != value:
            problems.append(f"{name} was edited after job {job} ended: its SHA-256 is not the one the root "
                            f"seal recorded at {sealed_at}")
    return problems
