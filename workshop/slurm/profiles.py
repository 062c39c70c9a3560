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

import dataclasses
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

# slurm/ at the repository root (templates/, profiles/, ood/), readable by the site's admins, travels with the
# package as workshop/slurm/files: a link to ../../slurm in the checkout (an editable install reads the
# checkout's slurm/ itself), a copy in the wheel the student's environment installs (issue 48: no checkout
# there). WORKSHOP_SLURM_FILES points elsewhere (a site's own folder of the same shape).
SLURM_DIR = Path(os.environ.get("WORKSHOP_SLURM_FILES") or (Path(__file__).resolve().parent / "files").resolve())
PROFILES_DIR = SLURM_DIR / "profiles"
TEMPLATES_DIR = SLURM_DIR / "templates"

BACKENDS = ("slurm", "local")
# [nccl] variables: NCCL's own and those of the network plugins NCCL loads (aws-ofi-nccl and libfabric:
# FI_*, OFI_NCCL_*; nccl-rdma-sharp-plugins: UCX_*, SHARP_COLL_*). Anything else belongs in [env.variables].
NCCL_PREFIXES = ("NCCL_", "FI_", "OFI_NCCL_", "UCX_", "SHARP_COLL_")
_NCCL_LIST = re.compile(r"^\^?=?[A-Za-z0-9_.:-]+(,[A-Za-z0-9_.:-]+)*$")   # NCCL's list syntax: ^ excludes, = exact
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
    nodes: int = 0              # nodes in the partition, shared by the class (`sinfo -h -p NAME -o %D`); 0 = unknown
    gpu_mem: str = ""           # one GPU's memory ("32G", "80G": nvidia-smi's total); set, a job's dry run must
                                # fit it before submission (workshop.slurm.fit)


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
    # [slurm] jobs_per_user: the most jobs of one cell `lab.run_all` keeps in the queue at once (the rest follow as
    # those end), so a site's MaxSubmitJobsPerUser never rejects a cell's burst; 0 = no cap (all at once)
    jobs_per_user: int = 0
    step_slurm: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    setup: tuple[str, ...] = ()
    python_env: str = ""                          # "current": activate this interpreter's environment
    hf_home: str = ""
    scratch: str = ""                             # [env]: checkpoints go here, never into a student's folder
    wandb_mode: str = "disabled"
    env: Mapping[str, str] = field(default_factory=dict)
    min_busbw_GBps: float = 0.0                   # the gate: bus bandwidth at the largest message, GB/s
    bandwidth_max_bytes: str = ""
    bandwidth_exclusive: bool = True              # [bandwidth] exclusive: the gate asks whole nodes (--exclusive)
    instructor_jobs: str = ""                     # [course]: the instructor's shared job folder (workshop.site.budget)
    instructor_min_gpus: int = 8                  # [course]: jobs this large (or of 2+ nodes) are the instructor's
    nccl: Mapping[str, str] = field(default_factory=dict)   # [nccl]: NCCL_* and network-plugin variables, rendered
    nccl_plugin_path: str = ""                    # [nccl] plugin_path: the plugin's folder, first on LD_LIBRARY_PATH
    # [nccl.partitions.<key>]: a partition's own fabric (V100 and A100 nodes on different networks), field by field
    # over [nccl]: {key: {"nccl": {...}, "nccl_plugin_path": "..."}}
    nccl_partitions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    session_partition: str = ""                   # [ood] partition: key of the CPU partition JupyterLab sessions use
    session_cpus: int = 2                         # [ood] cpus: a notebook kernel's cores
    session_mem: str = "4G"                       # [ood] mem: a notebook kernel's memory
    session_reservation: str = ""                 # [ood] reservation: one that holds the session partition's nodes
    session_exchange: bool = False                # [ood] exchange: students fetch and submit through nbgrader's exchange
    watch_kernels: int = 0                        # [slurm.watch] kernels: notebook kernels watching jobs at once
    watch_sacct_per_s: float = 1.0                # [slurm.watch] sacct_per_s: sacct calls/s the site allows them all
    instructor_steps: tuple[str, ...] = ()        # [course]: steps whose every job is the instructor's (e.g. strategies)
    agenda: Mapping[str, int] = field(default_factory=dict)   # [agenda]: minutes of the day per notebook (the schedule)
    reading_min: tuple[int, int] = (5, 15)        # [agenda] reading_min: a student's reading before a notebook's first job
    # [agenda] background_nodes: {partition key: nodes other users' jobs hold through the class}, the schedule's
    # and the replay's share of the partition that is not the class's
    background_nodes: Mapping[str, int] = field(default_factory=dict)
    run: Mapping[str, Any] = field(default_factory=dict)
    run_steps: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    digest: str = ""

    def partition_for(self, step: str) -> Partition:
        """The partition a step runs on (`[slurm.steps.<step>] partition`, else the default)."""
        key = self.step_slurm.get(step, {}).get("partition", self.partition)
        return self.partitions[key]

    def nccl_for(self, partition_key: str | None = None) -> tuple[dict[str, str], str]:
        """The NCCL variables and plugin folder of jobs on a partition: [nccl], then its [nccl.partitions.<key>]."""
        own = self.nccl_partitions.get(partition_key or "", {})
        return {**self.nccl, **own.get("nccl", {})}, own.get("nccl_plugin_path") or self.nccl_plugin_path

    def time_for(self, step: str) -> str:
        return self.step_slurm.get(step, {}).get("time", self.time)

    @property
    def sacct_interval_s(self) -> float:
        """Seconds between two Slurm queries of one kernel so that the class stays within the site's rate:
        `kernels / sacct_per_s` ([slurm.watch]); 0 when the profile names no class size (the helper's floor)."""
        return self.watch_kernels / self.watch_sacct_per_s if self.watch_kernels else 0.0

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


