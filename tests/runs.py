"""Real training runs for the tests on gloo, each configuration run once, their ranks forked from one warm parent.

A run is keyed by its flags, so several tests that need "FULL_SHARD at 2 ranks" share one run.

A training rank started fresh spends ~4.5 of its ~4.7 CPU-s importing torch and transformers, and a torchrun
launcher ~3 CPU-s more: `train()` forks each rank from the warm parent (tests/warm_parent.py), which imported all
that once, with the environment torchrun gives a rank (`rank_env`), one log per "node" as each torchrun would
write it. The ranks are real processes meeting at a real TCP store and forming a real gloo group; what they
skip is the launcher and the imports. A run's promise that IS the launcher keeps a real one (`torchrun=True`,
and `accelerate()` always): one real torchrun launch per contract --

- tests/test_training.py: test_two_node_launch_matches_ddp_at_2_ranks (two torchruns meeting at a c10d
  rendezvous) and test_one_process_fsdp_without_torchrun_equals_the_torchrun_run (torchrun against plain python);
- tests/test_accelerate_launch.py: the accelerate twins (accelerate launch against torchrun, `launcher` read back);
- tests/test_diagnose.py: test_a_real_run_diagnoses_clean (torchrun's own log lines diagnose clean; one run shared
  with the twins);
- tests/test_tables.py: the two tests that parse two torchruns' output as one log or as `srun --label` writes it
  (the two-node run above, shared);
- tests/test_collectives.py (two torchruns at a c10d rendezvous, its own launcher), tests/test_bandwidth.py's table
  test (the bandwidth self-test is a torchrun command), tests/test_hung_rank.py and the course (local-backend jobs run their
  batch script, torchrun included), the README's and docs' torchrun lines (tests/test_docs_commands.py).

Forked too, their promise being the numbers, not the launch: tests/test_accelerate_launch.py's two-node twin
(the accelerate job against the config's run; the twin above holds accelerate launch against torchrun), and the
direct launches of test_comm's probe, test_collectives, test_expected_steps, test_resume's USR1 stop,
test_fsdp_exercises' wrong world, test_fp16_reduce and test_bandwidth's gate verdicts (`fork`). And one pair,
the same flags forked and under torchrun, compared field by field: test_training's test_a_forked_run_is_the_torchrun_run.

`WORKSHOP_TEST_FORK=off` makes `train()` start its ranks the old way (plain python for one process, torchrun for
more): a comparison, or a way round should forking ever misbehave; `fork()`'s callers always fork.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import suite_profile, warm_parent
from workshop.slurm.ports import rendezvous_port

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
# Small but real: 2 epochs over 24 fixture examples, no generation unless a test asks for it. The
# learning rate is high enough that the loss moves far beyond the tests' tolerance (else "equal
# losses" would prove nothing).
BASE_FLAGS = ["--train-size", "24", "--eval-size", "8", "--epochs", "2", "--batch-size", "2", "--learning-rate", "5e-3",
              "--no-eval-generate"]


@dataclass
class Run:
    out_dir: Path
    log: str
    returncode: int
    node_logs: tuple[str, ...] = ()  # each launcher's (node's) own output, in launch order

    @property
    def summary(self) -> dict[str, Any]:
        path = self.out_dir / "summary.json"
        assert path.is_file(), f"run failed (rc={self.returncode}); log tail:\n{self.log[-3000:]}"
        return json.loads(path.read_text())


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "WORKSHOP_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def forking() -> bool:
    """Whether ranks fork from the warm parent (default) or start as processes of their own (WORKSHOP_TEST_FORK=off)."""
    return os.environ.get("WORKSHOP_TEST_FORK", "on") != "off"


def node_env(nnodes: int, node: int) -> dict[str, str]:
    """A launcher's environment: several "nodes" on this machine are named as Slurm names a node (node_name())."""
    return {**clean_env(), **({"SLURMD_NODENAME": f"node{node + 1}"} if nnodes > 1 else {})}


