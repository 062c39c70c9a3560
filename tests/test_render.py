"""The batch scripts: one template family renders every step on every site, and reads like an
admin wrote it; nothing a user types can break out of its quotes."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from workshop.training.config import ConfigError
from workshop.slurm.profiles import TEMPLATES_DIR, ProfileError, default_name, load_profile, parse_profile
from workshop.slurm.render import render, shell_value
from workshop.slurm.steps import STEPS, step_config

PROFILES = ("local", "ci", "example-hpc")
HOSTILE = "x'; rm -rf ~ #"


def rendered(step: str, profile: str, tmp_path: Path, name: str | None = None, **overrides) -> str:
    prof = load_profile(profile)
    cfg = step_config(step, prof, overrides)
    return render(step, cfg, prof, tmp_path / "jobs" / step, name)


def bash_syntax_ok(script: str, tmp_path: Path) -> None:
    path = tmp_path / "check.sh"
    path.write_text(script)
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("step", list(STEPS))
def test_every_step_renders_on_every_site_as_valid_bash(step, profile, tmp_path):
    prof = load_profile(profile)
    cfg = step_config(step, prof)
    script = render(step, cfg, prof, tmp_path / "job")
    bash_syntax_ok(script, tmp_path)
    assert script.startswith("#!/bin/bash\n")
    assert "set -euo pipefail" in script
    assert f"#SBATCH --nodes={cfg.nodes}" in script
    assert "#SBATCH --ntasks-per-node=1" in script
    assert f"#SBATCH --output={tmp_path / 'job'}/slurm-%j.out" in script
    assert "export OMP_NUM_THREADS=" in script
    assert 'echo "[job] id ${SLURM_JOB_ID}' in script
    program = {"bandwidth": "-m workshop.comm.bandwidth",
               "preflight": f"-m workshop.slurm.node_check --config {tmp_path / 'job' / 'config.json'} --folder jobs={tmp_path}"
               }.get(step, f"-m workshop.training.train --config {tmp_path / 'job' / 'config.json'}")
    assert program in script
    # every block has a comment line that says what it is for
    for block in ("# Environment", "# Caches", "# Where and when", "# Launch"):
        assert block in script


def test_multi_node_script_runs_one_torchrun_per_node_meeting_on_the_first_host(tmp_path):
    script = rendered("multi_node", "ci", tmp_path, nodes=2, procs_per_node=2)
    assert "#SBATCH --nodes=2" in script
    assert "#SBATCH --gpus-per-node=2" in script
    assert 'nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))' in script and 'head_node=${nodes[0]}' in script
    launch = script[script.index("srun "):]
    assert re.search(r"srun [^\n]*--ntasks-per-node=1", launch)
    assert '--nnodes="$SLURM_NNODES" --nproc-per-node=2' in launch
    # the first node's address as Slurm reaches it (NodeAddr), its torchrun the store's host
    assert """head_addr=$(scontrol show node "$head_node" | grep -oE 'NodeAddr=[^ ]+' | cut -d= -f2)""" in script
    assert 'rdzv_endpoint=${head_addr:-$head_node}:${rdzv_port}' in script
    assert "export WORKSHOP_RDZV_HOST_FIRST=1" in script and 'is_host=$((SLURM_NODEID == 0))' in launch
    assert '--rdzv-backend=c10d --rdzv-endpoint="${rdzv_endpoint}" --rdzv-id="$SLURM_JOB_ID" \\' in launch
    assert "--standalone" not in script and "conf=;" in launch          # no rendezvous timeout asked for


def test_a_configured_rendezvous_endpoint_and_timeout_reach_torchrun(tmp_path):
    """Notebook 05's failed job: the config's endpoint replaces the job's first node, its timeout torchrun's 60 s."""
    script = rendered("multi_node", "ci", tmp_path, nodes=2, procs_per_node=1,
                      rdzv_endpoint="head-node.invalid:29400", rdzv_timeout_s=5)
    assert (script.index("rdzv_endpoint=head-node.invalid:29400; WORKSHOP_RDZV_HOST_FIRST=0")
            > script.index("rdzv_endpoint=${head_addr:-$head_node}"))     # torch finds which node hosts it
    assert "conf=read_timeout=5;" in script
    with pytest.raises(ConfigError, match="rdzv_endpoint"):
        rendered("multi_node", "ci", tmp_path, nodes=2, rdzv_endpoint="head-node; rm -rf ~")


def test_single_node_script_needs_no_srun(tmp_path):
    script = rendered("multi_gpu", "ci", tmp_path)
    assert "srun" not in script and "scontrol" not in script
    assert "torchrun --standalone --nnodes=1 --nproc-per-node=2" in script


def test_one_process_script_needs_no_launcher(tmp_path):
    for step in ("baseline", "fsdp_1gpu"):
        script = rendered(step, "ci", tmp_path)
        assert not re.search(r"^\s*(torchrun|srun) ", script, re.M)
        assert re.search(r"^python -m workshop\.training\.train --config \S+config\.json$", script, re.M), script
    # the bandwidth self-test of one process too: plain python as rank 0 of a world of one; of two, torchrun
    one = rendered("bandwidth", "local", tmp_path, procs_per_node=1, sharding="none")
    assert not re.search(r"^\s*(torchrun|srun) ", one, re.M)
    assert re.search(r"^python -m workshop\.comm\.bandwidth --min-busbw 0 --one-process$", one, re.M), one
    two = rendered("bandwidth", "local", tmp_path)
    assert "torchrun --standalone --nnodes=1 --nproc-per-node=2" in two and "--one-process" not in two


def test_example_site_header_has_its_partition_account_gpus_and_environment(tmp_path):
    script = rendered("multi_gpu", "example-hpc", tmp_path)
    header = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    text = "\n".join(header)
    assert "--partition=gpu_a100" in text          # [slurm.steps.multi_gpu] partition = "a100"
    assert "--account=CHANGE-ME-account" in text
    assert "--gpus-per-node=a100:8" in text
    assert "--cpus-per-task=64" in text
    assert "--mem=480G" in text
    assert "--reservation" not in text and "--constraint" not in text   # empty in the profile: left out
    assert "module load anaconda3" in script and "conda activate /shared/fsdp-workshop/bloom_env" in script
    assert "export HF_HOME=/shared/fsdp-workshop/hf_home" in script
    assert "export WANDB_MODE=offline" in script
    baseline = rendered("baseline", "example-hpc", tmp_path)
    assert "--partition=gpu_v100" in baseline and "--gpus-per-node=v100:1" in baseline


def test_gpu_count_changes_numbers_not_templates(tmp_path):
    templates = sorted(p.name for p in TEMPLATES_DIR.iterdir())
    assert templates == ["job.sh", "launch-accelerate-nodes.sh", "launch-accelerate.sh", "launch-node.sh", "launch-nodes.sh",
                         "launch-process.sh", "rendezvous.sh"]
    two = rendered("multi_gpu", "example-hpc", tmp_path, procs_per_node=2)
    four = rendered("multi_gpu", "example-hpc", tmp_path, procs_per_node=4)
    differing = [(a, b) for a, b in zip(two.splitlines(), four.splitlines()) if a != b]
    assert len(two.splitlines()) == len(four.splitlines())
    # the only differences: GPU count, cores, memory, and the hash-free shape line
    assert all(re.sub(r"\d+", "N", a) == re.sub(r"\d+", "N", b) for a, b in differing), differing


def test_hostile_job_name_and_values_stay_inert_when_the_script_runs(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "canary").write_text("still here")
    jobs = tmp_path / "jobs dir" / "it's"
    prof = load_profile("local")
    cfg = step_config("baseline", prof, {"model": "$(touch pwned1)'; touch pwned2; '"})
    job_dir = jobs / "baseline"
    job_dir.mkdir(parents=True)
    script = render("baseline", cfg, prof, job_dir, HOSTILE + "\n touch pwned3")
    header = [line for line in script.splitlines() if line.startswith("#SBATCH --job-name")]
    assert header == ["#SBATCH --job-name=x___rm_-rf______touch_pwned3"]
    (job_dir / "job.sh").write_text(script)
    bash_syntax_ok(script, tmp_path)
    # run it for real, with the launcher (python: one process) replaced by a shell function that records its arguments
    runner = 'python() { printf "%s\\n" "$@" > "$ARGV_OUT"; }; export -f python; bash "$1"'
    env = {**os.environ, "HOME": str(home), "ARGV_OUT": str(tmp_path / "argv"), "SLURM_JOB_ID": "7",
           "SLURM_JOB_NAME": HOSTILE, "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "n1"}
    proc = subprocess.run(["bash", "-c", runner, "runner", str(job_dir / "job.sh")], cwd=job_dir, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (home / "canary").read_text() == "still here"
    assert not any((job_dir / f"pwned{i}").exists() or (tmp_path / f"pwned{i}").exists() for i in (1, 2, 3))
    assert f"name {HOSTILE} nodes 1" in proc.stdout           # printed, not executed
    assert "model=$(touch pwned1)'; touch pwned2; '" in proc.stdout
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[-1] == str(job_dir / "config.json")            # the path with a space and a quote arrives whole


def test_shell_value_quotes_everything_but_variables():
    assert shell_value("/scratch/$USER/hf home") == "/scratch/\"${USER}\"'/hf home'"
    out = subprocess.run(["bash", "-c", "echo " + shell_value("$HOME/a b'c;$(x)")], capture_output=True,
                         text=True, env={"HOME": "/h", "PATH": os.environ["PATH"]}).stdout
    assert out == "/h/a b'c;$(x)\n"


def test_profile_errors_name_the_field_and_the_fix():
    with pytest.raises(ProfileError, match=r"slurm\.partitions\.v100\.mem_per_proc.*Fix: .*40G"):
        parse_profile({"slurm": {"partitions": {"v100": {"mem_per_proc": "lots"}}}}, "t.toml", "t")
    with pytest.raises(ProfileError, match=r"field 'slurm\.partion'.*not a profile field"):
        parse_profile({"slurm": {"partion": "x"}}, "t.toml", "t")
    with pytest.raises(ProfileError, match=r"run\.batch_size"):
        parse_profile({"run": {"batch_size": "many"}}, "t.toml", "t")
    with pytest.raises(ProfileError, match=r"slurm\.steps\.multi_node\.partition.*use one of default"):
        parse_profile({"slurm": {"steps": {"multi_node": {"partition": "h100"}}}}, "t.toml", "t")
    with pytest.raises(ProfileError, match="no profile file"):
        load_profile("no-such-site")


def test_profile_choice_local_without_slurm_and_explicit_with_it(tmp_path):
    assert default_name({"PATH": str(tmp_path)}) == "local"
    fake = tmp_path / "sbatch"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    with pytest.raises(ProfileError, match="WORKSHOP_PROFILE"):
        default_name({"PATH": str(tmp_path)})
    assert default_name({"PATH": str(tmp_path), "WORKSHOP_PROFILE": "ci"}) == "ci"


def test_site_limits_are_checked_before_anything_is_submitted(tmp_path):
    prof = load_profile("example-hpc")
    cfg = step_config("strategies", prof, {"procs_per_node": 8})
    with pytest.raises(ConfigError, match="procs_per_node.*gpu_v100.*4 GPUs"):
        render("strategies", cfg, prof, tmp_path)


def test_nccl_jobs_dump_the_flight_recorder_into_the_job_folder_on_a_timeout(tmp_path):
    """Issue #35: a GPU job's script switches on the flight recorder's dump on a collective timeout, with
    a buffer and one file per rank in the job folder (where `workshop diagnose` looks); a CPU job does not."""
    import subprocess

    script = rendered("multi_gpu", "example-hpc", tmp_path)
    folder = tmp_path.resolve() / "jobs" / "multi_gpu" / "flight_recorder"
    assert "export TORCH_NCCL_DUMP_ON_TIMEOUT=1" in script and "export TORCH_FR_BUFFER_SIZE=" in script
    line = next(ln for ln in script.splitlines() if ln.startswith("export TORCH_NCCL_DEBUG_INFO_TEMP_FILE="))
    exports = "\n".join(ln for ln in script.splitlines() if "TORCH_" in ln or ln.startswith("mkdir -p") and "flight" in ln)
    out = subprocess.run(["bash", "-c", exports + '\necho "$TORCH_NCCL_DEBUG_INFO_TEMP_FILE $TORCH_FR_BUFFER_SIZE"'],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [f"{folder}/rank_", "4096"] and folder.is_dir(), (line, out)
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT" not in rendered("multi_gpu", "local", tmp_path)