_FIELD_TYPES = {"str": str, "int": int, "float": float, "bool": bool}


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


def _parse_partition(key: str, raw: Any, source: str) -> Partition:
    """One [slurm.partitions.KEY] table: its fields are Partition's (the dataclass is the schema), then checked."""
    where = f"slurm.partitions.{key}."
    if not isinstance(raw, dict):
        raise ProfileError(source, where[:-1], "must be a table", f"write [slurm.partitions.{key}]")
    raw = dict(raw)
    fields = [f for f in dataclasses.fields(Partition) if f.name != "key"]
    p = Partition(key=key, **{f.name: _take(raw, f.name, _FIELD_TYPES[f.type], f.default, source, where)
                              for f in fields})
    _no_leftovers(raw, source, where, ", ".join(f.name for f in fields))
    if p.nodes < 0 or (p.nodes and p.max_nodes > p.nodes):
        raise ProfileError(source, where + "nodes", f"nodes = {p.nodes}, max_nodes = {p.max_nodes}: a job cannot "
                           "have more nodes than the partition", "write the partition's node count "
                           f"(`sinfo -h -p {p.name or '<partition>'} -o %D`), at least max_nodes")
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
    return p


def _parse_slurm(data: dict[str, Any], source: str) -> dict[str, Any]:
    """[slurm]: the partitions, the defaults every job takes, per-step overrides and the watch's pace."""
    kw: dict[str, Any] = {}
    slurm = dict(_take(data, "slurm", dict, {}, source, ""))
    parts_raw = dict(_take(slurm, "partitions", dict, {}, source, "slurm."))
    if not parts_raw:
        parts_raw = {"default": {}}
    partitions = {key: _parse_partition(key, raw, source) for key, raw in parts_raw.items()}
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
    kw["jobs_per_user"] = _take(slurm, "jobs_per_user", int, 0, source, "slurm.")
    if kw["jobs_per_user"] < 0:
        raise ProfileError(source, "slurm.jobs_per_user", f"{kw['jobs_per_user']} is negative", "write 0 (no cap) or "
                           "the jobs a student may have queued at once (the QOS's MaxSubmitJobsPerUser, less one for "
                           "the JupyterLab session)")
    steps = dict(_take(slurm, "steps", dict, {}, source, "slurm."))
    watch = dict(_take(slurm, "watch", dict, {}, source, "slurm."))
    _no_leftovers(slurm, source, "slurm.", "partition, partitions, account, reservation, constraint, qos, time, "
                  "gpu_request, signal_lead_s, jobs_per_user, steps, watch")
    kw["watch_kernels"] = _take(watch, "kernels", int, 0, source, "slurm.watch.")
    kw["watch_sacct_per_s"] = _take(watch, "sacct_per_s", float, 1.0, source, "slurm.watch.")
    _no_leftovers(watch, source, "slurm.watch.", "kernels, sacct_per_s")
    if kw["watch_kernels"] < 0 or kw["watch_sacct_per_s"] <= 0:
        raise ProfileError(source, "slurm.watch", f"kernels = {kw['watch_kernels']}, sacct_per_s = "
                           f"{kw['watch_sacct_per_s']:g}: both must be positive", "write the class size (students "
                           "and instructors watching at once) and the sacct calls per second your site allows them")
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

    return kw


