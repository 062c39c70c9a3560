"""Disk: no student's folder holds a model checkpoint or merged weights. Jobs checkpoint into the site's scratch
folder (the profile's `[env] scratch`), notebook 05 reads its checkpoint's index there (no merge), and
nbgrader's collection and autograde copy no checkpoint a job folder might still hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from workshop.grading.release import REPO, assignments
from workshop.slurm.profiles import load_profile, scratch_folder

WEIGHTS = (".distcp", ".safetensors", ".bin", ".pt", ".pth")
# The largest file the course run leaves beside a notebook is an executed notebook or a plot, tens to a few
# hundred KB; a BLOOM-560M checkpoint shard is hundreds of MB, and even the tiny model's optimizer shard is MBs.
LARGEST_FILE_BYTES = 2 * 2**20
COURSE_BYTES = 10 * 2**20        # all five folders: what docs/instructor.md, "Disk", states per student


def weights_in(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and (p.suffix in WEIGHTS or any(
        part.startswith("checkpoint-") or part == "merged" for part in p.relative_to(folder).parts))]


def test_an_executed_course_leaves_no_weights_beside_its_notebooks(course_run: Path) -> None:
    """Every notebook's folder after the course run (the papermill run of the solutions, jobs included): no
    checkpoint, no merged weights, and its largest file is an executed notebook's or a plot's size. Notebook 05
    read its job's checkpoint, which sits in the local profile's scratch folder, from its index."""
    import nbformat

    from workshop.slurm.jobs import Job

    folders = [course_run / name for name in assignments() if (course_run / name).is_dir()]
    assert folders
    total = sum(p.stat().st_size for folder in folders for p in folder.rglob("*") if p.is_file())
    assert total < COURSE_BYTES, total
    for folder in folders:
        assert weights_in(folder) == [], folder
        files = [p for p in folder.rglob("*") if p.is_file()]
        largest = max(files, key=lambda p: p.stat().st_size)
        assert largest.stat().st_size < LARGEST_FILE_BYTES, (largest, largest.stat().st_size)
        print(f"{folder.name}: {len(files)} files, {sum(p.stat().st_size for p in files) / 2**20:.2f} MB, largest "
              f"{largest.relative_to(folder)} {largest.stat().st_size / 2**10:.0f} KB")
    five = course_run / "05_multi_node"
    if five.is_dir():
        nb = nbformat.read(five / "05_multi_node.ipynb", as_version=4)
        read = next(c for c in nb.cells if c.id == "nb05-checkpoint-run")
        assert "read from the checkpoint's index, no weight loaded" in "".join(o.get("text", "") for o in read.outputs)
        saving = [Job.load(p.parent) for p in (five / "jobs").glob("multi_node-*/job.json")
                  if '"checkpoint_at_end": true' in (p.parent / "config.json").read_text()]
        assert len(saving) == 1
        where = saving[0].checkpoint_dir
        assert where.is_relative_to(scratch_folder(load_profile("local"))) and list(where.glob("checkpoint-*/*/*.distcp"))


def nbgrader_course_config():  # noqa: ANN201 - a traitlets Config
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()


def a_submission_with_checkpoints(root: Path) -> Path:
    """A collected 05 folder whose job kept its checkpoint in run/ (a profile without scratch), and merged/."""
    sub = root / "05_multi_node"
    run = sub / "jobs" / "multi_node-0123456789" / "run"
    shard = run / "checkpoint-12" / "pytorch_model_fsdp_0"
    shard.mkdir(parents=True)
    for name in ("__0_0.distcp", "__1_0.distcp", ".metadata"):
        (shard / name).write_bytes(b"\0" * 4096)
    (run / "checkpoint-12" / "trainer_state.json").write_text("{}")
    (run / "summary.json").write_text("{}")
    (run.parent / "slurm-local-1.out").write_text("[job] end\n")
    (sub / "merged").mkdir()
    (sub / "merged" / "model.safetensors").write_bytes(b"\0" * 4096)
    (sub / "05_multi_node.ipynb").write_text("{}")
    (sub / "tables").mkdir()
    (sub / "tables" / "05_multinode.csv").write_text("run\n")
    return sub


def exchange_copy(src: Path, dest: Path) -> None:
    """What nbgrader's exchange does with an assignment folder (`nbgrader submit`, `nbgrader collect`), with the
    course's nbgrader_config.py."""
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default.collect import ExchangeCollect

    config = nbgrader_course_config()
    ExchangeCollect(coursedir=CourseDirectory(config=config), authenticator=None, config=config).do_copy(str(src), str(dest))


