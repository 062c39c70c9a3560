"""A cell's jobs as one: submitted together, watched in one display, waited for and cancelled together.

    from workshop.slurm.group import submit_all
    jobs = submit_all({"ddp": ("strategies", {"sharding": "ddp"}),
                       "full_shard": ("strategies", {"sharding": "full_shard"})}, profile="ci")
    jobs.wait()        # {"ddp": JobState.COMPLETED, "full_shard": JobState.COMPLETED}
    jobs["ddp"].summary()
    jobs.cancel()      # every job of the group that has not ended

Every job is checked and rendered before the first one is submitted, so a bad config submits
nothing; then all go to the queue at once and Slurm (or the local backend's core queue) runs them
side by side where there is room. Each job keeps its own folder, named by what it runs, so
running the cell again finds the jobs instead of submitting duplicates.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from workshop.training.config import RunConfig
from workshop.slurm.profiles import Profile, load_profile
from workshop.slurm.jobs import Job, prepare
from workshop.slurm.records import JobState


class JobGroup(Mapping[str, Job]):
    """Jobs by name, in the order given."""

    def __init__(self, jobs: Mapping[str, Job]) -> None:
        self._jobs = dict(jobs)

    def __getitem__(self, name: str) -> Job:
        return self._jobs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def states(self) -> dict[str, JobState]:
        return {name: job.state() for name, job in self._jobs.items()}

    def wait(self, timeout: float | None = None, poll: float | None = None, quiet: bool = False) -> dict[str, JobState]:
        """Until every job has ended (or `timeout` s pass), in one display; each job's last state."""
        from workshop.slurm.watch import wait_all
        return wait_all(self._jobs, timeout=timeout, poll=poll, quiet=quiet)

    def cancel(self) -> dict[str, JobState]:
        """Cancel every job of the group that has not ended; each job's state after."""
        return {name: job.cancel() for name, job in self._jobs.items()}

    def __repr__(self) -> str:
        rows = ", ".join(f"{name!r}: {job.job_id} {job.record.state}" for name, job in self._jobs.items())
        return f"JobGroup({{{rows}}})"


Spec = tuple[str, RunConfig | Mapping[str, Any]]


def submit_all(specs: Mapping[str, Spec], profile: str | Path | Profile | None = None, *,
               jobs_dir: str | Path = "jobs", resubmit: bool = False, cap: int | None = None,
               poll_s: float = 1.0, force: bool = False) -> JobGroup:
    """Submit every (step, config or overrides) of `specs`; jobs submitted before are found again. Every job is
    checked (its GPU fit too, unless `force`) before the first one goes.

    At most `cap` of them (default: the profile's `[slurm] jobs_per_user`, 0 = no cap) are in the queue at
    once: a site's MaxSubmitJobsPerUser rejects the job over its limit at sbatch, so a cell of six jobs
    under a QOS of three would lose three. Past the cap, this call returns only when the last job is
    submitted, each one as an earlier one ends."""
    prof = load_profile(profile)
    ready = {}
    for name, (step, settings) in specs.items():
        if isinstance(settings, RunConfig):
            ready[name] = prepare(step, settings, prof, resubmit=resubmit, jobs_dir=jobs_dir, force=force)
        else:
            ready[name] = prepare(step, None, prof, overrides=settings, resubmit=resubmit, jobs_dir=jobs_dir,
                                  force=force)
    for sub in ready.values():
        sub.check_fit()
    limit = prof.jobs_per_user if cap is None else cap
    return JobGroup(submit_capped(ready, limit, poll_s))


def submit_capped(ready: Mapping[str, Any], cap: int, poll_s: float = 1.0) -> dict[str, Job]:
    """`.submit()` each of `ready` in order, with at most `cap` (0: no cap) of their jobs unfinished at once."""
    import time

    jobs: dict[str, Job] = {}
    for name, submission in ready.items():
        while cap and sum(not job.state().finished for job in jobs.values()) >= cap:
            time.sleep(poll_s)
        jobs[name] = submission.submit()
    return jobs