def rank_env(nproc: int, nnodes: int, node: int, local: int, port: int) -> dict[str, str]:
    """What torchrun's agent gives a rank (torch/distributed/elastic/agent/server/local_elastic_agent.py),
    less its error file: rank 0 hosts the TCP store (no agent store), as in a torchrun-free launch."""
    world, rank = nproc * nnodes, node * nproc + local
    return {**node_env(nnodes, node), "RANK": str(rank), "LOCAL_RANK": str(local), "GROUP_RANK": str(node),
            "ROLE_RANK": str(rank), "ROLE_NAME": "default", "LOCAL_WORLD_SIZE": str(nproc),
            "WORLD_SIZE": str(world), "GROUP_WORLD_SIZE": str(nnodes), "ROLE_WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": f"test-{port}",
            "TORCHELASTIC_USE_AGENT_STORE": "False", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


@dataclass
class Forked:
    """The ranks of one launch, forked from the warm parent: `ranks` in rank order, `logs` one per node (its
    ranks' stdout and stderr, as that node's torchrun would show them)."""

    ranks: list[warm_parent.Child]
    logs: list[Path]

    def text(self, node: int = 0) -> str:
        return self.logs[node].read_text(errors="replace") if self.logs[node].is_file() else ""

    def finish(self, timeout: float) -> tuple[list[str], int]:
        """(each node's log, the launch's exit code), the log files removed. As torchrun does, the first rank to
        fail ends the others (alone, they would wait in a collective until its timeout) and the launch exits 1;
        a one-process launch exits with its process's code."""
        codes = wait_all(self.ranks, timeout)
        texts = [self.text(n) for n in range(len(self.logs))]
        for log in self.logs:
            log.unlink(missing_ok=True)
        failed = [c for c in codes if c != 0]
        return texts, (0 if not failed else failed[0] if len(self.ranks) == 1 else 1)


def fork(argv: list[str], nproc: int = 1, nnodes: int = 1, module: str | None = None, script: str | None = None,
         cwd: Path | None = None, env: dict[str, str] | None = None) -> Forked:
    """Start every rank of a launch (`module` or `script` with `argv`) by forking the warm parent, each with
    torchrun's rank environment (and `env` over it); one process alone gets plain python's environment."""
    client = warm_parent.client(clean_env())
    tag = uuid.uuid4().hex[:8]
    logs = [client.folder / f"{tag}-node{n}.log" for n in range(nnodes)]
    port = rendezvous_port()
    ranks = [client.start(argv, {**(rank_env(nproc, nnodes, n, r, port) if nproc * nnodes > 1 else node_env(1, 0)),
                                 **(env or {})}, cwd or Path.cwd(), logs[n], module=module, script=script)
             for n in range(nnodes) for r in range(nproc)]
    return Forked(ranks, logs)


def wait_all(children: list[warm_parent.Child], timeout: float) -> list[int]:
    """Their exit codes; on the first failure (or past `timeout`) the others are killed (-9)."""
    deadline = time.monotonic() + timeout
    while any(c.poll() is None for c in children):
        timed_out = time.monotonic() > deadline
        if timed_out or any(c.poll() not in (None, 0) for c in children):
            for c in children:
                c.kill()
            for c in children:
                c.done.wait(30)
            if timed_out:
                raise subprocess.TimeoutExpired(f"{len(children)} forked ranks", timeout)
            break
        next(c for c in children if c.poll() is None).done.wait(0.2)
    return [c.poll() if c.poll() is not None else -9 for c in children]


def launch(launchers: list[list[str]], nnodes: int, timeout: float) -> tuple[list[str], int]:
    """Real launchers (torchrun, or plain python), one per node; (each one's output, the worst exit code)."""
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=node_env(nnodes, i)) for i, cmd in enumerate(launchers)]
    logs, codes = [], []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        logs.append(out)
        codes.append(p.returncode)
    return logs, max(codes)


