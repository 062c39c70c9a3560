"""The local backend's queue: a job starts when enough of this machine's cores are free, in order.

Run as a script (`python local_queue.py ...`, standard library only, so a queued job costs no
heavy imports) in front of the job's runner: it waits its turn, takes one lock per core it needs
from a per-user slot folder, writes the job's start marker and then *becomes* the runner (exec),
so the locks are held exactly as long as the job's processes live and vanish with them, even
when a job is killed. Tickets are taken in submission order; a job waits while an earlier one
still waits, so a big job is never starved by a stream of small ones. A waiting job holds a lock
on its ticket file: a ticket nobody holds is a job killed while queued, and is skipped.
"""

from __future__ import annotations

import fcntl
import os
import sys
import tempfile
import time
from pathlib import Path

POLL_S = 0.1


def machine_cores() -> int:
    """Cores this user may run on (WORKSHOP_LOCAL_CORES overrides, e.g. to share a machine)."""
    return int(os.environ.get("WORKSHOP_LOCAL_CORES") or len(os.sched_getaffinity(0)))


def slots_dir() -> Path:
    """One slot folder per user and machine: every jobs folder of this user shares the cores."""
    return Path(os.environ.get("WORKSHOP_LOCAL_SLOTS") or Path(tempfile.gettempdir()) / f"workshop-slots-{os.getuid()}")


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _earlier_waiter(folder: Path, ticket: str) -> bool:
    """Whether a job queued before `ticket` still waits (a waiter holds its ticket's lock)."""
    for other in sorted(folder.glob("wait-*")):
        if other.name >= f"wait-{ticket}":
            return False
        fd = _try_lock(other)
        if fd is None:
            return True
        other.unlink(missing_ok=True)        # its waiter is gone (killed while queued)
        os.close(fd)
    return False


def enqueue() -> tuple[str, int]:
    """Take a ticket for a job about to be started: (ticket, fd of its held wait lock).

    The submitter takes it, in submission order, and hands the locked descriptor to the job's queue
    process, so from the moment of submission a later job sees this one waiting."""
    folder = slots_dir()
    folder.mkdir(mode=0o700, exist_ok=True)
    ticket = f"{time.time_ns():020d}"
    fd = _try_lock(folder / f"wait-{ticket}")
    assert fd is not None, "a fresh ticket file is locked by nobody else"
    return ticket, fd


def take_cores(need: int, ticket: str, ticket_fd: int) -> list[int]:
    """Block until `need` cores (at most all of them) are ours; the locks' file descriptors."""
    folder = slots_dir()
    need = max(1, min(need, machine_cores()))
    while True:
        with open(folder / ".lock", "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            if not _earlier_waiter(folder, ticket):
                held = []
                for core in range(machine_cores()):
                    fd = _try_lock(folder / f"core-{core}")
                    if fd is not None:
                        held.append(fd)
                        if len(held) == need:
                            (folder / f"wait-{ticket}").unlink(missing_ok=True)
                            os.close(ticket_fd)
                            return held
                for fd in held:
                    os.close(fd)
        time.sleep(POLL_S)


def main(argv: list[str]) -> None:
    """local_queue.py NEED TICKET TICKET_FD START_MARKER -- COMMAND...: wait for cores, mark the start, exec."""
    need, ticket, ticket_fd, marker = int(argv[0]), argv[1], int(argv[2]), Path(argv[3])
    command = argv[argv.index("--") + 1:]
    for fd in take_cores(need, ticket, ticket_fd):
        os.set_inheritable(fd, True)         # the job's processes hold the cores until they end
    marker.write_text(f"{time.time()}\n")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
