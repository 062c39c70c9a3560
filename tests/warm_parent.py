"""One warm parent per pytest process that forks the tests' training ranks (issue 51).

A tiny training rank costs ~4.7 CPU-s, of which ~4.5 are its imports (torch, transformers' Trainer and Bloom):
a rank started fresh is almost all start-up. The warm parent imports what a rank imports once, then forks one
child per rank: the child starts with those modules loaded and runs the module as `python -m` would
(`runpy.run_module(M, run_name="__main__")`) with the argv, environment, working folder and log file it was
given. A forked rank is a real process: it builds a real gloo process group over TCP with the other ranks,
as the ranks torchrun starts do (tests/test_warm_parent.py proves it with an all_reduce).

Protocol (JSON lines): the client writes requests to the parent's stdin and reads replies from a pipe of its
own; the parent's stdout and stderr go to a log in its private temp folder, so nothing a library prints on
import can corrupt a reply. The parent exits when its stdin ends (the client's pytest exited, or `close()`),
killing any child still running; every child dies with the parent (PR_SET_PDEATHSIG), and the parent with
its client. A child that raises, exits or aborts is reaped like any other: the parent keeps serving.

Fork is safe only in a single-threaded parent (a thread holding a lock at fork leaves the child's copy locked
forever): the parent checks /proc/self/task after its imports and refuses to fork, saying why, when a library
started a thread. The environment is set per child, but what a module reads at import time was read once in
the parent, which starts with the environment `tests.runs.clean_env()` gives (HF_HUB_OFFLINE, OMP_NUM_THREADS,
TOKENIZERS_PARALLELISM). Forked children are the parent's children, not pytest's: their CPU (os.wait4's
rusage) comes back with each exit and goes into the suite's profile (`suite_profile.add_cpu`), as does the
parent's own start-up, once.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

# What a training rank of workshop.training.train imports (train.py imports most of them inside functions).
# `datasets` is hidden first, as train.skip_datasets_unless_needed hides it for the fixture dataset the tests
# use (else transformers.trainer imports it with pandas and pyarrow).
PRELOAD = ("torch", "torch.distributed", "torch.distributed.fsdp", "transformers", "transformers.trainer",
           "transformers.models.bloom.modeling_bloom", "accelerate", "workshop.training.train",
           "workshop.training.data", "workshop.training.models", "workshop.training.sharding",
           "workshop.training.trainer", "workshop.training.metrics", "workshop.training.evaluation",
           "workshop.training.run_record", "workshop.training.wrap_function", "workshop.training.batch_probe",
           "workshop.training.comm_recorder", "workshop.training.tensor_memory", "workshop.training.throughput",
           "workshop.training.scaler", "workshop.training.torch_private", "workshop.training.fsdp_cpu")
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Linux: this process gets SIGKILL when the one that started it ends, so nothing outlives the suite."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


# ------------------------------------------------------------------------------------------- the parent side
def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def preload(modules: Sequence[str]) -> None:
    import importlib

    sys.modules.setdefault("datasets", None)  # type: ignore[arg-type]
    for name in modules:
        importlib.import_module(name)


def exit_code(status: int) -> int:
    """A wait status as subprocess reports it: the exit code, or minus the signal that killed the child."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def run_child(req: Mapping[str, Any], keep: Sequence[int]) -> None:
    """In the forked child: become the process `req` asks for, run its module or script, never return."""
    import runpy

    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in keep:
            os.close(fd)
        _die_with_parent()
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        fresh_warnings()
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        code = _run_main(runpy, req)
    except BaseException:  # noqa: BLE001 - whatever happens, the child must end here, never in the parent's loop
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):   # a handler may hold the originals
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def fresh_warnings() -> None:
    """A warning the parent's imports raised once is shown again, as a fresh process would show it: the per-module
    registries are dropped when the filters change (an appended catch-all `default` is what no filter matching
    already means), and the `once` registry is emptied."""
    import warnings

    warnings.onceregistry.clear()
    warnings.simplefilter("default", append=True)


