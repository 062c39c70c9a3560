"""Polling at class scale (issue 23, item 7): the watch's sacct interval is a profile field that scales with
the class, and the instructor guide's setting keeps 100 kernels at <= 1 sacct call per second in all. The
real calls' spacing on a real Slurm is tests/slurm/test_watch_on_cluster.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from workshop.slurm.profiles import PROFILES_DIR, ProfileError, load_profile, parse_profile
from workshop.slurm.slurm_backend import MIN_POLL_INTERVAL, Poller

ROOT = Path(__file__).resolve().parent.parent


def guide_setting() -> str:
    guide = (ROOT / "docs" / "instructor.md").read_text()
    return re.search(r"```toml\n(\s*\[slurm\.watch\].*?)```", guide, flags=re.S).group(1)


def test_the_guides_setting_keeps_100_kernels_at_one_sacct_call_per_second(tmp_path: Path) -> None:
    block = "\n".join(line.strip() for line in guide_setting().splitlines())
    site = tmp_path / "class.toml"
    site.write_text((PROFILES_DIR / "example-hpc.toml").read_text().replace(
        "[slurm.watch]\nkernels = 20\nsacct_per_s = 1.0\n", block))
    profile = load_profile(site)
    assert (profile.watch_kernels, profile.watch_sacct_per_s) == (100, 1.0)
    assert profile.sacct_interval_s == 100.0
    assert profile.watch_kernels / profile.sacct_interval_s <= 1.0            # sacct calls per second, in all
    poller = Poller()
    poller.watch("4242", profile.sacct_interval_s)
    assert poller.interval() == 100.0 and poller.due_in() == 0.0
    # a kernel that watches no job of that class keeps the helper's floor
    assert Poller().interval() == MIN_POLL_INTERVAL


def test_the_interval_scales_with_the_class_and_never_drops_below_the_helpers_floor() -> None:
    site = load_profile("example-hpc")
    assert site.sacct_interval_s == 20.0                                     # 20 kernels at 1 call/s
    small = parse_profile({"slurm": {"watch": {"kernels": 4}}}, "t.toml", "t")
    poller = Poller()
    poller.watch("1", small.sacct_interval_s)
    assert small.sacct_interval_s == 4.0 and poller.interval() == MIN_POLL_INTERVAL
    assert load_profile("ci").sacct_interval_s == 0.0                        # no class: the helper's floor
    with pytest.raises(ProfileError, match=r"field 'slurm.watch'.*positive"):
        parse_profile({"slurm": {"watch": {"kernels": 100, "sacct_per_s": 0}}}, "t.toml", "t")
    with pytest.raises(ProfileError, match=r"field 'slurm.watch.class_size'"):
        parse_profile({"slurm": {"watch": {"class_size": 100}}}, "t.toml", "t")


def test_a_submitted_job_carries_its_class_interval(tmp_path: Path) -> None:
    """job.json keeps the interval, so a restarted kernel (Job.load) holds the class's rate too."""
    from workshop.slurm.jobs import Job, prepare

    text = (PROFILES_DIR / "local.toml").read_text().replace('time = "00:30:00"',
                                                              'time = "00:30:00"\n\n[slurm.watch]\nkernels = 30', 1)
    (tmp_path / "class-local.toml").write_text(text)
    sub = prepare("baseline", profile=tmp_path / "class-local.toml", jobs_dir=tmp_path / "jobs",
                  overrides={"train_size": 4, "eval_size": 2, "epochs": 1})
    job = sub.submit()
    try:
        assert Job.load(job.job_dir).record.sacct_interval_s == 30.0
    finally:
        job.cancel()
