"""Site profiles: everything that differs between a laptop, the CI cluster and a real HPC site.

A course step is the same code everywhere; a profile (a small TOML file in `slurm/profiles/`) says
where it runs: backend, partitions and their GPUs, account, how to activate the environment,
where caches live, the bandwidth threshold and the RunConfig defaults of the site (`[run]`, and
`[run.<step>]` per step). Choosing a profile: the `profile=` argument, else `WORKSHOP_PROFILE`,
else `local` when there is no `sbatch` on PATH; with Slurm present the user must choose, because
silently running on the login node (or on the wrong partition) is worse than asking.

`setup` lines in `[env]` are shell commands written by the site's admin and are rendered as-is;
every other value is quoted when rendered.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from workshop.training.config import ConfigError, coerce

# slurm/ at the repository root: templates/ and profiles/, readable by the site's admins.
# WORKSHOP_SLURM_FILES points elsewhere (an installed copy, a site's own folder of the same shape).
SLURM_DIR = Path(os.environ.get("WORKSHOP_SLURM_FILES", Path(__file__).resolve().parents[2] / "slurm"))
PROFILES_DIR = SLURM_DIR / "profiles"
TEMPLATES_DIR = SLURM_DIR / "templates"

BACKENDS = ("slurm", "local")
GPU_REQUESTS = ("gpus-per-node", "gres", "none")
_MEM = re.compile(r"^(\d+)([KMGT])$")
_TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$")
_CUDA_MODULE = re.compile(r"\bmodule\s+(?:load|add)\b.*\bcuda(?:[/@ ]|$)", re.I)


class ProfileError(ValueError):
    """A profile value that cannot be used; the message names the file, the field and the fix."""

    def __init__(self, source: str, field_name: str, problem: str, fix: str) -> None:
        self.field = field_name
        super().__init__(f"profile {source}: field '{field_name}': {problem}. Fix: {fix}")


@dataclass(frozen=True)
class Partition:
    """One kind of node the site offers (a Slurm partition)."""

    key: str
    name: str = ""              # the Slurm partition name ("" = the cluster's default partition)
    gpus_per_node: int = 0
    gpu_type: str = ""          # e.g. a100 -> --gpus-per-node=a100:4
    gpu_name: str = ""          # for people: "A100-SXM4-80GB"
    cpus_per_proc: int = 1      # CPU cores per training process (per GPU)
    mem_per_proc: str = ""      # e.g. "40G"; "" = the site's default
    max_nodes: int = 0          # 0 = no limit known
    mem_per_node: str = ""      # memory a job may ask for on one node (`scontrol show node`: RealMemory
                                # less the site's reserve); every request must fit it
    max_time: str = ""          # the partition's MaxTime (`sinfo -o "%P %l"`); every time limit must fit it


@dataclass(frozen=True)
class Profile:
    """A validated site profile."""

    name: str
    source: str
    backend: str
    description: str = ""
    partitions: Mapping[str, Partition] = field(default_factory=dict)
    partition: str = ""                          # key of the default partition
    account: str = ""
    reservation: str = ""
    constraint: str = ""
    qos: str = ""
    time: str = "00:30:00"
    gpu_request: str = "gpus-per-node"
    signal_lead_s: int = 0                        # > 0: --signal=B:USR1@LEAD (checkpoint before the limit)
    step_slurm: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    setup: tuple[str, ...] = ()
    python_env: str = ""                          # "current": activate this interpreter's environment
    hf_home: str = ""
    scratch: str = ""                             # [env]: checkpoints go here, never into a student's folder
    wandb_mode: str = "disabled"
    env: Mapping[str, str] = field(default_factory=dict)
    min_busbw_GBps: float = 0.0                   # the gate: bus bandwidth at the largest message, GB/s
    bandwidth_max_bytes: str = ""
    instructor_jobs: str = ""                     # [course]: the instructor's shared job folder (workshop.course.budget)
    instructor_min_gpus: int = 8                  # [course]: jobs this large (or of 2+ nodes) are the instructor's
    instructor_steps: tuple[str, ...] = ()        # [course]: steps whose every job is the instructor's (e.g. strategies)
    run: Mapping[str, Any] = field(default_factory=dict)
    run_steps: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    digest: str = ""

    def partition_for(self, step: str) -> Partition:
        """The partition a step runs on (`[slurm.steps.<step>] partition`, else the default)."""
        key = self.step_slurm.get(step, {}).get("partition", self.partition)
        return self.partitions[key]

    def time_for(self, step: str) -> str:
        return self.step_slurm.get(step, {}).get("time", self.time)

    def run_defaults(self, step: str) -> dict[str, Any]:
        """RunConfig values this site sets for a step: `[run]` then `[run.<step>]`."""
        out = dict(self.run)
        out.update(self.run_steps.get(step, {}))
        return out


def available() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.toml"))


def default_name(env: Mapping[str, str] | None = None) -> str:
    """`WORKSHOP_PROFILE`, else `local` where there is no Slurm; with Slurm the user must choose."""
    env = os.environ if env is None else env
    if env.get("WORKSHOP_PROFILE"):
        return env["WORKSHOP_PROFILE"]
    if shutil.which("sbatch", path=env.get("PATH")) is None:
        return "local"
    raise ProfileError("(none chosen)", "profile", "this machine has Slurm (sbatch is on PATH) but no profile "
                       "was named", f"pass profile=NAME (or --profile NAME), or export WORKSHOP_PROFILE=NAME; "
                       f"known profiles: {', '.join(available())}, or a path to your site's .toml file")


def load_profile(name_or_path: str | Path | Profile | None = None) -> Profile:
    """A profile by name (`slurm/profiles/<name>.toml`) or path; None picks the default."""
    if isinstance(name_or_path, Profile):
        return name_or_path
    name = str(name_or_path) if name_or_path is not None else default_name()
    path = Path(name)
    if path.suffix != ".toml":
        path = PROFILES_DIR / f"{name}.toml"
    if not path.is_file():
        raise ProfileError(name, "profile", f"no profile file {str(path)!r}",
                           f"use one of {', '.join(available())} or the path of a .toml file")
    text = path.read_text()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(str(path), "(syntax)", str(e), "fix the TOML at the position named") from None
    return parse_profile(data, source=str(path), name=path.stem,
                         digest=hashlib.sha256(text.encode()).hexdigest()[:12])


def _take(data: dict[str, Any], key: str, typ: type, default: Any, source: str, where: str) -> Any:
    value = data.pop(key, default)
    if typ is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise ProfileError(source, f"{where}{key}", f"expected {typ.__name__}, got {value!r}",
                           f"write e.g. {key} = {typ() if typ is not str else chr(34) * 2}")
    return value


def _no_leftovers(data: dict[str, Any], source: str, where: str, known: str) -> None:
    if data:
        raise ProfileError(source, f"{where}{next(iter(data))}", "is not a profile field",
                           f"remove it, or use one of: {known}")


def parse_profile(data: dict[str, Any], source: str, name: str, digest: str = "") -> Profile:
    """Validate a profile's TOML tables; every error names the field and what to write instead."""
    data = dict(data)
    kw: dict[str, Any] = {"name": _take(data, "name", str, name, source, ""), "source": source, "digest": digest}
    kw["description"] = _take(data, "description", str, "", source, "")
    kw["backend"] = _take(data, "backend", str, "slurm", source, "")
    if kw["backend"] not in BACKENDS:
        raise ProfileError(source, "backend", f"unknown backend {kw['backend']!r}", "use slurm or local")

    slurm = dict(_take(data, "slurm", dict, {}, source, ""))
    parts_raw = dict(_take(slurm, "partitions", dict, {}, source, "slurm."))
    if not parts_raw:
        parts_raw = {"default": {}}
    partitions: dict[str, Partition] = {}
    for key, raw in parts_raw.items():
        where = f"slurm.partitions.{key}."
        if not isinstance(raw, dict):
            raise ProfileError(source, where[:-1], "must be a table", f"write [slurm.partitions.{key}]")
        raw = dict(raw)
        p = Partition(key=key, name=_take(raw, "name", str, "", source, where),
                      gpus_per_node=_take(raw, "gpus_per_node", int, 0, source, where),
                      gpu_type=_take(raw, "gpu_type", str, "", source, where),
                      gpu_name=_take(raw, "gpu_name", str, "", source, where),
                      cpus_per_proc=_take(raw, "cpus_per_proc", int, 1, source, where),
                      mem_per_proc=_take(raw, "mem_per_proc", str, "", source, where),
                      max_nodes=_take(raw, "max_nodes", int, 0, source, where),
                      mem_per_node=_take(raw, "mem_per_node", str, "", source, where),
                      max_time=_take(raw, "max_time", str, "", source, where))
        _no_leftovers(raw, source, where, "name, gpus_per_node, gpu_type, gpu_name, cpus_per_proc, "
                      "mem_per_proc, max_nodes, mem_per_node, max_time")
        _check_partition_fits(p, source, where)
        if p.mem_per_proc and not _MEM.match(p.mem_per_proc):
            raise ProfileError(source, where + "mem_per_proc", f"{p.mem_per_proc!r} is not a size",
                               "write a whole number and a unit, e.g. \"40G\" or \"2048M\"")
        if p.gpus_per_node < 0 or p.cpus_per_proc < 1:
            raise ProfileError(source, where + "cpus_per_proc", "gpus_per_node must be >= 0 and cpus_per_proc >= 1",
                               "count the GPUs and cores of one node of this partition")
        if not re.fullmatch(r"[A-Za-z0-9_.,-]*", p.name + p.gpu_type):
            raise ProfileError(source, where + "name", f"{p.name!r} / {p.gpu_type!r} has characters Slurm "
                               "names never have", "use the names `sinfo -s` and `scontrol show node` print")
        partitions[key] = p
    kw["partitions"] = partitions
    kw["partition"] = _take(slurm, "partition", str, next(iter(partitions)), source, "slurm.")
    for k in ("account", "reservation", "constraint", "qos"):
        kw[k] = _take(slurm, k, str, "", source, "slurm.")
        if not re.fullmatch(r"[A-Za-z0-9_.,&|\[\]:*-]*", kw[k]):
            raise ProfileError(source, f"slurm.{k}", f"{kw[k]!r} has characters that cannot appear in a "
                               "#SBATCH line", "use the name your site gave you (letters, digits, _ . - ,)")
    kw["time"] = _take(slurm, "time", str, "00:30:00", source, "slurm.")
    kw["gpu_request"] = _take(slurm, "gpu_request", str, "gpus-per-node", source, "slurm.")
    kw["signal_lead_s"] = _take(slurm, "signal_lead_s", int, 0, source, "slurm.")
    steps = dict(_take(slurm, "steps", dict, {}, source, "slurm."))
    _no_leftovers(slurm, source, "slurm.", "partition, partitions, account, reservation, constraint, qos, time, "
                  "gpu_request, signal_lead_s, steps")
    if kw["partition"] not in partitions:
        raise ProfileError(source, "slurm.partition", f"{kw['partition']!r} is not a [slurm.partitions.*] table",
                           f"use one of {', '.join(partitions)}")
    if kw["gpu_request"] not in GPU_REQUESTS:
        raise ProfileError(source, "slurm.gpu_request", f"unknown value {kw['gpu_request']!r}",
                           f"use one of {', '.join(GPU_REQUESTS)}")
    _check_time(kw["time"], source, "slurm.time")
    _check_time_fits(kw["time"], partitions[kw["partition"]], source, "slurm.time")
    step_slurm: dict[str, dict[str, str]] = {}
    for step, raw in steps.items():
        raw = dict(raw) if isinstance(raw, dict) else {}
        where = f"slurm.steps.{step}."
        entry = {k: _take(raw, k, str, "", source, where) for k in ("partition", "time")}
        _no_leftovers(raw, source, where, "partition, time")
        if entry["partition"] and entry["partition"] not in partitions:
            raise ProfileError(source, where + "partition", f"{entry['partition']!r} is not defined",
                               f"use one of {', '.join(partitions)}")
        if entry["time"]:
            _check_time(entry["time"], source, where + "time")
        _check_time_fits(entry["time"] or kw["time"], partitions[entry["partition"] or kw["partition"]],
                         source, where + "time" if entry["time"] else "slurm.time")
        step_slurm[step] = {k: v for k, v in entry.items() if v}
    kw["step_slurm"] = step_slurm

    env = dict(_take(data, "env", dict, {}, source, ""))
    setup = _take(env, "setup", list, [], source, "env.")
    if not all(isinstance(s, str) and "\n" not in s for s in setup):
        raise ProfileError(source, "env.setup", "must be a list of one-line shell commands",
                           'write setup = ["module load cuda/12.1", "conda activate bloom_env"]')
    for line in setup:
        if _CUDA_MODULE.search(line):
            raise ProfileError(source, "env.setup", f"{line!r} loads a CUDA module, whose libraries would fight "
                               "the CUDA libraries the pip torch wheel brings (and finds through its RPATH)",
                               "remove the cuda module from the line: the wheels carry CUDA, the node its driver")
    kw["setup"] = tuple(setup)
    kw["python_env"] = _take(env, "python_env", str, "", source, "env.")
    if kw["python_env"] not in ("", "current"):
        raise ProfileError(source, "env.python_env", f"unknown value {kw['python_env']!r}",
                           "use \"current\" (activate the interpreter that submits) or leave it out and "
                           "activate in setup")
    kw["hf_home"] = _take(env, "hf_home", str, "", source, "env.")
    kw["scratch"] = _take(env, "scratch", str, "", source, "env.")
    if "\n" in kw["scratch"] or "%" in kw["scratch"]:
        raise ProfileError(source, "env.scratch", f"{kw['scratch']!r} has a newline or a %", "write a folder path, "
                           'e.g. "/scratch/$USER/fsdp-workshop"')
    kw["wandb_mode"] = _take(env, "wandb_mode", str, "disabled", source, "env.")
    if kw["wandb_mode"] not in ("disabled", "offline", "online"):
        raise ProfileError(source, "env.wandb_mode", f"unknown value {kw['wandb_mode']!r}",
                           "use disabled, offline or online")
    variables = dict(_take(env, "variables", dict, {}, source, "env."))
    for k, v in variables.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) or not isinstance(v, (str, int, float)):
            raise ProfileError(source, f"env.variables.{k}", "must be NAME = \"value\"",
                               "use a shell variable name and a string value")
    kw["env"] = {k: str(v) for k, v in variables.items()}
    _no_leftovers(env, source, "env.", "setup, python_env, hf_home, scratch, wandb_mode, variables")

    bw = dict(_take(data, "bandwidth", dict, {}, source, ""))
    if "min_busbw_gbps" in bw:
        raise ProfileError(source, "bandwidth.min_busbw_gbps", "was renamed: the unit is gigabytes per second "
                           "(GB/s), not gigabits", "write min_busbw_GBps = <the same number>")
    kw["min_busbw_GBps"] = _take(bw, "min_busbw_GBps", float, 0.0, source, "bandwidth.")
    kw["bandwidth_max_bytes"] = _take(bw, "max_bytes", str, "", source, "bandwidth.")
    _no_leftovers(bw, source, "bandwidth.", "min_busbw_GBps, max_bytes")

    course = dict(_take(data, "course", dict, {}, source, ""))
    kw["instructor_jobs"] = _take(course, "instructor_jobs", str, "", source, "course.")
    kw["instructor_min_gpus"] = _take(course, "instructor_min_gpus", int, 8, source, "course.")
    steps_run = _take(course, "instructor_steps", list, [], source, "course.")
    if not all(isinstance(x, str) and re.fullmatch(r"\w+", x) for x in steps_run):
        raise ProfileError(source, "course.instructor_steps", f"{steps_run!r} is not a list of step names",
                           'write e.g. instructor_steps = ["strategies"]')
    kw["instructor_steps"] = tuple(steps_run)
    _no_leftovers(course, source, "course.", "instructor_jobs, instructor_min_gpus, instructor_steps")
    run = dict(_take(data, "run", dict, {}, source, ""))
    run_steps = {k: run.pop(k) for k in [k for k, v in run.items() if isinstance(v, dict)]}
    kw["run"] = _coerce_run(run, source, "run.")
    kw["run_steps"] = {step: _coerce_run(dict(v), source, f"run.{step}.") for step, v in run_steps.items()}
    _no_leftovers(data, source, "", "name, description, backend, [slurm], [env], [bandwidth], [course], [run]")
    return Profile(**kw)