def _run_main(runpy: Any, req: Mapping[str, Any]) -> int:
    """Run the module (or script) as `__main__` with its argv: SystemExit gives the code, an exception 1."""
    target = req.get("module") or req["script"]
    sys.argv = [target, *req["argv"]]
    # as `python -m M` puts the working folder first on sys.path, and `python S` the script's folder
    sys.path[0] = os.getcwd() if req.get("module") else str(Path(target).resolve().parent)
    try:
        if req.get("module"):
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        return 1
    return 0


class Parent:
    """The serving loop: fork on request, reap on SIGCHLD, answer start, exit and refusals as JSON lines."""

    def __init__(self, reply_fd: int) -> None:
        self.reply = os.fdopen(reply_fd, "w", buffering=1)
        self.children: dict[int, str] = {}       # pid -> request id
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def send(self, **msg: Any) -> None:
        self.reply.write(json.dumps(msg) + "\n")

    def fork(self, req: dict[str, Any]) -> None:
        if (n := threads()) != 1:
            self.send(id=req["id"], error=f"the warm parent has {n} threads (/proc/self/task), so a fork could "
                                          f"inherit a lock held by another thread: it forks only single-threaded. "
                                          f"Find what started a thread on import (tests/warm_parent.PRELOAD).")
            return
        pid = os.fork()
        if pid == 0:
            run_child(req, (self.wake_r, self.wake_w, self.reply.fileno()))
        self.children[pid] = req["id"]
        self.send(id=req["id"], pid=pid)

    def reap(self) -> None:
        while self.children:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                return
            rid = self.children.pop(pid, None)
            if rid is not None:
                self.send(id=rid, pid=pid, exit=exit_code(status), cpu_s=usage.ru_utime + usage.ru_stime)

    def kill(self, req: dict[str, Any]) -> None:
        for pid, rid in self.children.items():
            if rid == req["id"]:
                os.kill(pid, signal.SIGKILL)

    def serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(0, selectors.EVENT_READ, "request")
        sel.register(self.wake_r, selectors.EVENT_READ, "signal")
        pending = b""
        while True:
            for key, _ in sel.select():
                if key.data == "signal":
                    os.read(self.wake_r, 4096)
                    continue
                data = os.read(0, 65536)
                if not data:
                    return self.shutdown()
                *lines, pending = (pending + data).split(b"\n")
                for line in lines:
                    req = json.loads(line)
                    (self.kill if req.get("op") == "kill" else self.fork)(req)
            self.reap()

    def shutdown(self) -> None:
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in list(self.children):
            os.waitpid(pid, 0)


def serve(reply_fd: int, modules: Sequence[str]) -> None:
    """The parent's main: import, check, say ready with the start-up's CPU, serve until stdin ends."""
    import resource

    from workshop.training.gc_pause import cyclic_gc_paused

    _die_with_parent()
    # no collections while torch and transformers load (~2 CPU-s of a parent's ~4.6, measured), and their objects
    # frozen out of the collector's reach after: a child's collections do not copy their pages
    with cyclic_gc_paused(freeze=True):
        preload(modules)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    parent = Parent(reply_fd)
    parent.send(ready=True, threads=threads(), cpu_s=usage.ru_utime + usage.ru_stime)
    parent.serve()


