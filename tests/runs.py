"""Real training runs for the tests: torchrun subprocesses on gloo, each configuration run once.

A run is keyed by its flags, so several tests that need "FULL_SHARD at 2 ranks" share one run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import suite_profile
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


def train(out_dir: Path, flags: list[str], nproc: int = 1, nnodes: int = 1, timeout: float = 300,
          torchrun: bool | None = None) -> Run:
    """Launch `workshop.training.train` like a job would: one torchrun per node, c10d rendezvous on 127.0.0.1.

    A one-process run starts with plain python, as a one-process job does (slurm/templates/launch-process.sh;
    the run gives itself torchrun's environment): torchrun's own interpreter and torch import cost ~2 s of CPU
    a run for nothing to coordinate. `torchrun=True` launches one anyway (the test that the two agree)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    train_flags = [*BASE_FLAGS, *flags, "--output-dir", str(out_dir), "--nodes", str(nnodes),
                   "--procs-per-node", str(nproc)]
    port = rendezvous_port()
    if nproc * nnodes == 1 and not torchrun:
        launchers = [[sys.executable, "-m", "workshop.training.train", *train_flags]]
    elif nnodes == 1:
        launchers = [[*TORCHRUN, "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
                      "--master-port", str(port), "-m", "workshop.training.train", *train_flags]]
    else:
        launchers = [[*TORCHRUN, "--nnodes", str(nnodes), "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
                      "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"test-{port}",
                      "-m", "workshop.training.train", *train_flags] for _ in range(nnodes)]
    # several "nodes" on this machine: each launcher is named as Slurm names a node (node_name())
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**clean_env(), **({"SLURMD_NODENAME": f"node{i + 1}"} if nnodes > 1 else {})})
             for i, cmd in enumerate(launchers)]
    logs, codes = [], []
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        logs.append(out)
        codes.append(p.returncode)
    log = "\n".join(logs)
    (out_dir / "job.log").write_text(log)
    return Run(out_dir, log, max(codes), tuple(logs))


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
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**clean_env(), **({"SLURMD_NODENAME": f"node{i + 1}"} if nnodes > 1 else {})})
             for i, cmd in enumerate(launchers)]
    logs = [p.communicate(timeout=timeout)[0] for p in procs]
    log = "\n".join(logs)
    (out_dir / "job.log").write_text(log)
    return Run(out_dir, log, max(p.returncode for p in procs), tuple(logs))


class RunCache:
    """One run per distinct (flags, nproc, nnodes) for the whole test session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runs: dict[tuple, Run] = {}

    def get(self, *flags: str, nproc: int = 1, nnodes: int = 1, torchrun: bool | None = None) -> Run:
        """The run of these flags on this world, made on first asking; one-process runs start without torchrun
        unless `torchrun=True` (`train`)."""
        launched = bool(torchrun) or nproc * nnodes > 1
        key = (flags, nproc, nnodes, launched)
        if key not in self.runs:
            name = f"run{len(self.runs)}-n{nnodes}x{nproc}{'' if launched else '-python'}"
            with suite_profile.shared(f"runs: {' '.join(flags) or '(defaults)'}, {nnodes} node(s) x {nproc}"):
                self.runs[key] = train(self.root / name, list(flags), nproc=nproc, nnodes=nnodes, torchrun=launched)
        return self.runs[key]