def test_collection_and_autograde_copy_no_checkpoint(tmp_path: Path) -> None:
    """With the course's nbgrader_config.py, nbgrader's own copying leaves checkpoints and merged weights
    behind, and the logs and tables travel: autograde's (find_all_files, as nbgrader/converters/base.py copies
    the submission into autograded/) and the exchange's (submit and collect)."""
    from nbgrader.utils import find_all_files

    ignore = list(nbgrader_course_config().CourseDirectory.ignore)
    sub = a_submission_with_checkpoints(tmp_path / "submitted" / "alice")
    copied = sorted(str(Path(f).relative_to(sub)) for f in find_all_files(str(sub), ignore + ["*.ipynb"]))
    assert copied == ["jobs/multi_node-0123456789/run/summary.json", "jobs/multi_node-0123456789/slurm-local-1.out",
                      "tables/05_multinode.csv"]
    exchange_copy(sub, tmp_path / "exchange" / "05_multi_node")
    collected = tmp_path / "exchange" / "05_multi_node"
    assert weights_in(collected) == [] and (collected / "jobs/multi_node-0123456789/run/summary.json").is_file()


def test_why_no_checkpoint_may_sit_in_a_students_folder_at_all(tmp_path: Path) -> None:
    """nbgrader's exchange refuses a folder over CourseDirectory.max_dir_size (100 MB), ignored files counted:
    one BLOOM-560M checkpoint shard beside the notebook (hundreds of MB; a sparse file here) stops
    `nbgrader submit`, whatever the ignore list says."""
    sub = a_submission_with_checkpoints(tmp_path / "alice")
    with open(next(sub.rglob("__0_0.distcp")), "r+b") as shard:
        shard.truncate(400 * 10**6)
    with pytest.raises(RuntimeError, match="Directory size is too big"):
        exchange_copy(sub, tmp_path / "exchange" / "05_multi_node")


@pytest.mark.parametrize("profile", ["local", "ci", "example-hpc"])
def test_every_shipped_profile_names_a_scratch_folder_outside_the_jobs(profile: str, tmp_path: Path) -> None:
    from workshop.slurm.jobs import prepare

    from tests.test_gpu_paths import example_site_run_by_students

    # the example site runs notebook 05's 2-node job in instructor-run mode: its student render is read from the
    # instructor's folder, so the student's own job (whose checkpoint this is about) needs the mode off
    prof = load_profile(example_site_run_by_students(tmp_path) if profile == "example-hpc" else profile)
    scratch = scratch_folder(prof)
    assert scratch is not None and "$" not in str(scratch)
    job = prepare("multi_node", profile=prof, overrides={"checkpoint_at_end": True}, jobs_dir=tmp_path / "jobs")
    where = Path(job.cfg.checkpoint_dir)
    assert where.is_relative_to(scratch) and not where.is_relative_to(tmp_path)
    again = prepare("multi_node", profile=prof, overrides={"checkpoint_at_end": True}, jobs_dir=tmp_path / "jobs")
    assert again.cfg.checkpoint_dir == job.cfg.checkpoint_dir             # the same job resumes from the same place
    other = prepare("multi_node", profile=prof, overrides={"checkpoint_at_end": True}, jobs_dir=tmp_path / "other")
    assert other.cfg.checkpoint_dir != job.cfg.checkpoint_dir             # another course folder, its own
