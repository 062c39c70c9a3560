"""The wheels the lent GPU machine lacks: locked here, fetched here, carried there, checked there.

Why: the device tool's GPU machine (benchmarks/README.md) runs Python 3.12 on manylinux x86_64 with
its own torch 2.11 (CUDA 13), transformers 5.17, accelerate 1.15, pandas, matplotlib, pytest... but it
reaches no registry, and at most 64 MiB travel with the working tree. The GPU tier executes notebooks
01 and 02 with papermill, which needs a Jupyter kernel (ipykernel, pyzmq, tornado, IPython) and
nbformat/nbclient; nothing else the tier runs is missing there. The course's fixture path needs
neither `datasets` (the training script hides it, workshop.training.train.skip_datasets_unless_needed)
nor nbgrader (only grading and the release import it) nor wandb (runs say wandb="disabled").

    python3 scripts/gpu_wheels.py download       # here: fetch the locked wheels into .whl/, check the size
    python3 scripts/gpu_wheels.py check          # anywhere: each locked wheel there, its hash, nothing else
    python3 scripts/gpu_wheels.py install --target DIR [--cross]   # there: pip, offline, into DIR (PYTHONPATH)
    .venv/bin/python scripts/gpu_wheels.py lock  # here, after changing NEEDS: rewrite scripts/gpu_wheels.lock

`lock` walks the Requires-Dist of NEEDS for Python 3.12 on Linux x86_64, leaves out what the GPU
machine has (GPU_HAS) and what the tier never imports (LEFT_OUT, with the reason), and pins every
other distribution at the version this project's venv runs (pyproject.toml's environment, tested
together), with the sha256 of the cp312 manylinux wheel. `download` asks pip for exactly those files
(`--require-hashes`), so two runs fetch byte-identical wheels.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = Path(__file__).resolve().with_suffix(".lock")
DEST = Path(os.environ.get("GPU_WHEELS") or ROOT / ".whl")   # .whl is git-ignored; $GPU_WHEELS moves it
CARRY_LIMIT = 64 * 2**20         # the device tool: tracked + untracked-not-ignored files + carried paths
WHEEL_BUDGET = 32 * 2**20        # what the wheels may take of it: the tree and later additions keep the rest

# The wheels' target: the GPU machine's interpreter and platform (the device tool's README).
PLATFORM_ARGS = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
                 *[a for n in ("manylinux_2_28", "manylinux_2_27", "manylinux_2_17", "manylinux2014",
                               "manylinux_2_5", "manylinux1") for a in ("--platform", f"{n}_x86_64")]]
MARKER_ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
              "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
              "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}

# What the tier imports that the GPU machine lacks: papermill and the kernel it starts (notebooks 01
# and 02), and ipywidgets, which the job display (workshop.slurm.watch) uses inside a kernel.
NEEDS = ("papermill", "nbclient", "nbformat", "ipykernel", "ipywidgets")

# Distributions the tier's imports would pull in but never import on this path, with the reason.
LEFT_OUT = {
    "debugpy": "ipykernel imports it only when a debugger attaches (4 MB); papermill never attaches one",
    "widgetsnbextension": "JupyterLab/Notebook front-end files for ipywidgets; a headless kernel loads none",
    "jupyterlab-widgets": "JupyterLab front-end files for ipywidgets; a headless kernel loads none",
    "appnope": "macOS only",
}

# The GPU machine's own Python packages (the device tool's KINDS.md, "Python packages already there",
# read on 2026-11-17): never carried, whatever a Requires-Dist says.
GPU_HAS = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy
peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core
scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile
tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel
wrapt xarray xxhash yarl zipp
""".split())

_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s]+)\s+--hash=sha256:([0-9a-f]{64})$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(path: Path) -> tuple[str, str]:
    """(canonical distribution name, version) from a wheel's file name."""
    dist, version = path.name.split("-")[:2]
    return canonical(dist), version


