"""Why a job waits, in a student's words: Slurm's pending reason (squeue's %r) beside PENDING.

Slurm names the reason in one CamelCase word ("Resources", "QOSMaxJobsPerUser", "ReqNodeNotAvail,
UnavailableNodes:n2"); `squeue(1)`'s JOB REASON CODES explain them for administrators. A student needs to
know two things: whether the wait ends by itself, and if not, what to do. The words below say both.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Waiting:
    reason: str        # Slurm's word, as squeue prints it
    words: str         # what it means for the student
    clears: bool       # whether the wait ends without anyone doing anything
    todo: str = ""     # what to do when it does not

    def __str__(self) -> str:
        text = f"{self.words} ({self.reason})"
        return f"{text}: {self.todo}" if self.todo and not self.clears else text


_CANCEL = "cancel it (`job.cancel()`, or scancel <id>) and submit again"
_ASK = "ask the instructor"

# Slurm's reason -> (words, clears by itself, what to do otherwise); the longest matching prefix wins,
# so "QOSMaxJobsPerUserLimit" and "QOSGrpCpuLimit" find theirs.
REASONS: dict[str, tuple[str, bool, str]] = {
    "Resources": ("waiting for free nodes: the ones it needs are busy with other jobs, it starts when they end",
                  True, ""),
    "Priority": ("other jobs are ahead of it in the queue; it starts in its turn", True, ""),
    "Dependency": ("waiting for the job it depends on to end", True, ""),
    "DependencyNeverSatisfied": ("the job it depends on failed, so this one can never start", False, _CANCEL),
    "BeginTime": ("asked to start later (--begin); it starts at that time", True, ""),
    "Reservation": ("waiting for the course's reservation to start", True, ""),
    "ReqNodeNotAvail": ("a node it needs is down, drained or reserved for someone else", False,
                        f"it may wait a long time: {_ASK}, or {_CANCEL} with fewer nodes"),
    "NodeDown": ("a node it needs is down", False, f"{_ASK}; or {_CANCEL} with fewer nodes"),
    "BadConstraints": ("no node has what it asks for (GPUs, memory, features)", False,
                       f"{_CANCEL} asking for less (`lab.config(step)` shows what it asked)"),
    "PartitionTimeLimit": ("its time limit is longer than the partition allows", False,
                           f"{_CANCEL} with a shorter time limit"),
    "PartitionNodeLimit": ("it asks for more nodes than the partition allows", False, f"{_CANCEL} with fewer nodes"),
    "PartitionDown": ("the partition is down", False, _ASK),
    "PartitionInactive": ("the partition is not accepting jobs now", False, _ASK),
    "QOSMaxJobsPerUser": ("you already have as many jobs running as the site allows one user; it starts when one "
                          "of yours ends", True, ""),
    "QOSMaxSubmitJobPerUser": ("you already have as many jobs queued as the site allows one user", False,
                               "cancel a job you no longer need"),
    "AssocMaxJobsLimit": ("your account already runs as many jobs as it may; it starts when one of them ends",
                          True, ""),
    "QOSMaxGRESPerUser": ("you already use as many GPUs as the site allows one user; it starts when one of your "
                          "jobs ends", True, ""),
    "QOSMaxCpuPerUserLimit": ("you already use as many CPUs as the site allows one user; it starts when one of "
                              "your jobs ends", True, ""),
    "QOSMaxWallDurationPerJobLimit": ("its time limit is longer than the site's QOS allows", False,
                                      f"{_CANCEL} with a shorter time limit"),
    "QOSMaxNodePerJobLimit": ("it asks for more nodes than the site's QOS allows", False,
                              f"{_CANCEL} with fewer nodes"),
    "QOSGrp": ("the class's share of the cluster is in use by others; it starts when their jobs end", True, ""),
    "AssocGrp": ("your account's share of the cluster is in use; it starts when its other jobs end", True, ""),
    "JobHeldUser": ("you put it on hold", False, "release it: scontrol release <id>"),
    "JobHeldAdmin": ("an administrator put it on hold", False, _ASK),
    "launch failed requeued held": ("it failed to start on its node and Slurm held it", False,
                                    f"{_ASK}, or {_CANCEL}"),
    "InvalidAccount": ("its account is not valid for you", False,
                       f"fix the profile's account ({_ASK}) and submit again"),
    "InvalidQOS": ("its QOS is not valid for you", False, f"fix the profile's qos ({_ASK}) and submit again"),
    "Licenses": ("waiting for a software licence to be free", True, ""),
    "Cleaning": ("a node is still cleaning up after a job; it starts in a moment", True, ""),
    "Prolog": ("the node is running the site's start-up script; it starts in a moment", True, ""),
    "PowerUpNode": ("its nodes are powering up; it starts in a few minutes", True, ""),
}


def explain(reason: str) -> Waiting | None:
    """Slurm's pending reason in a student's words; None for no reason ("", "None")."""
    reason = reason.strip()
    if reason in ("", "None", "(null)"):
        return None
    word = reason.split(",", 1)[0].strip()
    keys = [k for k in REASONS if word == k or word.startswith(k)]
    if not keys:
        return Waiting(reason, "Slurm keeps it waiting", False,
                       f"`squeue -j <id> -o %r` names why; if it does not start, {_ASK}")
    words, clears, todo = REASONS[max(keys, key=len)]
    return Waiting(reason, words, clears, todo)


def pending_words(reason: str) -> str:
    """'' or the one line that goes beside PENDING."""
    found = explain(reason)
    return str(found) if found else ""