def _parse_env(data: dict[str, Any], source: str) -> dict[str, Any]:
    """[env]: what a job's script sets up before the training command."""
    kw: dict[str, Any] = {}
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

    return kw


def _parse_bandwidth(data: dict[str, Any], source: str) -> dict[str, Any]:
    """[bandwidth]: the gate a multi-node job passes first."""
    kw: dict[str, Any] = {}
    bw = dict(_take(data, "bandwidth", dict, {}, source, ""))
    if "min_busbw_gbps" in bw:
        raise ProfileError(source, "bandwidth.min_busbw_gbps", "was renamed: the unit is gigabytes per second "
                           "(GB/s), not gigabits", "write min_busbw_GBps = <the same number>")
    kw["min_busbw_GBps"] = _take(bw, "min_busbw_GBps", float, 0.0, source, "bandwidth.")
    kw["bandwidth_max_bytes"] = _take(bw, "max_bytes", str, "", source, "bandwidth.")
    kw["bandwidth_exclusive"] = _take(bw, "exclusive", bool, True, source, "bandwidth.")
    _no_leftovers(bw, source, "bandwidth.", "min_busbw_GBps, max_bytes, exclusive")

    return kw


def _parse_nccl_and_ood(data: dict[str, Any], partitions: dict[str, Partition], source: str) -> dict[str, Any]:
    """[nccl] (site-wide and per partition) and [ood]."""
    kw: dict[str, Any] = {}
    nccl = dict(_take(data, "nccl", dict, {}, source, ""))
    per_partition = dict(_take(nccl, "partitions", dict, {}, source, "nccl."))
    kw.update(_parse_nccl(nccl, source))
    kw["nccl_partitions"] = {}
    for key, raw in per_partition.items():
        if key not in partitions or not isinstance(raw, dict):
            raise ProfileError(source, f"nccl.partitions.{key}", "is not a table of a [slurm.partitions.*] key",
                               f"name one of {', '.join(partitions)}: [nccl.partitions.<key>] with socket_ifname, ib_hca, ...")
        kw["nccl_partitions"][key] = _parse_nccl(dict(raw), source, f"nccl.partitions.{key}.")
    kw.update(_parse_ood(dict(_take(data, "ood", dict, {}, source, "")), partitions, source))

    return kw


def _parse_course(data: dict[str, Any], partitions: dict[str, Partition], source: str) -> dict[str, Any]:
    """[course] (instructor-run mode), [agenda] (the day) and [run] (config defaults, per step)."""
    kw: dict[str, Any] = {}
    course = dict(_take(data, "course", dict, {}, source, ""))
    kw["instructor_jobs"] = _take(course, "instructor_jobs", str, "", source, "course.")
    kw["instructor_min_gpus"] = _take(course, "instructor_min_gpus", int, 8, source, "course.")
    steps_run = _take(course, "instructor_steps", list, [], source, "course.")
    if not all(isinstance(x, str) and re.fullmatch(r"\w+", x) for x in steps_run):
        raise ProfileError(source, "course.instructor_steps", f"{steps_run!r} is not a list of step names",
                           'write e.g. instructor_steps = ["strategies"]')
    kw["instructor_steps"] = tuple(steps_run)
    _no_leftovers(course, source, "course.", "instructor_jobs, instructor_min_gpus, instructor_steps")
    agenda = dict(_take(data, "agenda", dict, {}, source, ""))
    kw["reading_min"] = _parse_reading(agenda.pop("reading_min", READING_MIN), source)
    kw["background_nodes"] = _parse_background(agenda.pop("background_nodes", {}), partitions, source)
    kw["agenda"] = _parse_agenda(agenda, source)
    run = dict(_take(data, "run", dict, {}, source, ""))
    run_steps = {k: run.pop(k) for k in [k for k, v in run.items() if isinstance(v, dict)]}
    kw["run"] = _coerce_run(run, source, "run.")
    kw["run_steps"] = {step: _coerce_run(dict(v), source, f"run.{step}.") for step, v in run_steps.items()}
    return kw