def torchrun_launchers(flags: list[str], nproc: int, nnodes: int) -> list[list[str]]:
    port = rendezvous_port()
    if nproc * nnodes == 1:
        return [[sys.executable, "-m", "workshop.training.train", *flags]]
    if nnodes == 1:
        return [[*TORCHRUN, "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1", "--master-port", str(port),
                 "-m", "workshop.training.train", *flags]]
    return [[*TORCHRUN, "--nnodes", str(nnodes), "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
             "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"test-{port}", "-m", "workshop.training.train",
             *flags] for _ in range(nnodes)]


def train(out_dir: Path, flags: list[str], nproc: int = 1, nnodes: int = 1, timeout: float = 300,
          torchrun: bool | None = None) -> Run:
    """Run `workshop.training.train` on `nnodes` x `nproc` ranks, c10d on 127.0.0.1; the log is each node's output
    joined, in job.log.

    By default the ranks fork from the warm parent (module docstring); a one-process run then gets plain python's
    environment, as a one-process job starts with plain python (slurm/templates/launch-process.sh: the run gives
    itself torchrun's environment). `torchrun=True` launches real torchruns, one per node (a one-process one too:
    the test that the two agree); WORKSHOP_TEST_FORK=off starts plain python for one process, torchrun for more."""
    out_dir.mkdir(parents=True, exist_ok=True)
    train_flags = [*BASE_FLAGS, *flags, "--output-dir", str(out_dir), "--nodes", str(nnodes),
                   "--procs-per-node", str(nproc)]
    if torchrun or not forking():
        launchers = torchrun_launchers(train_flags, nproc, nnodes)
        if torchrun and nproc * nnodes == 1:
            launchers = [[*TORCHRUN, "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port",
                          str(rendezvous_port()), *launchers[0][1:]]]
        logs, code = launch(launchers, nnodes, timeout)
    else:
        logs, code = fork(train_flags, nproc, nnodes, module="workshop.training.train").finish(timeout)
    log = "\n".join(logs)
    (out_dir / "job.log").write_text(log)
    return Run(out_dir, log, code, tuple(logs))


def accelerate(out_dir: Path, yaml_text: str, flags: list[str], nproc: int = 1, nnodes: int = 1,
               timeout: float = 300) -> Run:
    """The twin of `train(out_dir, flags, ...)` launched the way accelerate users do: `accelerate launch
    --config_file` a YAML (its processes, precision and FSDP settings), one launcher per node, node 0
    hosting the rendezvous. The flags name no world: the YAML's processes are the run's."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "accelerate.yaml").write_text(yaml_text)
    port = rendezvous_port()
    launchers = [[sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(out_dir / "accelerate.yaml"),
                  "--num_processes", str(nproc * nnodes), "--num_machines", str(nnodes), "--machine_rank", str(i),
                  "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
                  "-m", "workshop.training.train", *BASE_FLAGS, *flags, "--output-dir", str(out_dir)]
                 for i in range(nnodes)]
    logs, code = launch(launchers, nnodes, timeout)
    log = "\n".join(logs)
    (out_dir / "job.log").write_text(log)
    return Run(out_dir, log, code, tuple(logs))


class RunCache:
    """One run per distinct (flags, nproc, nnodes) for the whole test session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runs: dict[tuple, Run] = {}

    def get(self, *flags: str, nproc: int = 1, nnodes: int = 1, torchrun: bool | None = None) -> Run:
        """The run of these flags on this world, made on first asking: its ranks forked from the warm parent, or
        launched by real torchruns with `torchrun=True` (`train`); the two are different runs."""
        key = (flags, nproc, nnodes, bool(torchrun))
        if key not in self.runs:
            name = f"run{len(self.runs)}-n{nnodes}x{nproc}{'-torchrun' if torchrun else ''}"
            with suite_profile.shared(f"runs: {' '.join(flags) or '(defaults)'}, {nnodes} node(s) x {nproc}"
                                      f"{', torchrun' if torchrun else ''}"):
                self.runs[key] = train(self.root / name, list(flags), nproc=nproc, nnodes=nnodes, torchrun=torchrun)
        return self.runs[key]
