"""Instructor-run mode: a student's costly job stands for the instructor's run of the very same job.

The costly jobs (at least `[course] instructor_min_gpus` GPUs, 2+ nodes, or a step of `instructor_steps`) run once, by the instructor
(`workshop budget --profile <site> --instructor-run`), into the profile's `[course] instructor_jobs` folder. A
student's submission of the same job (same step, config and profile: the same job folder name) links that
folder into the student's jobs/ instead of queueing a copy. The job API links it; grading recognises it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable

from workshop.training.config import ConfigError, RunConfig
from workshop.slurm.profiles import Profile, ProfileError, load_profile
from workshop.slurm.steps import STEPS


def is_costly(cfg: RunConfig, profile: Profile, step: str | None = None) -> bool:
    """A job the instructor runs once for the class in instructor-run mode: 2+ nodes, at least
    `instructor_min_gpus` GPUs, or a job of a step the site lists in `instructor_steps` (notebook 03's
    4-GPU "strategies" jobs, where a site chooses that)."""
    unknown = [s for s in profile.instructor_steps if s not in STEPS]
    if unknown:
        raise ProfileError(profile.source, "course.instructor_steps", f"{unknown} are not course steps",
                           f"use step names: {', '.join(STEPS)}")
    return (cfg.nodes >= 2 or cfg.nodes * cfg.procs_per_node >= profile.instructor_min_gpus
            or (step is not None and step in profile.instructor_steps))


def shared_job(profile: Profile, cfg: RunConfig, jobs_root: Path, folder_name: str, step: str | None = None) -> Path | None:
    """The instructor's job folder that stands for a student's costly job, or None when the student
    runs it (mode off, a cheap job, or the instructor submitting into the shared folder itself).
    Raises when the mode is on and the instructor has not run the job yet."""
    if not profile.instructor_jobs or not is_costly(cfg, profile, step):
        return None
    shared_root = Path(profile.instructor_jobs).expanduser().resolve()
    if Path(jobs_root).resolve() == shared_root:
        return None
    shared = shared_root / folder_name
    if not (shared / "job.json").is_file():
        raise ConfigError("instructor_jobs", f"this job ({cfg.nodes} node(s) x {cfg.procs_per_node} GPUs) is run by the "
                          f"instructor for the class, and {str(shared)!r} does not hold it yet",
                          "ask your instructor to run `workshop budget --profile <site> --instructor-run` for this "
                          "profile, then run the cell again")
    return shared


def link_shared(job_dir: Path, shared: Path) -> None:
    """Put the instructor's job into the student's jobs/ (a symlink: collected with the notebook)."""
    job_dir.parent.mkdir(parents=True, exist_ok=True)
    if not job_dir.exists():
        job_dir.symlink_to(shared, target_is_directory=True)


# A profile named by a submitted job.json is looked up by bare name in this checkout's slurm/profiles/,
# never as a path: a submission must not choose which folder counts as the instructor's.
_BARE_NAME = re.compile(r"[A-Za-z0-9_-]+")


def instructor_roots(profile: str | Path | Profile | None = None, named: Iterable[str] = ()) -> list[Path]:
    """The instructor_jobs folders a grader trusts: the profile given (else $WORKSHOP_PROFILE's, if set) and
    the site profiles of this checkout that the submitted jobs name (`named`: job.json's `profile`)."""
    profiles = [load_profile(profile)] if profile is not None else []     # the grader's choice: errors show
    wanted = [os.environ["WORKSHOP_PROFILE"]] if profile is None and os.environ.get("WORKSHOP_PROFILE") else []
    wanted += [n for n in sorted(set(named)) if isinstance(n, str) and _BARE_NAME.fullmatch(n)]
    for name in wanted:
        try:
            profiles.append(load_profile(name))
        except ProfileError:
            continue
    roots: list[Path] = []
    for prof in profiles:
        root = Path(prof.instructor_jobs).expanduser().resolve() if prof.instructor_jobs else None
        if root is not None and root not in roots:
            roots.append(root)
    return roots


def instructor_roots_of(job_folders: Iterable[Path], profile: str | Path | Profile | None = None) -> list[Path]:
    """`instructor_roots` for these submitted job folders: the profile given, and those their job.json name."""
    names = set()
    for folder in job_folders:
        try:
            names.add(str(json.loads((Path(folder) / "job.json").read_text()).get("profile") or ""))
        except (OSError, ValueError, AttributeError):
            continue
    return instructor_roots(profile, names)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def instructor_original(folder: Path, roots: Iterable[Path]) -> Path | None:
    """The instructor-run job that a submitted job folder is, or None. Either a link into an instructor_jobs
    folder (what a student's cell leaves in jobs/), or a copy of one (`nbgrader collect` copies the linked
    folder) that the instructor's own folder holds byte for byte: the same job id, log and digest.json, so
    a copy of a classmate's job never passes for the instructor's. Its seal is still for the caller to check."""
    folder = Path(folder)
    for root in roots:
        original = Path(root) / folder.name
        if not (original / "job.json").is_file():
            continue
        if folder.resolve() == original.resolve():
            return original
        try:
            ids = {str(json.loads((f / "job.json").read_text())["job_id"]) for f in (folder, original)}
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if len(ids) != 1:
            continue
        log = f"slurm-{ids.pop()}.out"
        if _read(original / log) is not None and all(_read(folder / rel) == _read(original / rel)
                                                    for rel in (log, "run/digest.json")):
            return original
    return None