def parse_profile(data: dict[str, Any], source: str, name: str, digest: str = "") -> Profile:
    """Validate a profile's TOML tables; every error names the field and what to write instead."""
    data = dict(data)
    kw: dict[str, Any] = {"name": _take(data, "name", str, name, source, ""), "source": source, "digest": digest}
    kw["description"] = _take(data, "description", str, "", source, "")
    kw["backend"] = _take(data, "backend", str, "slurm", source, "")
    if kw["backend"] not in BACKENDS:
        raise ProfileError(source, "backend", f"unknown backend {kw['backend']!r}", "use slurm or local")
    kw.update(_parse_slurm(data, source))
    kw.update(_parse_env(data, source))
    kw.update(_parse_bandwidth(data, source))
    kw.update(_parse_nccl_and_ood(data, kw["partitions"], source))
    kw.update(_parse_course(data, kw["partitions"], source))
    _no_leftovers(data, source, "", "name, description, backend, [slurm], [env], [nccl], [ood], [bandwidth], "
                  "[course], [agenda], [run]")
    profile = Profile(**kw)
    overlap = session_blocks_gate(profile)
    if overlap:
        raise ProfileError(source, "ood.partition", *overlap)
    return profile


# Notebook 05's bandwidth gate: `lab.run("bandwidth", nodes=2)`, whole nodes on a GPU partition (render.py)
GATE_NODES = 2


def gate_is_exclusive(profile: Profile) -> bool:
    """Whether the bandwidth gate asks Slurm for whole nodes: on a GPU partition, unless [bandwidth] exclusive
    = false (render.py writes --exclusive then)."""
    return profile.bandwidth_exclusive and bool(profile.partition_for("bandwidth").gpus_per_node)


def session_blocks_gate(profile: Profile, free_nodes: int | None = None) -> tuple[str, str] | None:
    """(problem, fix) when notebook 05's whole-node gate would wait as long as the student's own JupyterLab
    session lives; None when it will not.

    The session holds a core of one node; an --exclusive job cannot have that node, so a gate of GATE_NODES
    whole nodes needs that many nodes no session can take. From the profile alone that is known when the
    sessions' Slurm partition is the gate's (every node of it may hold a session; a session reservation
    keeps the sessions to its own nodes). `workshop preflight` passes `free_nodes`, the gate partition's
    nodes outside the session partition, from sinfo (partitions of other names may share nodes)."""
    if profile.backend != "slurm" or not profile.session_partition or not gate_is_exclusive(profile):
        return None
    gate = profile.partition_for("bandwidth")
    session = profile.partitions[profile.session_partition]
    if free_nodes is None:
        if session.name != gate.name or profile.session_reservation:
            return None
        where = f"JupyterLab sessions run on Slurm partition {gate.name!r}, the bandwidth gate's"
    elif free_nodes >= GATE_NODES:
        return None
    else:
        where = (f"the bandwidth gate's partition {gate.name!r} has {free_nodes} node(s) outside the sessions' "
                 f"partition {session.name!r}")
    return (f"{where}: notebook 05's gate asks {GATE_NODES} whole nodes (--exclusive), and a node that holds the "
            "student's own session is never whole, so the gate waits (PENDING, Resources) as long as the session lives",
            "give sessions a partition of their own ([ood] partition = a CPU partition's key), or nodes of their own "
            "([ood] reservation), or, where the site allows a gate to share its nodes, set [bandwidth] exclusive = false")


