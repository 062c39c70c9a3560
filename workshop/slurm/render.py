"""Render a step's batch script from the one template family in `slurm/templates/`.

`job.sh` is the only full script; `launch-process.sh` / `launch-node.sh` / `launch-nodes.sh` are the
launch block for one training process (plain python), one node (torchrun) or several (srun + torchrun),
`launch-accelerate.sh` / `launch-accelerate-nodes.sh` the same with `accelerate launch` (a config's
`launcher = "accelerate"`), and `rendezvous.sh` the multi-node jobs' meeting point. Placeholders are `@{name}` (string.Template with `@`, so bash's `$` stays
readable). Every value a user can influence is quoted here with `shlex.quote`; only the profile's
`setup` lines (written by the site's admin) go in verbatim.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from string import Template

from workshop.training.accelerate_yaml import FILE as ACCELERATE_FILE
from workshop.training.config import ConfigError, RunConfig
from workshop.slurm.profiles import TEMPLATES_DIR, Profile, current_env_activation, scratch_folder, time_seconds
from workshop.slurm.records import CHECKPOINT_EXIT
from workshop.slurm.steps import check_fits, get_step

_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")
_SBATCH_SAFE = re.compile(r"[A-Za-z0-9_./+:=@,%-]*")


class _Template(Template):
    delimiter = "@"


def template(name: str) -> _Template:
    return _Template((TEMPLATES_DIR / name).read_text())


def shell_value(text: str) -> str:
    """Quote `text` for bash, keeping `$VAR` / `${VAR}` expandable (for paths like /scratch/$USER)."""
    out, pos = [], 0
    for m in _VAR.finditer(text):
        if m.start() > pos:
            out.append(shlex.quote(text[pos:m.start()]))
        out.append(f'"${{{m.group(1)}}}"')
        pos = m.end()
    if pos < len(text) or not out:
        out.append(shlex.quote(text[pos:]))
    return "".join(out)


def sbatch_name(text: str) -> str:
    """A job name Slurm and squeue show as-is: anything but [A-Za-z0-9._-] becomes '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:64] or "job"


def sbatch_path(path: Path, pattern: str = "", field: str = "jobs_dir") -> str:
    """A path for an #SBATCH line, which sbatch parses without a shell: refuse what it cannot take."""
    text = str(path)
    if "%" in text or "\n" in text or '"' in text:
        raise ConfigError(field, f"{text!r} contains %, a quote or a newline, which Slurm reads as a "
                          "filename pattern or cannot quote", "choose a folder without them")
    text += pattern
    return text if _SBATCH_SAFE.fullmatch(text) else f'"{text}"'


