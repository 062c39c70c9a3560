"""A student's own FSDP2 wrapping, from a notebook cell to the job that runs it.

The notebook writes the function's source into a .py file (`write_source`), the config names it
(`wrap_function="FILE.py:FUNCTION"`), `submit` copies that file into the job folder and points the
job's config at the copy (`carry`), and the job imports that exact file and calls FUNCTION(model)
(`apply`). What ran is the file whose SHA-256 the summary records, not a name the student's kernel
can rebind after submitting.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import shutil
import sys
import textwrap
import traceback
from pathlib import Path
from typing import Any, Callable

from workshop.training.config import ConfigError, RunConfig, load_config

JOB_FILE = "wrap_function.py"
# What a notebook function may use without importing it in its own body: the cell above it imported these.
HEADER = ("# Written by workshop.training.wrap_function.write_source from a notebook cell; the job imports this file.\n"
          "# COMPUTE_DTYPE, the 16-bit dtype of the job's site (its profile's precision: torch.float16 on a V100,\n"
          "# torch.bfloat16 elsewhere), is set by the job before it runs this file.\n"
          "import torch\n"
          "from torch.distributed.fsdp import (CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy,\n"
          "                                    fully_shard)\n")
FIX_NO_SHARD = ("call fully_shard(block, mp_policy=policy) on each block of model.transformer.h, then "
                "fully_shard(model, mp_policy=policy)")


def split(spec: str) -> tuple[Path, str]:
    """'FILE.py:FUNCTION' as (path, function name)."""
    path, _, name = spec.rpartition(":")
    return Path(path), name


def write_source(fn: Callable[..., Any], path: str | Path) -> str:
    """Write a notebook function's source (with the FSDP imports above it) to `path`; returns the
    `wrap_function` value that names it."""
    path = Path(path)
    source = textwrap.dedent(inspect.getsource(fn))
    path.write_text(HEADER + "\n\n" + source)
    return f"{path}:{fn.__name__}"


def job_settings(fn: Callable[..., Any], path: str | Path) -> dict[str, str]:
    """`write_source`, and what names the job: `{"wrap_function": "FILE.py:FUNCTION", "sha256": ...}`.

    The file's SHA-256 is what grading matches the saved job by (the job records the hash of its copy):
    a record of it outlives the file, so a grader's process that never ran the notebook still knows
    which function the student submitted."""
    spec = write_source(fn, path)
    return {"wrap_function": spec, "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}


def same_function(saved_spec: str, job_dir: Path, spec: str) -> bool:
    """Does a saved job (its config's `wrap_function`, its folder) run the function `spec` names? The same
    function name, and, where `spec`'s file is at hand, the same file content as the job's copy."""
    if not saved_spec or not spec or split(saved_spec)[1] != split(spec)[1]:
        return False
    mine, copy = split(spec)[0], job_dir / JOB_FILE
    if not mine.is_file():
        return True
    return copy.is_file() and hashlib.sha256(mine.read_bytes()).digest() == hashlib.sha256(copy.read_bytes()).digest()


def digest(cfg: RunConfig) -> str | None:
    """SHA-256 of the wrap function's file (None without one): an edited file is another job."""
    if not cfg.wrap_function:
        return None
    path, _ = split(cfg.wrap_function)
    if not path.is_file():
        raise ConfigError("wrap_function", f"file {str(path)!r} does not exist",
                          "write it first (workshop.training.wrap_function.write_source(fn, path)) or fix the path")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def carry(cfg: RunConfig, job_dir: Path) -> RunConfig:
    """Copy the wrap function's file into the job folder; the job's config names the copy."""
    if not cfg.wrap_function:
        return cfg
    path, name = split(cfg.wrap_function)
    digest(cfg)
    copy = job_dir / JOB_FILE
    if path.resolve() != copy.resolve():
        shutil.copyfile(path, copy)
    return load_config(base=cfg, overrides={"wrap_function": f"{copy}:{name}"})


def compute_dtype(precision: str) -> Any:
    """The 16-bit dtype a site computes in, which a student's MixedPrecisionPolicy takes as COMPUTE_DTYPE:
    fp16 where the profile trains in fp16 (a V100 has no bf16), bf16 everywhere else (fp32 CPU sites
    included: bf16 runs on any CPU)."""
    import torch

    return torch.float16 if precision == "fp16" else torch.bfloat16


def load(spec: str, site_dtype: Any = None) -> Callable[..., Any]:
    """Import FILE (with COMPUTE_DTYPE = `site_dtype` in its namespace) and return FUNCTION; a file that
    does not import, or lacks the function, says so."""
    path, name = split(spec)
    if not path.is_file():
        raise ConfigError("wrap_function", f"file {str(path)!r} does not exist", "submit again (submit copies it "
                          "into the job folder), or fix the path")
    module_spec = importlib.util.spec_from_file_location("workshop_student_wrap", path)
    module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
    module.COMPUTE_DTYPE = site_dtype  # type: ignore[attr-defined]
    try:
        module_spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        raise ConfigError("wrap_function", f"{path.name} does not import: {type(e).__name__}: {e}",
                          "fix the line the traceback above points at, and submit again") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        defined = [n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__]
        raise ConfigError("wrap_function", f"{path.name} defines no function {name!r}",
                          f"name one it defines: {', '.join(defined) or 'none'}")
    return fn


def apply(cfg: RunConfig, model: Any) -> Any:
    """Run the student's FUNCTION(model) and return the model it sharded; refuse a model it did not shard."""
    import torch
    from torch.distributed.fsdp import FSDPModule

    _, name = split(cfg.wrap_function)
    fn = load(cfg.wrap_function, compute_dtype(cfg.precision))
    try:
        returned = fn(model)
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        raise ConfigError("wrap_function", f"{name}(model) raised {type(e).__name__}: {e}",
                          "fix your function (the traceback above points at the line) and submit again") from None
    if returned is not None and returned is not model:
        if not isinstance(returned, torch.nn.Module):
            raise ConfigError("wrap_function", f"{name}(model) returned a {type(returned).__name__}, not the model",
                              "return the model (fully_shard returns it), or return nothing")
        model = returned
    units = [n for n, m in model.named_modules() if isinstance(m, FSDPModule)]
    if not units:
        raise ConfigError("wrap_function", f"{name}(model) returned without sharding anything: no module of the "
                          "model is an FSDPModule, so every rank would hold the whole model", FIX_NO_SHARD)
    if not isinstance(model, FSDPModule):
        raise ConfigError("wrap_function", f"{name}(model) sharded {len(units)} block(s) but not the model itself: "
                          "its embeddings and final norm would stay whole on every rank, and no root unit drives "
                          "the blocks' all-gathers", "end with fully_shard(model, mp_policy=policy)")
    if cfg.precision == "fp16":
        fp16_reducers = units_reducing_in_fp16(model)
        if fp16_reducers:
            raise ConfigError("wrap_function", f"{name}(model) leaves {len(fp16_reducers)} unit(s) reducing gradients "
                              f"in fp16 ({', '.join(fp16_reducers[:3])}{', ...' if len(fp16_reducers) > 3 else ''}) "
                              "on an fp16 site: loss-scaled fp16 gradients summed over the ranks overflow or lose "
                              "their small values, where DDP sums fp32",
                              "give every fully_shard call MixedPrecisionPolicy(param_dtype=COMPUTE_DTYPE, "
                              "reduce_dtype=torch.float32)")
    return model


def units_reducing_in_fp16(model: Any) -> list[str]:
    """The FSDP units whose policy reduce-scatters in fp16 (its reduce_dtype, or param_dtype without one);
    [] when this torch cannot read the policies back (summary.json's not_measured says so)."""
    import torch

    from workshop.training import sharding, torch_private

    try:
        groups = sharding.fsdp_param_groups(model)
    except torch_private.NotOnThisTorch as e:
        torch_private.not_measured("the reduce dtype of the student's units", e)
        return []
    names = {id(m): n or "(root)" for n, m in model.named_modules()}
    return [names.get(id(m), "?") for m, g in groups
            if (g.mp_policy.reduce_dtype or g.mp_policy.param_dtype) == torch.float16]
