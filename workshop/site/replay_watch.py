"""The replay cluster's watchdog: its daemons end with the process that started them, even a killed one.

`workshop budget --replay` (workshop.site.replay) starts munged, slurmctld and a slurmd per node, each in a
session of its own, and stops them in its `down()`. A replay killed outright (SIGKILL, a
pytest timeout, a closed SSH session) never reached its `down()`: its daemons kept their ports and
munged, and the next replay could not start on them. So `up()` first starts this watchdog, by path with `-S`
(the standard library only: ~10 ms of CPU, nothing of the course imported), holding the write end of its stdin. The
watchdog blocks on a read; the read ends when its starter ends, however it ends, and then it kills every process
whose environment names the cluster's slurm.conf (the daemons, their job steps and scripts: nothing else carries
that path). Standard library only, and no import from workshop: it runs by path.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def marked(conf: Path) -> list[int]:
    """The pids whose environment has SLURM_CONF=`conf` (not this process's)."""
    mark = f"SLURM_CONF={conf}".encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if int(proc.name) != os.getpid() and mark in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return found


def kill_marked(conf: Path, wait_s: float = 10.0) -> list[int]:
    """SIGKILL the processes of the cluster whose config is `conf`, again until none is left (a slurmd may start a
    step while it is being killed) or `wait_s` passed; the pids killed."""
    killed: list[int] = []
    end = time.monotonic() + wait_s
    while (left := marked(conf)) and time.monotonic() < end:
        for pid in left:
            try:
                os.kill(pid, 9)
                killed.append(pid)
            except OSError:
                pass
        time.sleep(0.1)
    return killed


def main(argv: list[str]) -> int:
    """`replay_watch.py FOLDER`: wait for stdin to end (the starter ended, or closed it in `down()`), then kill the
    cluster's processes."""
    conf = Path(argv[0]) / "slurm.conf"
    while sys.stdin.buffer.read(4096):
        pass
    kill_marked(conf)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
