"""`workshop submit | status | cancel | logs`: the job API from a terminal.

JOB is a job id (searched under --jobs-dir) or a job folder. Errors print one sentence with the
fix and exit 2 (bad input) or 1 (the job or Slurm failed).
"""

from __future__ import annotations

import argparse
import sys
import time

from workshop.training.config import ConfigError, parse_assignments
from workshop.slurm.profiles import ProfileError


def _job_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", help="job id (e.g. 1234 or local-3) or job folder (jobs/<step>-<hash>)")
    p.add_argument("--jobs-dir", default="jobs", help="where job folders live (default: ./jobs)")


def _load(args: argparse.Namespace):
    from workshop.slurm.jobs import Job
    return Job.load(args.job, args.jobs_dir)


def _guard(func):
    def wrapped(argv: list[str]) -> int:
        try:
            return func(argv)
        except (ConfigError, ProfileError) as e:
            print(f"workshop: {e}", file=sys.stderr)
            return 2
        except FileNotFoundError as e:
            print(f"workshop: {e}", file=sys.stderr)
            return 2
        except OSError as e:             # JobsDirError: a jobs folder the job could not write to
            print(f"workshop: {e.strerror or e}", file=sys.stderr)
            return 2
        except RuntimeError as e:        # SlurmError, or a resubmit of a job that still runs
            print(f"workshop: {e}", file=sys.stderr)
            return 1
    wrapped.__doc__ = func.__doc__
    return wrapped


@_guard
def submit_main(argv: list[str]) -> int:
    """Render and submit a course step; print the job id and its folder."""
    from workshop.slurm.jobs import submit
    from workshop.slurm.steps import STEPS
    p = argparse.ArgumentParser(prog="workshop submit", description=submit_main.__doc__)
    p.add_argument("step", choices=list(STEPS))
    p.add_argument("--profile", default=None, help="site profile name or .toml path (default: $WORKSHOP_PROFILE, "
                   "or local where there is no Slurm)")
    p.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE",
                   help="config field override, repeatable (e.g. --set batch_size=8)")
    p.add_argument("--name", default=None, help="job name (default workshop-<step>)")
    p.add_argument("--resubmit", action="store_true", help="submit again even if this exact job exists")
    p.add_argument("--resume", action="store_true", help="submit this job again to continue from its latest "
                   "checkpoint (after a TIMEOUT), keeping its run/ folder")
    p.add_argument("--wait", action="store_true", help="watch the job until it ends; exit 0 only if COMPLETED")
    p.add_argument("--force", action="store_true", help="submit even if the job's dry run does not fit its "
                   "partition's GPU memory (`workshop dryrun`)")
    p.add_argument("--jobs-dir", default="jobs")
    args = p.parse_args(argv)
    job = submit(args.step, profile=args.profile, overrides=parse_assignments(args.assignments),
                 resubmit=args.resubmit, resume=args.resume, jobs_dir=args.jobs_dir, name=args.name,
                 force=args.force)
    print(f"{job.job_id} {job.job_dir}", flush=True)
    if args.wait:
        state = job.wait()
        return 0 if state.value == "COMPLETED" else 1
    return 0


@_guard
def status_main(argv: list[str]) -> int:
    """Print a job's state (and why, when it did not complete)."""
    p = argparse.ArgumentParser(prog="workshop status", description=status_main.__doc__)
    _job_arg(p)
    args = p.parse_args(argv)
    job = _load(args)
    state = job.state()
    reason = f"  ({job.reason})" if job.reason else ""
    prog = job.progress()
    steps = f"  step {prog[0]}/{prog[1]}" if prog else ""
    print(f"{job.job_id}  {job.step}  {state.value}{steps}{reason}\n  folder {job.job_dir}\n  log    {job.log_path}")
    return 0


@_guard
def cancel_main(argv: list[str]) -> int:
    """Cancel a job (scancel on Slurm; the local backend stops its process group)."""
    p = argparse.ArgumentParser(prog="workshop cancel", description=cancel_main.__doc__)
    _job_arg(p)
    args = p.parse_args(argv)
    job = _load(args)
    state = job.cancel()
    print(f"{job.job_id}  {state.value}")
    return 0


@_guard
def logs_main(argv: list[str]) -> int:
    """Print the end of a job's log; --follow keeps printing until the job ends."""
    p = argparse.ArgumentParser(prog="workshop logs", description=logs_main.__doc__)
    _job_arg(p)
    p.add_argument("-n", type=int, default=20, help="lines from the end (default 20)")
    p.add_argument("--follow", "-f", action="store_true")
    args = p.parse_args(argv)
    job = _load(args)
    sys.stdout.write(job.tail(args.n))
    if not args.follow:
        return 0
    pos = job.log_path.stat().st_size if job.log_path.exists() else 0
    while True:
        finished = job.state().finished
        if job.log_path.exists():
            with open(job.log_path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
                pos += len(chunk)
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()
        if finished:
            return 0
        time.sleep(1.0)
