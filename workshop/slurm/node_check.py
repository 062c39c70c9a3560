"""What a preflight job runs on one GPU of a partition (`workshop preflight`): the node as the course's
jobs will find it, in one `WORKSHOP_PREFLIGHT {json}` line of the job's log.

    python -m workshop.slurm.node_check --config CONFIG.json --folder jobs=DIR [--folder scratch=DIR]

It records facts, not verdicts (the login side compares them with the profile): the NVIDIA GPUs the
node has (the driver's own list, not torch's), torch's and CUDA's versions, the GPU's compute
capability and the CUDA architectures the torch wheel was built for (`torch.cuda.get_arch_list()`),
bf16 support, a NCCL process group on this GPU with one all_reduce, the offline load of the course's
model and data from the shared cache (workshop/training/hf_cache.py), and the free disk of the folders
the jobs write. A check that fails records its error; the line is always printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

MARK = "WORKSHOP_PREFLIGHT"


def nvidia_gpus() -> list[str]:
    """The NVIDIA GPUs of this node by the kernel driver (/proc/driver/nvidia), else by nvidia-smi: what
    the node has, whatever torch can use. Empty on a node without the NVIDIA driver (or without GPUs)."""
    found = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        model = next((ln.split(":", 1)[1].strip() for ln in info.read_text(errors="replace").splitlines()
                      if ln.startswith("Model:")), "NVIDIA GPU")
        found.append(model)
    if found or shutil.which("nvidia-smi") is None:
        return found
    import subprocess
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln.split(":", 1)[1].split("(UUID")[0].strip() for ln in out.splitlines() if ln.startswith("GPU ")]


def driver_version() -> str | None:
    """The NVIDIA driver: NVML (nvidia-ml-py, in the course environment) first, nvidia-smi second; None
    without one (the fact is then "unknown"). The preflight job and the GPU tier's report both ask it."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 -- no NVML library, or no GPU: try the command line tool
        pass
    import subprocess
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0].strip() if out else None


def cuda_facts() -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                             "cuda_available": torch.cuda.is_available(),
                             "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if not facts["cuda_available"]:
        return facts
    props = torch.cuda.get_device_properties(0)
    facts.update(device_count=torch.cuda.device_count(), name=props.name, capability=list(torch.cuda.get_device_capability(0)),
                 memory_gb=round(props.total_memory / 1e9, 1), arch_list=torch.cuda.get_arch_list(),
                 bf16=bool(torch.cuda.is_bf16_supported()), driver=driver_version())
    facts["nccl"] = nccl_check()
    return facts


def nccl_check() -> dict[str, Any]:
    """A NCCL process group of one rank on GPU 0 and one all_reduce: the library loads, finds its
    network (the profile's NCCL_* variables are in this job's environment) and computes right."""
    import torch
    import torch.distributed as dist

    t0 = time.perf_counter()
    try:
        torch.cuda.set_device(0)
        # one rank: its store listens on port 0, assigned by the kernel as it listens (slurm/ports.py)
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:0", rank=0, world_size=1,
                                device_id=torch.device("cuda", 0))
        x = torch.full((1024,), 2.0, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        ok = bool((x == 2.0).all().item())
        dist.destroy_process_group()
        version = torch.cuda.nccl.version()        # (2, 21, 5) in torch 2.x; an int in old releases
        version = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        return {"ok": ok, "version": version, "seconds": round(time.perf_counter() - t0, 2),
                "env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}
    except Exception as e:   # noqa: BLE001
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:600]}


def free_disk(folders: list[str]) -> dict[str, Any]:
    """`NAME=PATH` -> {NAME: the free disk of PATH's filesystem (of its nearest existing parent)}."""
    out: dict[str, Any] = {}
    for spec in folders:
        name, _, folder = spec.partition("=")
        path = Path(os.path.expandvars(folder)).expanduser()
        probe = path
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        try:
            out[name] = {"path": str(path), "exists": path.is_dir(), "free_gb": round(shutil.disk_usage(probe).free / 1e9, 1)}
        except OSError as e:
            out[name] = {"path": str(path), "error": str(e)}
    return out


def check(config_path: Path, folders: list[str]) -> dict[str, Any]:
    from workshop.training import hf_cache
    from workshop.training.config import load_config

    cfg = load_config(config_path)
    report: dict[str, Any] = {"host": socket.gethostname(), "python": platform.python_version(),
                              "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "nvidia_gpus": nvidia_gpus()}
    try:
        report.update(cuda_facts())
    except Exception as e:   # noqa: BLE001
        report["torch_error"] = f"{type(e).__name__}: {e}"[:600]
    report["offline"] = hf_cache.offline_load(cfg.model, cfg.dataset, cfg.train_size, cfg.eval_size, cfg.eval_split,
                                              cfg.seed)
    report["disk"] = free_disk(folders)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workshop.slurm.node_check", description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, required=True, help="the preflight job's config.json (model, dataset, sizes)")
    ap.add_argument("--folder", action="append", default=[], metavar="NAME=PATH",
                    help="a folder whose free disk to report, e.g. jobs=/home/me/jobs (repeatable)")
    args = ap.parse_args(argv)
    report = check(args.config, args.folder)
    print(f"{MARK} {json.dumps(report)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
