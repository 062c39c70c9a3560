"""Register the course's Jupyter kernel: `python -m workshop.student.kernel [--profile NAME] [--user | --prefix DIR]`.

Students pick "FSDP workshop (bloom_env)" in JupyterLab instead of guessing which `python3` has the
course's packages. The kernelspec is written by ipykernel itself (so its argv is the interpreter that
runs this module: the conda env's python), with the site profile's environment in its `env` stanza:
`WORKSHOP_PROFILE` (so `submit()` needs no `profile=`), `HF_HOME` and `WANDB_MODE`. Jupyter expands
`${VAR}` in kernelspec env values when it starts the kernel, so `/scratch/$USER/hf_home` stays per user.

Run it once after `conda env create -f bloom_env.yml` (scripts/register_kernel.sh does); running it
again replaces the kernelspec, so it is safe in every Open OnDemand session start.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from workshop.slurm.profiles import ProfileError, load_profile

KERNEL_NAME = "fsdp-workshop"
DISPLAY_NAME = "FSDP workshop (bloom_env)"


def _jupyter_env_value(value: str) -> str:
    """`$USER` -> `${USER}`: the form jupyter_client substitutes when it launches the kernel."""
    return re.sub(r"\$([A-Za-z_][A-Za-z0-9_]*)", r"${\1}", value)


def kernel_env(profile: str | None) -> dict[str, str]:
    """The variables the kernelspec carries for a site profile (none without a profile)."""
    if not profile:
        return {}
    prof = load_profile(profile)
    env = {"WORKSHOP_PROFILE": prof.source if Path(profile).suffix == ".toml" else prof.name}
    if prof.hf_home:
        env["HF_HOME"] = _jupyter_env_value(prof.hf_home)
    env["WANDB_MODE"] = prof.wandb_mode
    return env


def install_command(profile: str | None, user: bool = True, prefix: str | None = None,
                    python: str = sys.executable) -> list[str]:
    """The `ipykernel install` command line (printed too, so an admin can see what it does)."""
    cmd = [python, "-m", "ipykernel", "install", "--name", KERNEL_NAME, "--display-name", DISPLAY_NAME]
    if prefix:
        cmd += ["--prefix", prefix]
    elif user:
        cmd.append("--user")
    for key, value in kernel_env(profile).items():
        cmd += ["--env", key, value]
    return cmd


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workshop.student.kernel", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default=None,
                    help="site profile whose HF_HOME / WANDB_MODE the kernel gets (name or .toml path); "
                         "default: $WORKSHOP_PROFILE, else none")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", default=True,
                       help="install for this user (~/.local/share/jupyter; the default)")
    where.add_argument("--prefix", default=None, help="install under PREFIX/share/jupyter/kernels instead")
    args = ap.parse_args(argv)
    profile = args.profile or os.environ.get("WORKSHOP_PROFILE") or None
    try:
        cmd = install_command(profile, prefix=args.prefix)
    except ProfileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("[kernel] " + shlex.join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode
    if rc != 0:
        print("error: ipykernel install failed. Fix: run this inside the course environment "
              "(conda activate bloom_env) where ipykernel is installed", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