# A student reads a notebook's introduction and first cells before its first job: the fastest of the class after 5
# minutes, the slowest after 15 (a planning assumption, not a measurement; [agenda] reading_min states a site's own).
READING_MIN = (5, 15)


def _parse_reading(value: Any, source: str) -> tuple[int, int]:
    """[agenda] reading_min = [fastest, slowest]: minutes from a notebook's slot start to a student's first job."""
    if (not isinstance(value, (list, tuple)) or len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool)
                                                                          for v in value) or not 0 <= value[0] <= value[1]):
        raise ProfileError(source, "agenda.reading_min", f"{value!r} is not a spread of minutes",
                           "write the fastest and the slowest student's reading before a notebook's first job, "
                           "e.g. reading_min = [5, 15]")
    return int(value[0]), int(value[1])


def _parse_background(value: Any, partitions: Mapping[str, Partition], source: str) -> dict[str, int]:
    """[agenda] background_nodes = { v100 = 1 }: nodes of a partition that other users' jobs hold all day."""
    fix = "write the nodes other users hold per partition key, fewer than its nodes, e.g. background_nodes = { v100 = 1 }"
    if not isinstance(value, dict):
        raise ProfileError(source, "agenda.background_nodes", f"{value!r} is not a table", fix)
    for key, n in value.items():
        part = partitions.get(key)
        if part is None or not isinstance(n, int) or isinstance(n, bool) or n < 0 or (part.nodes and n >= part.nodes):
            raise ProfileError(source, f"agenda.background_nodes.{key}", f"{n!r} nodes of {key!r} is not a share "
                               "the class can work beside", fix)
    return dict(value)


def _parse_agenda(agenda: dict[str, Any], source: str) -> dict[str, int]:
    """[agenda]: the minutes the day gives each notebook (`01_baseline = 45`); the schedule
    (workshop.site.schedule) warns when the class's jobs of a notebook take longer than its slot."""
    out = {}
    for key, value in agenda.items():
        if not re.fullmatch(r"\d\d_\w+", key) or not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ProfileError(source, f"agenda.{key}", f"{value!r} is not a notebook's minutes",
                               "write the notebook's name and its slot in whole minutes, e.g. 03_sharding_strategies = 60")
        out[key] = value
    return out


def _parse_nccl(nccl: dict[str, Any], source: str, where: str = "nccl.") -> dict[str, Any]:
    """[nccl]: the site's fabric for NCCL, rendered into every training and bandwidth script.

    socket_ifname -> NCCL_SOCKET_IFNAME (bootstrap and socket transport), ib_hca -> NCCL_IB_HCA,
    net_plugin -> NCCL_NET_PLUGIN, plugin_path (the plugin's libnccl-net*.so) first on LD_LIBRARY_PATH,
    variables: any other NCCL_* or plugin variable (FI_*, OFI_NCCL_*, UCX_*, SHARP_COLL_*). `where` names the
    table in errors ([nccl], or a partition's [nccl.partitions.<key>])."""
    out: dict[str, str] = {}
    for key, var in (("socket_ifname", "NCCL_SOCKET_IFNAME"), ("ib_hca", "NCCL_IB_HCA")):
        value = _take(nccl, key, str, "", source, where)
        if value and not _NCCL_LIST.match(value):
            raise ProfileError(source, where + key, f"{value!r} is not a list NCCL reads",
                               f"write names separated by commas, as `{'ip -br link' if key == 'socket_ifname' else 'ibv_devinfo -l'}`"
                               " prints them (a leading ^ excludes, = matches exactly), e.g. \"ib0\" or \"mlx5_0,mlx5_1\"")
        if value:
            out[var] = value
    plugin = _take(nccl, "net_plugin", str, "", source, where)
    if plugin and not re.fullmatch(r"[A-Za-z0-9_.-]+", plugin):
        raise ProfileError(source, where + "net_plugin", f"{plugin!r} is not a plugin name",
                           'write the suffix of its libnccl-net-<name>.so, e.g. "ofi"')
    if plugin:
        out["NCCL_NET_PLUGIN"] = plugin
    plugin_path = _take(nccl, "plugin_path", str, "", source, where)
    if plugin_path and (not plugin_path.startswith(("/", "$")) or ":" in plugin_path or "\n" in plugin_path):
        raise ProfileError(source, where + "plugin_path", f"{plugin_path!r} is not one absolute folder",
                           "write the folder that holds the plugin's libnccl-net*.so, e.g. \"/opt/aws-ofi-nccl/lib\"")
    variables = dict(_take(nccl, "variables", dict, {}, source, where))
    _no_leftovers(nccl, source, where, "socket_ifname, ib_hca, net_plugin, plugin_path, variables")
    for k, v in variables.items():
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", k) or not k.startswith(NCCL_PREFIXES):
            raise ProfileError(source, f"{where}variables.{k}", f"is not a variable of NCCL or of a network plugin "
                               f"({', '.join(p + '*' for p in NCCL_PREFIXES)})",
                               "put other variables in [env.variables]")
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            raise ProfileError(source, f"{where}variables.{k}", "must be NAME = \"value\"", f'write {k} = "..."')
        if k in out:
            raise ProfileError(source, f"{where}variables.{k}", "is set by a field of its table already",
                               "set it once, in its field (socket_ifname, ib_hca or net_plugin)")
        out[k] = str(v)
    return {"nccl": out, "nccl_plugin_path": plugin_path}