def _coerce_run(values: dict[str, Any], source: str, where: str) -> dict[str, Any]:
    out = {}
    for k, v in values.items():
        try:
            out[k] = coerce(k, v)
        except ConfigError as e:
            raise ProfileError(source, where + k, e.problem, e.fix) from None
    return out


def _check_time(value: str, source: str, where: str) -> None:
    if not _TIME.match(value):
        raise ProfileError(source, where, f"{value!r} is not a Slurm time", 'write "HH:MM:SS" or "D-HH:MM:SS"')


def time_seconds(value: str) -> int:
    """Slurm's time spellings (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH[:MM[:SS]]`) in seconds."""
    days, _, rest = value.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    if days:
        h, m, sec = (parts + [0, 0])[:3]
    else:
        m, sec, h = ((parts + [0])[:2] + [0]) if len(parts) < 3 else (parts[1], parts[2], parts[0])
    return int(days or 0) * 86400 + h * 3600 + m * 60 + sec


def mem_mb(value: str) -> int:
    """`40G` / `2048M` in MB ("" -> 0)."""
    return int(int(value[:-1]) * {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[value[-1]]) if value else 0


def _check_time_fits(value: str, part: Partition, source: str, where: str) -> None:
    if part.max_time and time_seconds(value) > time_seconds(part.max_time):
        raise ProfileError(source, where, f"{value} is longer than partition {part.name or part.key!r} allows "
                           f"({part.max_time}): sbatch would refuse the job", f"ask for at most {part.max_time}")


def _check_partition_fits(p: Partition, source: str, where: str) -> None:
    for key in ("mem_per_node", "max_time"):
        value = getattr(p, key)
        if value and not (_MEM if key == "mem_per_node" else _TIME).match(value):
            raise ProfileError(source, where + key, f"{value!r} is not a {'size' if key == 'mem_per_node' else 'time'}",
                               'write e.g. "500G"' if key == "mem_per_node" else 'write "HH:MM:SS"')
    if p.mem_per_node and p.mem_per_proc and mem_mb(p.mem_per_proc) * max(1, p.gpus_per_node) > mem_mb(p.mem_per_node):
        raise ProfileError(source, where + "mem_per_proc", f"{p.mem_per_proc} x {max(1, p.gpus_per_node)} processes "
                           f"is more than a node's {p.mem_per_node}: a full-node job would never start",
                           f"ask for at most {mem_mb(p.mem_per_node) // max(1, p.gpus_per_node) // 1024}G per process")


def scratch_folder(profile: Profile) -> Path | None:
    """The profile's scratch folder for the submitting user: `~` and `$VARS` expanded ($USER is the
    submitter, whether or not the shell exported it); None when the profile names none."""
    if not profile.scratch:
        return None
    import getpass

    env = {"USER": getpass.getuser(), **os.environ}

    def expand(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in env:
            raise ProfileError(profile.source, "env.scratch", f"{profile.scratch!r} names ${name}, which is not set here",
                               "use variables every user has ($USER, $HOME), or write the path out")
        return env[name]
    return Path(re.sub(r"\$\{(\w+)\}|\$(\w+)", expand, profile.scratch)).expanduser()


def current_env_activation() -> list[str]:
    """Shell lines that put this interpreter first on PATH (its venv, if it runs in one)."""
    import shlex
    if sys.prefix != sys.base_prefix and (Path(sys.prefix) / "bin" / "activate").is_file():
        return [f"source {shlex.quote(str(Path(sys.prefix) / 'bin' / 'activate'))}"]
    return [f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:\"$PATH\""]
