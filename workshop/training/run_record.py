"""What a run records about itself: the resolved config, versions, code revision, host and Slurm job."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from workshop.training.config import RunConfig

PACKAGES = ("torch", "transformers", "accelerate", "datasets", "tokenizers", "wandb", "fsdp-workshop")


def say(line: str) -> None:
    """Write one whole log line in a single write.

    `print(text, flush=True)` writes the text and its newline separately when stdout is unbuffered
    (`python -u`, as torchrun's workers run): on a multi-node job, another node's process writing the
    Trainer's log dict into the same job log between the two was seen to splice onto a
    `WORKSHOP_METRICS {...}` line. One write of the line with its newline keeps it whole."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def node_name() -> str:
    """The node this process runs on: Slurm's name for it (SLURMD_NODENAME, set per node in every
    task, and by the local backend for each simulated node), else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    try:
        import torch

        out["cuda"] = torch.version.cuda
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    except Exception:
        out["cuda"] = out.get("cuda")
    return out


def git_sha() -> str | None:
    """The course checkout's commit, so a number can be traced to the code that made it."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def run_args(cfg: RunConfig) -> dict[str, Any]:
    return {
        "config": cfg.resolved(),
        "versions": versions(),
        "git_sha": git_sha(),
        "host": node_name(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_nodelist": os.environ.get("SLURM_JOB_NODELIST"),
        "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically: a reader (a notebook polling the job) never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(path)
