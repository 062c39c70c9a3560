"""Grading finds the saved job that ran the student's own wrap function (notebook 02, section 4), by its
content: a job that ran another version of the function, or the blank stub, is not theirs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from workshop.student.lab import Lab, NoSavedJob
from workshop.slurm.records import JobRecord
from workshop.training.wrap_function import JOB_FILE, job_settings


def shard_model(model):  # noqa: ANN001, ANN201 - the student's function (its source is what counts)
    for block in model.transformer.h:
        fully_shard(block)  # noqa: F821
    fully_shard(model)  # noqa: F821


def saved_job(lab: Lab, folder: Path, source: str, submitted_at: str) -> None:
    """A job folder as `submit` leaves it: the job's own copy of the file, its config naming that copy."""
    folder.mkdir(parents=True)
    (folder / JOB_FILE).write_text(source)
    lab.config("fsdp_1gpu", wrap_function=f"{folder / JOB_FILE}:shard_model").to_json(folder / "config.json")
    JobRecord(job_id=folder.name, backend="local", step="fsdp_1gpu", profile="local", name="workshop-fsdp_1gpu",
              job_dir=str(folder), submitted_at=submitted_at).save()


def test_grading_matches_a_wrap_function_job_by_the_functions_content(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    lab = Lab("local", quiet=True)
    mine = job_settings(shard_model, "shard_model.py")
    assert mine == {"wrap_function": "shard_model.py:shard_model",
                    "sha256": hashlib.sha256(Path("shard_model.py").read_bytes()).hexdigest()}
    saved_job(lab, tmp_path / "jobs" / "fsdp_1gpu-ours", Path("shard_model.py").read_text(), "2026-01-01T10:00:00")
    saved_job(lab, tmp_path / "jobs" / "fsdp_1gpu-newer", "def shard_model(model):\n    pass\n", "2026-01-01T11:00:00")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")

    # the notebook's file at hand (nbgrader's kernel): the job whose copy has the same content, not the newest
    assert lab.run("fsdp_1gpu", wait=False, wrap_function=mine["wrap_function"]).job_dir.name == "fsdp_1gpu-ours"
    # without the file (the independent re-run): matched by function name; the test cell then compares the
    # recorded sha256 with the job's wrap_function_sha256
    Path("shard_model.py").unlink()
    assert lab.run("fsdp_1gpu", wait=False, wrap_function=mine["wrap_function"]).job_dir.name == "fsdp_1gpu-newer"
    # the blank stub, written by the release's cell: no saved job ran it
    Path("shard_model.py").write_text("def shard_model(model):\n    raise NotImplementedError()\n")
    with pytest.raises(NoSavedJob):
        lab.run("fsdp_1gpu", wait=False, wrap_function=mine["wrap_function"])
    with pytest.raises(NoSavedJob):
        lab.run("fsdp_1gpu", wait=False, wrap_function="shard_model.py:another_name")