def _parse_ood(ood: dict[str, Any], partitions: Mapping[str, Partition], source: str) -> dict[str, Any]:
    """[ood]: where Open OnDemand's JupyterLab sessions run. A session edits notebooks, submits jobs and
    plots their logs: it needs a kernel's cores and a few GB, on a CPU or interactive partition, never
    a GPU node (20 sessions there would hold the memory a full-node job needs)."""
    where = "ood."
    key = _take(ood, "partition", str, "", source, where)
    cpus = _take(ood, "cpus", int, 2, source, where)
    mem = _take(ood, "mem", str, "4G", source, where)
    reservation = _take(ood, "reservation", str, "", source, where)
    exchange = _take(ood, "exchange", bool, False, source, where)
    _no_leftovers(ood, source, where, "partition, cpus, mem, reservation, exchange")
    if not re.fullmatch(r"[A-Za-z0-9_.,-]*", reservation):
        raise ProfileError(source, where + "reservation", f"{reservation!r} is not a reservation name",
                           "use the name `scontrol show reservation` prints")
    if key and key not in partitions:
        raise ProfileError(source, where + "partition", f"{key!r} is not a [slurm.partitions.*] table",
                           f"add [slurm.partitions.{key}] (its Slurm name, gpus_per_node = 0, mem_per_node, max_time) "
                           f"or use one of {', '.join(partitions)}")
    if key and partitions[key].gpus_per_node:
        raise ProfileError(source, where + "partition", f"{key!r} is a GPU partition ({partitions[key].gpus_per_node} "
                           "GPUs per node): every JupyterLab session would hold a GPU node's cores and memory",
                           "name a CPU or interactive partition (a [slurm.partitions.*] table with gpus_per_node = 0)")
    if cpus < 1 or not _MEM.match(mem):
        raise ProfileError(source, where + ("cpus" if cpus < 1 else "mem"), f"cpus = {cpus}, mem = {mem!r}",
                           'write a notebook kernel\'s share, e.g. cpus = 2 and mem = "4G"')
    if key and partitions[key].mem_per_node and mem_mb(mem) > mem_mb(partitions[key].mem_per_node):
        raise ProfileError(source, where + "mem", f"{mem} is more than a node of {key!r} has "
                           f"({partitions[key].mem_per_node})", "a notebook kernel needs a few GB: write e.g. \"4G\"")
    return {"session_partition": key, "session_cpus": cpus, "session_mem": mem, "session_reservation": reservation,
            "session_exchange": exchange}


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
    for key in ("mem_per_node", "gpu_mem", "max_time"):
        value = getattr(p, key)
        if value and not (_TIME if key == "max_time" else _MEM).match(value):
            raise ProfileError(source, where + key, f"{value!r} is not a {'time' if key == 'max_time' else 'size'}",
                               'write "HH:MM:SS"' if key == "max_time" else 'write e.g. "80G"')
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