def read_lock(lock: Path = LOCK) -> dict[str, tuple[str, str]]:
    """{name: (version, sha256)} from the lock's `name==version --hash=sha256:...` lines."""
    out = {}
    for n, line in enumerate(lock.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = _REQ.match(line)
        if not m:
            raise SystemExit(f"{lock}:{n}: cannot read {line!r} (expected NAME==VERSION --hash=sha256:HEX)")
        out[canonical(m.group(1))] = (m.group(2), m.group(3))
    return out


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check(dest: Path, lock: Path = LOCK, budget: int = WHEEL_BUDGET) -> list[str]:
    """What is wrong with `dest` against the lock ([] = nothing): missing or extra wheels, a second
    version of one (it stops pip's whole install), a hash that differs, a total over the budget."""
    locked = read_lock(lock)
    wheels = sorted(dest.glob("*.whl")) if dest.is_dir() else []
    if not wheels:
        return [f"no wheels in {dest}: run `python3 scripts/gpu_wheels.py download` on a machine with a registry"]
    problems, seen = [], {}
    for w in wheels:
        name, version = wheel_name(w)
        if name in seen:
            problems.append(f"two wheels of {name} ({seen[name]}, {w.name}): delete {dest} and download again")
        seen[name] = w.name
        if name not in locked:
            problems.append(f"{w.name} is not in {lock.name}: delete it (pip would install it too)")
        elif locked[name][0] != version:
            problems.append(f"{w.name}: the lock says {name}=={locked[name][0]}")
        elif sha256(w) != locked[name][1]:
            problems.append(f"{w.name}: sha256 differs from {lock.name} (a partial or another build): download again")
    problems += [f"{name}=={v} is missing from {dest}" for name, (v, _) in sorted(locked.items()) if name not in seen]
    total = sum(w.stat().st_size for w in wheels)
    if total > budget:
        problems.append(f"the wheels take {total / 2**20:.1f} MiB, over their {budget / 2**20:.0f} MiB of the "
                        f"{CARRY_LIMIT / 2**20:.0f} MiB the device tool carries")
    return problems


def tree_bytes() -> int:
    """What travels besides carried paths: tracked and untracked-not-ignored files (git's view)."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    paths = (ROOT / p for p in out.decode().split("\0") if p)
    return sum(p.stat().st_size for p in paths if p.is_file())


def pip_download(args: list[str], dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
           *PLATFORM_ARGS, "-d", str(dest), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"pip download failed:\n{proc.stderr[-3000:]}")


def download(dest: Path, lock: Path = LOCK) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    locked = read_lock(lock)
    for w in dest.glob("*.whl"):        # a wheel of another version from an older lock would be installed too
        name, version = wheel_name(w)
        if locked.get(name, (None,))[0] != version:
            w.unlink()
    pip_download(["--require-hashes", "-r", str(lock)], dest)
    problems = check(dest, lock)
    total = sum(w.stat().st_size for w in dest.glob("*.whl"))
    tree = tree_bytes()
    print(f"gpu_wheels: {len(locked)} wheels, {total / 2**20:.1f} MiB in {dest} (budget {WHEEL_BUDGET / 2**20:.0f} MiB); "
          f"with the working tree ({tree / 2**20:.1f} MiB) {(total + tree) / 2**20:.1f} of the "
          f"{CARRY_LIMIT / 2**20:.0f} MiB the device tool carries")
    for p in problems:
        print(f"gpu_wheels: {p}", file=sys.stderr)
    if total + tree > CARRY_LIMIT:
        print("gpu_wheels: the tree and the wheels are over the carry limit", file=sys.stderr)
        return 1
    return 1 if problems else 0


def install(dest: Path, target: Path, cross: bool) -> int:
    """pip, offline, each wheel as it is (`--no-deps`: the lock is the whole set) into `target`, which the
    caller puts first on PYTHONPATH. `cross`: install for the GPU machine's Python and platform from
    another one (gpu_check.sh --dry-run), which proves the set installs there without importing it."""
    wheels = sorted(dest.glob("*.whl"))
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
           "--disable-pip-version-check", "--upgrade", "--target", str(target), *(PLATFORM_ARGS if cross else []),
           *map(str, wheels)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"gpu_wheels: pip install failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}", file=sys.stderr)
        return 1
    where = "CPython 3.12 on manylinux x86_64 (installed, not imported)" if cross else sys.executable
    print(f"gpu_wheels: {len(wheels)} wheels installed into {target} for {where}")
    return 0


# ------------------------------------------------------------------------------------------ lock


def requires(wheel: Path) -> list[str]:
    """The distributions a wheel needs on the GPU machine's Python and platform (no extras)."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    out = []
    for line in lines:
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            if req.marker is None or req.marker.evaluate(MARKER_ENV):
                out.append(canonical(req.name))
    return out


def venv_version(name: str) -> str | None:
    """The version this interpreter has: run `lock` with the project's .venv, where pyproject's pins live."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def lock_needs(lock: Path = LOCK) -> int:
    """Resolve NEEDS' closure for the GPU machine and write the lock (see the module docstring)."""
    pinned: dict[str, tuple[str, str, str]] = {}
    todo, why = list(NEEDS), {n: "the tier" for n in NEEDS}
    with tempfile.TemporaryDirectory() as tmp:
        while todo:
            name = todo.pop(0)
            if name in pinned or name in GPU_HAS or name in LEFT_OUT:
                continue
            version = venv_version(name)
            spec = f"{name}=={version}" if version else name
            before = set(Path(tmp).glob("*.whl"))
            pip_download([spec], Path(tmp))
            (wheel,) = set(Path(tmp).glob("*.whl")) - before
            pinned[name] = (wheel_name(wheel)[1], sha256(wheel), why[name])
            for dep in requires(wheel):
                why.setdefault(dep, name)
                todo.append(dep)
    lines = ["# Wheels carried to the lent GPU machine (Python 3.12, manylinux x86_64): scripts/gpu_wheels.py writes",
             "# this file (`lock`) and fetches exactly these files (`download`). Left out on purpose:"]
    lines += [f"#   {n}: {reason}" for n, reason in LEFT_OUT.items()]
    lines += [f"{n}=={v} --hash=sha256:{h}  # for {w}" for n, (v, h, w) in sorted(pinned.items())]
    lock.write_text("\n".join(lines) + "\n")
    print(f"gpu_wheels: locked {len(pinned)} wheels in {lock}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/gpu_wheels.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=("download", "check", "install", "lock"))
    ap.add_argument("--dest", type=Path, default=DEST, help="the wheel folder (default: $GPU_WHEELS, else .whl)")
    ap.add_argument("--lock", type=Path, default=LOCK, help="the lock file (default: scripts/gpu_wheels.lock)")
    ap.add_argument("--target", type=Path, help="install: the folder pip installs into")
    ap.add_argument("--cross", action="store_true", help="install: for Python 3.12 manylinux x86_64, from here")
    args = ap.parse_args(argv)
    if args.command == "install":
        if args.target is None:
            ap.error("install needs --target DIR")
        return install(args.dest, args.target, args.cross)
    if args.command == "lock":
        return lock_needs(args.lock)
    if args.command == "download":
        return download(args.dest, args.lock)
    problems = check(args.dest, args.lock)
    for p in problems:
        print(f"gpu_wheels: {p}", file=sys.stderr)
    if not problems:
        total = sum(w.stat().st_size for w in args.dest.glob("*.whl"))
        print(f"gpu_wheels: {len(read_lock(args.lock))} wheels in {args.dest} match {args.lock.name} "
              f"({total / 2**20:.1f} MiB)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