# ------------------------------------------------------------------------------------------- the client side
@dataclass
class Child:
    """A forked child: its pid at start; `wait()` gives its exit code (minus the signal that killed it)."""

    client: "Client"
    id: str
    pid: int
    exit: int | None = None
    cpu_s: float = 0.0
    done: threading.Event = field(default_factory=threading.Event)

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code; past `timeout` seconds the child is killed and subprocess.TimeoutExpired raised."""
        if not self.done.wait(timeout):
            self.kill()
            self.done.wait(30)
            raise subprocess.TimeoutExpired(f"warm-parent child {self.pid}", timeout or 0)
        assert self.exit is not None
        return self.exit

    def poll(self) -> int | None:
        return self.exit

    def kill(self) -> None:
        if not self.done.is_set():
            self.client.request(op="kill", id=self.id)


class Client:
    """The pytest side: starts the parent, sends requests, reads replies on a thread, adds CPU to the profile."""

    def __init__(self, env: Mapping[str, str], modules: Sequence[str] = PRELOAD, on_cpu: Any = None) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="workshop-warm-parent-"))
        self.on_cpu = on_cpu or (lambda seconds: None)
        self.lock, self.children, self.next_id, self.added = threading.Lock(), {}, 0, 0.0
        read_fd, write_fd = os.pipe()
        root = Path(__file__).resolve().parent.parent
        with open(self.folder / "parent.log", "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.warm_parent", str(write_fd), json.dumps(list(modules))],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, pass_fds=(write_fd,), cwd=root,
                env={**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))})
        os.close(write_fd)
        self.replies = os.fdopen(read_fd, "r")
        ready = self._first_reply()
        self.startup_cpu_s, self.threads = ready["cpu_s"], ready["threads"]
        self._add(self.startup_cpu_s)
        threading.Thread(target=self._read, daemon=True, name="warm-parent-replies").start()
        atexit.register(self.close)

    def _first_reply(self) -> dict[str, Any]:
        line = self.replies.readline()
        if not line:
            self.proc.wait(timeout=30)
            raise RuntimeError(f"the warm parent exited {self.proc.returncode} before it was ready; its log "
                               f"({self.folder / 'parent.log'}):\n{self.log_tail()}")
        return json.loads(line)

    def log_tail(self, chars: int = 3000) -> str:
        path = self.folder / "parent.log"
        return path.read_text(errors="replace")[-chars:] if path.is_file() else ""

    def _add(self, seconds: float) -> None:
        self.added += seconds
        self.on_cpu(seconds)

    def request(self, **msg: Any) -> None:
        with self.lock:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()

    def _read(self) -> None:
        for line in self.replies:
            msg = json.loads(line)
            child = self.children.get(msg["id"])
            if child is None:
                continue
            if "error" in msg:
                child["error"] = msg["error"]
                child["started"].set()
            elif "exit" in msg:
                handle = child["handle"]
                handle.exit, handle.cpu_s = msg["exit"], msg["cpu_s"]
                self._add(msg["cpu_s"])
                handle.done.set()
            else:
                child["handle"] = Child(self, msg["id"], msg["pid"])
                child["started"].set()

    def start(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | str, log: Path | str,
              module: str | None = None, script: str | None = None) -> Child:
        """Fork a child that runs `module` (as `python -m module argv...`) or `script` with exactly `env`, in `cwd`,
        its stdout and stderr appended to `log`."""
        if (module is None) == (script is None):
            raise ValueError("give a module or a script")
        if self.proc.poll() is not None:
            raise RuntimeError(f"the warm parent has exited ({self.proc.returncode}); its log:\n{self.log_tail()}")
        with self.lock:
            self.next_id += 1
            rid = f"c{self.next_id}"
        entry: dict[str, Any] = {"started": threading.Event()}
        self.children[rid] = entry
        self.request(id=rid, module=module, script=script, argv=list(argv), env=dict(env), cwd=str(cwd),
                     log=str(log))
        if not entry["started"].wait(60):
            raise RuntimeError(f"the warm parent did not answer a fork in 60 s; its log:\n{self.log_tail()}")
        if "error" in entry:
            raise RuntimeError(entry["error"])
        return entry["handle"]

    def close(self) -> None:
        """End the parent (it kills any child still running), reap it and remove its folder. Reaping adds the parent's whole CPU
        (its start-up and every child) to this process's children's rusage, which `on_cpu` already counted:
        the same amount is taken back, so nothing is counted twice."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.added:
            self.on_cpu(-self.added)
            self.added = 0.0
        shutil.rmtree(self.folder, ignore_errors=True)
        atexit.unregister(self.close)


_CLIENTS: dict[int, Client] = {}


def client(env: Mapping[str, str]) -> Client:
    """This pytest process's warm parent, started (with `env`) on first use and kept until pytest exits; its
    start-up is profiled once, as a shared fixture charged to no test (tests/suite_profile.py)."""
    from tests import suite_profile

    found = _CLIENTS.get(os.getpid())
    if found is None or found.proc.poll() is not None:
        with suite_profile.shared("warm parent: imports torch, transformers, workshop.training once"):
            found = _CLIENTS[os.getpid()] = Client(env, on_cpu=suite_profile.add_cpu)
    return found


if __name__ == "__main__":
    serve(int(sys.argv[1]), json.loads(sys.argv[2]))