def collective_timeout_for(time_limit_s: int) -> int:
    """A job's collective timeout: a quarter of its time limit, between 1 and 30 minutes. Long enough for
    what ranks legitimately wait on each other for (a slow rank loading the model from shared storage,
    a checkpoint written to it, an evaluation), and short enough that a hung collective fails the job
    with a diagnosis while most of its time is left, instead of holding the GPUs until the limit."""
    return max(60, min(1800, time_limit_s // 4))


def _mem_times(mem: str, n: int) -> str:
    return f"{int(mem[:-1]) * n}{mem[-1]}"


def sbatch_lines(step: str, config: RunConfig, profile: Profile, job_dir: Path, job_name: str) -> list[str]:
    part = profile.partition_for(step)
    procs = config.procs_per_node
    lines = [f"--job-name={sbatch_name(job_name)}"]
    for opt, value in (("partition", part.name), ("account", profile.account), ("qos", profile.qos),
                       ("reservation", profile.reservation), ("constraint", profile.constraint)):
        if value:
            lines.append(f"--{opt}={value}")
    lines += [f"--nodes={config.nodes}", "--ntasks-per-node=1"]
    if part.gpus_per_node and profile.gpu_request != "none":
        typed = f"{part.gpu_type}:{procs}" if part.gpu_type else str(procs)
        lines.append(f"--gpus-per-node={typed}" if profile.gpu_request == "gpus-per-node" else f"--gres=gpu:{typed}")
    lines.append(f"--cpus-per-task={procs * part.cpus_per_proc}")
    if part.mem_per_proc:
        lines.append(f"--mem={_mem_times(part.mem_per_proc, procs)}")
    lines.append(f"--time={profile.time_for(step)}")
    lines.append(f"--chdir={sbatch_path(job_dir)}")
    lines.append(f"--output={sbatch_path(job_dir, '/slurm-%j.out')}")
    if profile.signal_lead_s > 0:
        lines.append(f"--signal=B:USR1@{profile.signal_lead_s}")
    if get_step(step).program == "bandwidth" and part.gpus_per_node and profile.bandwidth_exclusive:
        lines.append("--exclusive")
    width = max(len(x.split("=")[0]) for x in lines)
    launcher = "accelerate launch" if uses_accelerate(step, config) else "torchrun"
    comments = {"--ntasks-per-node": f"one {launcher} per node; it starts the processes",
                "--cpus-per-task": f"{part.cpus_per_proc} core(s) per process",
                "--gpus-per-node": part.gpu_name, "--gres": part.gpu_name,
                "--exclusive": "whole nodes: nothing else shares the links the gate measures"}
    out = []
    for line in lines:
        key = line.split("=")[0]
        note = comments.get(key, "")
        out.append(f"#SBATCH {line:<{width + 24}} # {note}".rstrip(" #") if note else f"#SBATCH {line}")
    return out


def nccl_exports(profile: Profile, partition_key: str | None = None) -> list[str]:
    """The site's fabric ([nccl] of the profile, and the partition's own [nccl.partitions.<key>]): NCCL's
    interface, HCAs, network plugin and its variables."""
    variables, plugin_path = profile.nccl_for(partition_key)
    out = [f"export {k}={shell_value(v)}" for k, v in variables.items()]
    if plugin_path:      # after the CUDA paths were dropped: the plugin's folder comes first
        out.append(f'export LD_LIBRARY_PATH={shell_value(plugin_path)}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"'
                   "   # the NCCL network plugin's libnccl-net*.so")
    return out


def program(step: str, config: RunConfig, profile: Profile, config_path: Path) -> str:
    if get_step(step).program == "preflight":     # workshop preflight: the node's facts, free disk where jobs write
        # the jobs folder, and the profile's scratch folder where it names one, expanded for the submitting
        # user as the jobs' checkpoint_dir is (a batch script's environment need not carry $USER)
        scratch = scratch_folder(profile)
        folders = {"jobs": str(config_path.parent.parent), "scratch": str(scratch) if scratch else ""}
        return " ".join(["-m workshop.slurm.node_check --config", shlex.quote(str(config_path)),
                         *(f"--folder {shlex.quote(f'{k}={v}')}" for k, v in folders.items() if v)])
    if get_step(step).program == "bandwidth":
        args = ["-m", "workshop.comm.bandwidth", "--min-busbw", f"{profile.min_busbw_GBps:g}"]
        if profile.bandwidth_max_bytes:
            args += ["-e", profile.bandwidth_max_bytes]
        if config.world_size == 1:      # launch-process.sh: plain python, rank 0 of a world of one
            args.append("--one-process")
        return " ".join(shlex.quote(a) for a in args)
    return f"-m workshop.training.train --config {shlex.quote(str(config_path))}"


def uses_accelerate(step: str, config: RunConfig) -> bool:
    """Whether the job starts with `accelerate launch`: its config asks for it, and it is no preflight job
    (that one checks a node as the course's jobs find it and trains nothing: one plain process)."""
    return config.launcher == "accelerate" and get_step(step).program != "preflight"


def launch_block(step: str, config: RunConfig, profile: Profile, job_dir: Path) -> str:
    """The lines that start the processes: plain python (one process), torchrun (one node), srun + torchrun
    (several), or `accelerate launch` with the job's accelerate config (`launcher = "accelerate"`,
    `uses_accelerate`)."""
    accelerate = uses_accelerate(step, config)
    if accelerate:
        name = "launch-accelerate-nodes.sh" if config.nodes > 1 else "launch-accelerate.sh"
    else:
        name = ("launch-nodes.sh" if config.nodes > 1 else
                "launch-process.sh" if config.procs_per_node == 1 and get_step(step).program in ("train", "preflight",
                                                                                                   "bandwidth") else
                "launch-node.sh")
    rendezvous = template("rendezvous.sh").substitute(
        rdzv_override=(f"rdzv_endpoint={shlex.quote(config.rdzv_endpoint)}; WORKSHOP_RDZV_HOST_FIRST=0   "
                       "# the config's rdzv_endpoint: torch finds the node that hosts it" if config.rdzv_endpoint
                       else "")).rstrip()
    # torchrun's c10d rendezvous reads read_timeout (its conf, to which launch-nodes.sh adds is_host);
    # accelerate's static one (node 0 hosts it) reads timeout, passed as accelerate's own flag
    if accelerate:
        rdzv_conf = f"--rdzv-conf=timeout={config.rdzv_timeout_s} " if config.rdzv_timeout_s else ""
    else:
        rdzv_conf = f"read_timeout={config.rdzv_timeout_s}" if config.rdzv_timeout_s else ""
    return template(name).substitute(
        procs=config.procs_per_node, program=program(step, config, profile, job_dir / "config.json"),
        accelerate_yaml=shlex.quote(str(job_dir / ACCELERATE_FILE)), rendezvous=rendezvous,
        rdzv_conf=rdzv_conf).rstrip()


FLIGHT_RECORDER_DIR = "flight_recorder"   # in the job folder: one file per rank after a collective timeout


def flight_recorder_exports(job_dir: Path) -> list[str]:
    """NCCL runs: PyTorch's flight recorder keeps the last collectives of every rank (a ring buffer) and
    dumps them when a collective times out, one file per rank in the job folder, which `workshop diagnose`
    hands to PyTorch's analyser (torchfrtrace) to name the first mismatched collective and the missing
    ranks."""
    folder = shell_value(str(Path(job_dir) / FLIGHT_RECORDER_DIR))
    return ["export TORCH_NCCL_DUMP_ON_TIMEOUT=1   # a collective timeout dumps the flight recorder (below)",
            "export TORCH_FR_BUFFER_SIZE=${TORCH_FR_BUFFER_SIZE:-4096}   # collectives kept per rank",
            f"mkdir -p {folder}",
            f"export TORCH_NCCL_DEBUG_INFO_TEMP_FILE={folder}/rank_   # one dump per rank: rank_<N>"]


def render(step: str, config: RunConfig, profile: Profile, job_dir: Path, job_name: str | None = None) -> str:
    """The batch script for `step` with `config` on `profile`, writing into `job_dir`."""
    info = get_step(step)
    config.validate()
    check_fits(step, config, profile)
    job_dir = Path(job_dir).resolve()
    job_name = job_name or f"workshop-{step}"
    part = profile.partition_for(step)
    setup = list(profile.setup)
    if profile.python_env == "current":
        setup += current_env_activation()
    exports = [f"export HF_HOME={shell_value(profile.hf_home)}"] if profile.hf_home else []
    # compute nodes have no internet: models and data come from the cache filled on the login node
    exports += ["export HF_HUB_OFFLINE=1", "export HF_DATASETS_OFFLINE=1"]
    exports.append(f"export WANDB_MODE={shlex.quote(profile.wandb_mode)}")
    exports.append(f"export WANDB_DIR={shlex.quote(str(job_dir))}")
    exports += [f"export {k}={shell_value(v)}" for k, v in profile.env.items()]
    exports += nccl_exports(profile, part.key)
    if info.program == "bandwidth":
        exports.append("export NCCL_DEBUG=INFO   # the gate's log keeps NCCL's transport lines (P2P, SHM, NET/IB...)")
    elif part.gpus_per_node:
        exports += flight_recorder_exports(job_dir)
    launch = launch_block(step, config, profile, job_dir)
    limit_s = time_seconds(profile.time_for(step))
    if config.collective_timeout_s >= limit_s:
        raise ConfigError("collective_timeout_s", f"{config.collective_timeout_s} s is not shorter than the job's "
                          f"time limit ({profile.time_for(step)}): a hung collective would hold the GPUs until Slurm "
                          "ends the job, without a diagnosis", f"use less than {limit_s // 2} s, or 0 for a quarter "
                          "of the time limit")
    gpus = f" x {part.gpu_name or 'GPU'}" if part.gpus_per_node else " (CPU processes)"
    shape = (f"{config.nodes} node(s) x {config.procs_per_node} process(es){gpus}, "
             f"sharding={config.sharding}, model={config.model}")
    return template("job.sh").substitute(
        title=f"{info.title} (job {sbatch_name(job_name)})",
        profile=profile.name,
        sbatch="\n".join(sbatch_lines(step, config, profile, job_dir, job_name)),
        setup="\n".join(setup) or ":  # nothing to activate",
        exports="\n".join(exports),
        omp_threads=part.cpus_per_proc,
        collective_timeout_s=collective_timeout_for(limit_s),
        step_line=shlex.quote(f"[job] step {step}: {shape}"),
        launch=launch,
        checkpoint_exit=CHECKPOINT_EXIT,
    )
