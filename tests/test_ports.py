"""The rendezvous port (workshop/slurm/ports.py): below the ephemeral range, free when chosen, and a lone
process listens on port 0 instead of choosing one. A loaded CI run lost a 4-rank test run to EADDRINUSE
when a port asked of the kernel (bind to 0, close, hand on) was taken by an outgoing connection first."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from workshop.slurm import ports
from workshop.training.config import RunConfig
from workshop.training.train import stand_in_for_torchrun


@pytest.mark.parametrize("text,floor", [("32768\t60999\n", 32768), ("40000 60999", 40000), ("1024 65535", 32768),
                                        ("", 32768), ("many ports", 32768)])
def test_the_floor_is_the_kernels_ephemeral_start(text: str, floor: int, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel's range where it can be read and leaves room below it; Linux's default otherwise (as
    rendezvous.sh computes it)."""
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    monkeypatch.setattr(ports, "_EPHEMERAL", path)
    assert ports.ephemeral_floor() == floor
    monkeypatch.setattr(ports, "_EPHEMERAL", tmp_path / "absent")
    assert ports.ephemeral_floor() == 32768


def test_a_chosen_port_is_below_the_ephemeral_range_and_can_be_listened_on() -> None:
    chosen = {ports.rendezvous_port() for _ in range(20)}
    assert all(ports.FLOOR <= p < ports.ephemeral_floor() for p in chosen), chosen
    assert len(chosen) > 1, "chosen at random, so two launches in one second do not ask for the same port"
    with socket.socket() as s:
        s.bind(("127.0.0.1", chosen.pop()))
        s.listen()


def test_a_port_someone_listens_on_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first number drawn is held by a listener: the next free one is returned."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        free = ports.rendezvous_port()
        draws = iter([taken, free])

        class Draw:
            def randrange(self, low: int, high: int) -> int:
                return next(draws)

        monkeypatch.setattr(ports.random, "SystemRandom", Draw)
        assert ports.rendezvous_port() == free


def test_no_free_port_says_how_to_find_the_listeners(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]

        class Draw:
            def randrange(self, low: int, high: int) -> int:
                return taken

        monkeypatch.setattr(ports.random, "SystemRandom", Draw)
        with pytest.raises(RuntimeError, match="ss -ltn"):
            ports.rendezvous_port(tries=3)


def test_a_one_process_run_listens_on_port_0() -> None:
    """No other rank has to find a lone process's store, so it chooses nothing that could be taken."""
    env: dict[str, str] = {}
    stand_in_for_torchrun(RunConfig(), env)
    assert env["WORLD_SIZE"] == "1" and env["MASTER_PORT"] == "0"
