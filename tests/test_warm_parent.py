"""The warm parent forks processes that behave as started ones (tests/warm_parent.py): argv, environment, working
folder, exit code, CPU; a child that fails leaves the parent serving; a timeout kills; forked ranks form a real
gloo process group. A bare parent (nothing preloaded) keeps these cheap; the gloo test preloads torch only."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.runs import clean_env
from tests.warm_parent import Client

PROBE = """\
import json, os, sys, time
start = time.process_time()
while time.process_time() - start < 0.3:   # some CPU for the parent to measure
    pass
json.dump({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ), "ppid": os.getppid()},
          open("seen.json", "w"))
print("to the log")
sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
"""


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """A parent that preloads nothing: the protocol is what these tests check, not the imports."""
    counted: list[float] = []
    client = Client(clean_env(), modules=(), on_cpu=counted.append)
    client.counted = counted  # type: ignore[attr-defined]
    yield client
    client.close()


def test_a_fork_runs_a_module_with_its_argv_env_and_cwd_and_returns_its_code_and_cpu(bare: Client,
                                                                                      tmp_path: Path) -> None:
    (tmp_path / "probe_mod.py").write_text(PROBE)
    env = {"PATH": os.environ["PATH"], "PROBE_EXIT": "5", "ONLY_HERE": "a b'c"}
    child = bare.start(["--x", "y z"], env, tmp_path, tmp_path / "out.log", module="probe_mod")
    assert child.wait(timeout=60) == 5
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["argv"] == ["--x", "y z"]
    assert Path(seen["cwd"]) == tmp_path
    assert seen["env"] == env, "the child's environment is exactly the one asked for"
    assert seen["ppid"] == bare.proc.pid, "forked by the warm parent"
    assert (tmp_path / "out.log").read_text() == "to the log\n"
    assert 0.25 <= child.cpu_s < 5, child.cpu_s
    assert child.cpu_s in bare.counted, "the child's CPU goes to the profile"  # type: ignore[attr-defined]


def test_a_script_runs_as_python_would_run_it(bare: Client, tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    child = bare.start(["1"], {"PROBE_EXIT": "0"}, tmp_path, tmp_path / "out.log", script=str(tmp_path / "probe.py"))
    assert child.wait(timeout=60) == 0
    assert json.loads((tmp_path / "seen.json").read_text())["argv"] == ["1"]


@pytest.mark.parametrize("body, code, says", [
    ("raise ValueError('boom')", 1, "ValueError: boom"),
    ("import sys; sys.exit(3)", 3, ""),
    ("import sys; sys.exit('a message')", 1, "a message"),
    ("import os; os.abort()", -6, ""),
    ("import os, signal; os.kill(os.getppid(), 0); os.kill(os.getpid(), signal.SIGKILL)", -9, ""),
])
def test_a_child_that_fails_leaves_the_parent_serving(bare: Client, tmp_path: Path, body: str, code: int,
                                                      says: str) -> None:
    (tmp_path / "bad.py").write_text(body + "\n")
    child = bare.start([], {}, tmp_path, tmp_path / "bad.log", script=str(tmp_path / "bad.py"))
    assert child.wait(timeout=60) == code
    assert says in (tmp_path / "bad.log").read_text()
    assert bare.proc.poll() is None, "the parent is still serving"
    (tmp_path / "ok.py").write_text("print('still here')\n")
    assert bare.start([], {}, tmp_path, tmp_path / "ok.log", script=str(tmp_path / "ok.py")).wait(60) == 0
    assert (tmp_path / "ok.log").read_text() == "still here\n"


def test_a_child_past_its_timeout_is_killed(bare: Client, tmp_path: Path) -> None:
    (tmp_path / "hang.py").write_text("import time\ntime.sleep(600)\n")
    child = bare.start([], {}, tmp_path, tmp_path / "hang.log", script=str(tmp_path / "hang.py"))
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=1)
    assert child.poll() == -9 and time.monotonic() - started < 30
    assert not Path(f"/proc/{child.pid}").exists() or "zombie" in Path(f"/proc/{child.pid}/status").read_text()


def test_closing_ends_the_parent_and_its_children_and_counts_their_cpu_once(tmp_path: Path) -> None:
    counted: list[float] = []
    client = Client(clean_env(), modules=(), on_cpu=counted.append)
    (tmp_path / "hang.py").write_text("import time\ntime.sleep(600)\n")
    child = client.start([], {}, tmp_path, tmp_path / "hang.log", script=str(tmp_path / "hang.py"))
    client.close()
    assert client.proc.returncode == 0
    assert not Path(f"/proc/{child.pid}").exists(), "a child outlived its parent"
    assert counted and abs(sum(counted)) < 1e-9, "reaping the parent makes rusage count what add_cpu counted"
    assert not client.folder.exists(), "its private folder is removed"


def test_a_parent_with_threads_refuses_to_fork_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "threaded.py").write_text("import threading, time\n"
                                          "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n")
    client = Client({**clean_env(), "PYTHONPATH": str(tmp_path)}, modules=("threaded",))
    try:
        assert client.threads == 2
        with pytest.raises(RuntimeError, match="2 threads .* forks only single-threaded"):
            client.start([], {}, tmp_path, tmp_path / "x.log", script=str(tmp_path / "threaded.py"))
    finally:
        client.close()


RANK = textwrap.dedent("""\
    import os, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: {t.item():g}")
    dist.destroy_process_group()
""")


def test_two_forked_ranks_form_a_real_gloo_process_group(tmp_path: Path) -> None:
    from workshop.slurm.ports import rendezvous_port

    client = Client(clean_env(), modules=("torch", "torch.distributed"))
    try:
        (tmp_path / "rank.py").write_text(RANK)
        port = str(rendezvous_port())
        ranks = [client.start([], {**clean_env(), "RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": port}, tmp_path, tmp_path / f"rank{r}.log",
                              script=str(tmp_path / "rank.py")) for r in range(2)]
        assert [r.wait(timeout=120) for r in ranks] == [0, 0], [(tmp_path / f"rank{r}.log").read_text()
                                                                for r in range(2)]
        assert [(tmp_path / f"rank{r}.log").read_text() for r in range(2)] == ["rank 0 of 2: 3\n", "rank 1 of 2: 3\n"]
    finally:
        client.close()


def test_cpu_the_warm_parent_reports_counts_in_the_suites_profile() -> None:
    """suite_profile.cpu_now() (every test's and shared run's cost) includes what add_cpu reported: the forked
    ranks' CPU, which rusage shows only when the parent is reaped, at exit; a negative amount takes it back."""
    from tests import suite_profile

    before = suite_profile.cpu_now()
    suite_profile.add_cpu(100.0)
    try:
        assert 100.0 <= suite_profile.cpu_now() - before < 101.0
    finally:
        suite_profile.add_cpu(-100.0)
    assert suite_profile.cpu_now() - before < 1.0


def test_a_warning_the_parents_imports_raised_shows_again_in_a_child(tmp_path: Path) -> None:
    (tmp_path / "warns.py").write_text("import warnings\n\ndef f():\n    warnings.warn('seen once per place')\n\nf()\n")
    (tmp_path / "child.py").write_text("import warns\nwarns.f()\n")
    client = Client({**clean_env(), "PYTHONPATH": str(tmp_path)}, modules=("warns",))
    try:
        assert client.start([], {}, tmp_path, tmp_path / "c.log", script=str(tmp_path / "child.py")).wait(60) == 0
        assert "seen once per place" in (tmp_path / "c.log").read_text()
    finally:
        client.close()
