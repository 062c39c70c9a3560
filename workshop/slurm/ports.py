"""A port for a local rendezvous that nothing else takes between choosing it and listening on it.

Asking the kernel for a free port (bind to port 0, read it, close) and handing the number to torchrun
is a race: the port comes from the ephemeral range (Linux: 32768-60999), the same range every outgoing
connection on the machine takes its local port from. On a busy machine (the test suite's three parts
side by side, each process group opening gloo connections) one of them took the port in the second
before torchrun's store listened on it: `EADDRINUSE`, and the run died before its first step.

A port below the ephemeral range is never handed to an outgoing connection, so once checked free it
stays free unless another listener picks the same number; choosing it at random from ~12,000 makes
that a 1-in-12,000 chance per pair of launches in the same second. The batch script's multi-node
rendezvous (slurm/templates/rendezvous.sh) stays below the range for the same reason.
A lone process that needs no one to find it should not choose at all: it listens on port 0.
"""
from __future__ import annotations

import random
import socket
from pathlib import Path

FLOOR = 20000
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_floor() -> int:
    """The lowest port the kernel hands to outgoing connections (32768 where it cannot be read)."""
    try:
        low = int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return low if low > FLOOR + 1024 else 32768


def rendezvous_port(host: str = "127.0.0.1", tries: int = 200) -> int:
    """A port on `host` that is free now and below the ephemeral range, chosen at random.

    The generator is the OS's, not `random`'s: training seeds `random`, and two runs seeded alike
    would otherwise ask for the same port."""
    pick = random.SystemRandom()
    top = ephemeral_floor()
    for _ in range(tries):
        port = pick.randrange(FLOOR, top)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port on {host} between {FLOOR} and {top} after {tries} tries: "
                       "free some listening ports (ss -ltn shows them) and run it again")
