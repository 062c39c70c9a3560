"""The seed's launcher too: `accelerate launch --config_file FILE`, FILE the FSDP YAML accelerate users write,
runs the same training script, applies what the YAML says, and reads back the same wrapping and losses as
its torchrun twin (real processes on gloo). The YAML of a config is accelerate's own input: accelerate's
code turns it into the environment the training process reads back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runs import BASE_FLAGS, RunCache, accelerate, clean_env
from workshop.training.accelerate_yaml import FILE, follow_launch, to_yaml
from workshop.training.config import ConfigError, load_config
from workshop.slurm.profiles import load_profile
from workshop.slurm.render import render
from workshop.slurm.steps import STEPS, step_config

ROOT = Path(__file__).resolve().parent.parent
# what a run applied, read back from the wrapped model: the twins must agree on all of it
APPLIED = ("world_size", "nodes", "sharding_applied", "wrapper", "reshard_after_forward", "offload_applied", "mesh",
           "fsdp_unit_names", "wrapped_classes", "blocks_wrapped", "other_units", "mp_param_dtype",
           "activation_checkpointing_applied", "params_local_per_rank", "local_shapes_per_rank", "global_batch_measured")


def launch_env(yaml_text: str, tmp_path: Path) -> dict[str, str]:
    """The environment `accelerate launch --config_file` gives its processes, built by accelerate's own code
    from the YAML (its launch parser, validation and launcher environment), without starting them."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env, prepare_simple_launcher_cmd_env

    path = tmp_path / FILE
    path.write_text(yaml_text)
    args = launch_command_parser().parse_args(["--config_file", str(path), "--main_process_port", "0", "-m",
                                               "workshop.training.train"])
    args, _, _ = _validate_launch_command(args)
    env = prepare_multi_gpu_env(args) if args.use_fsdp or args.multi_gpu else prepare_simple_launcher_cmd_env(args)[1]
    return {**env, "WORLD_SIZE": str(args.num_processes)}      # what torchrun adds for each process


def course_fields(cfg) -> dict:
    return {k: getattr(cfg, k) for k in ("sharding", "offload", "activation_checkpointing", "replicas", "precision",
                                         "launcher")}


CASES = {
    "baseline": dict(step="baseline"),
    "ddp": dict(step="strategies", sharding="ddp"),
    "shard_grad_op + offload": dict(step="strategies", sharding="shard_grad_op", offload=True),
    "activation checkpointing": dict(step="strategies", activation_checkpointing=True),
    "hybrid 2x2": dict(step="multi_node", nodes=2, procs_per_node=2, sharding="hybrid_shard", hybrid_replicas=2),
    "student's fsdp_config": dict(step="fsdp_1gpu", fsdp="full_shard auto_wrap offload",
                                  fsdp_config={"version": 2, "transformer_layer_cls_to_wrap": ["BloomBlock"]}),
    "bf16 on a GPU site": dict(step="multi_gpu", profile="example-hpc"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_accelerates_own_launch_of_the_yaml_asks_for_the_config(case: str, tmp_path: Path) -> None:
    """to_yaml(config), read by accelerate launch, reaches the training process as that config's settings:
    a launch that writes no setting of its own runs exactly them (and a job, which writes them all, agrees)."""
    spec = dict(CASES[case])
    profile = load_profile(spec.pop("profile", "local"))
    cfg = step_config(spec.pop("step"), profile, {**spec, "launcher": "accelerate"})
    env = launch_env(to_yaml(cfg), tmp_path)
    world = {"nodes": cfg.nodes, "procs_per_node": cfg.procs_per_node}       # what the launcher's world gives
    assert course_fields(follow_launch(load_config(), set(), env, world)) == course_fields(cfg)   # by hand: no settings
    job = follow_launch(cfg, set(cfg.to_dict()), env)                                         # a job: every field written
    assert job.to_dict() == cfg.to_dict()


def yaml_with(cfg, **changes) -> str:
    import yaml

    data = yaml.safe_load(to_yaml(cfg))
    for key, value in changes.items():
        section, _, name = key.rpartition(".")
        (data[section] if section else data)[name] = value
    return yaml.safe_dump(data)


@pytest.mark.parametrize("change, field", [
    ({"fsdp_config.fsdp_version": 1}, "fsdp_config.fsdp_version"),                           # FSDP1
    ({"fsdp_config.fsdp_sharding_strategy": "SHARD_GRAD_OP"}, "fsdp_config.fsdp_sharding_strategy"),  # ignored by v2
    ({"fsdp_config.fsdp_reshard_after_forward": False}, "fsdp_reshard_after_forward"),         # contradicts full_shard
    ({"fsdp_config.fsdp_transformer_layer_cls_to_wrap": "BloomAttention"}, "fsdp_transformer_layer_cls_to_wrap"),
    ({"fsdp_config.fsdp_cpu_ram_efficient_loading": True, "fsdp_config.fsdp_sync_module_states": True},
     "fsdp_cpu_ram_efficient_loading"),                                                        # the Trainer resets it
    ({"mixed_precision": "bf16"}, "mixed_precision"),
])
def test_a_yaml_the_run_would_not_honour_stops_it_naming_the_key(change: dict, field: str, tmp_path: Path) -> None:
    cfg = step_config("strategies", load_profile("local"), {"launcher": "accelerate"})
    env = launch_env(yaml_with(cfg, **change), tmp_path)
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")) as err:
        follow_launch(cfg, set(cfg.to_dict()), env)
    assert "accelerate config" in str(err.value) and "Fix:" in str(err.value)


def test_a_config_that_asks_for_accelerate_needs_accelerate_launch() -> None:
    cfg = load_config(overrides={"launcher": "accelerate"})
    with pytest.raises(ConfigError, match="launcher.*not started by accelerate launch"):
        follow_launch(cfg, {"launcher"}, clean_env())


def test_a_preflight_job_is_one_plain_process_whatever_the_launcher(tmp_path: Path) -> None:
    """Preflight checks a node and trains nothing: `launcher = "accelerate"` does not wrap it."""
    prof = load_profile("example-hpc")
    script = render("preflight", step_config("preflight", prof, {"launcher": "accelerate"}), prof, tmp_path / "job")
    assert "accelerate launch" not in script and "accelerate.yaml" not in script
    assert "-m workshop.slurm.node_check" in script


@pytest.mark.parametrize("profile", ["local", "ci", "example-hpc"])
@pytest.mark.parametrize("step", [s for s in STEPS if STEPS[s].program != "preflight"])
def test_every_step_renders_an_accelerate_launch_of_the_same_program(step: str, profile: str, tmp_path: Path) -> None:
    prof = load_profile(profile)
    cfg = step_config(step, prof, {"launcher": "accelerate"})
    script = render(step, cfg, prof, tmp_path / "job")
    twin = render(step, step_config(step, prof), prof, tmp_path / "job")
    (tmp_path / "job.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sh")]).returncode == 0
    yaml_path = tmp_path / "job" / FILE
    assert (f"accelerate launch --config_file {yaml_path}" if cfg.nodes == 1 else
            f"exec accelerate launch --config_file \"$0\"") in script and str(yaml_path) in script
    same = "-m workshop.comm.bandwidth" if step == "bandwidth" else f"-m workshop.training.train --config {tmp_path / 'job' / 'config.json'}"
    assert same in script and same in twin and "torchrun" not in script
    if cfg.nodes > 1:
        assert '--machine_rank="$SLURM_NODEID"' in script and "srun " in script


# ---------------------------------------------------------------------------------- real processes

def applied(summary: dict) -> dict:
    return {k: summary.get(k) for k in APPLIED}


@pytest.mark.slow
def test_the_yaml_alone_decides_the_strategy_and_the_run_matches_its_torchrun_twin(runs: RunCache, tmp_path: Path) -> None:
    """By hand, as a seed user: the flags say nothing of FSDP; the YAML asks for FULL_SHARD on 2 processes.
    The run applies it, and its wrapping and losses are the torchrun twin's (CPU, fp32: equal)."""
    twin = runs.get("--sharding", "full_shard", nproc=2, torchrun=True).summary   # a real torchrun launch
    run = accelerate(tmp_path / "run", to_yaml(load_config(overrides=dict(sharding="full_shard", procs_per_node=2))),
                     [], nproc=2)
    mine = run.summary
    assert mine["launcher"] == "accelerate" and twin["launcher"] == "torchrun"
    assert mine["sharding_requested"] == mine["sharding_applied"] == "full_shard"
    assert applied(mine) == applied(twin)
    assert mine["eval_losses"] == twin["eval_losses"] and mine["train_loss"] == twin["train_loss"]


@pytest.mark.slow
def test_a_two_node_job_launched_by_accelerate_matches_its_torchrun_twin(runs: RunCache, tmp_path: Path) -> None:
    """A job on the local backend with launcher="accelerate": notebook 05's hybrid_shard run (2 nodes x 2,
    the mesh from the YAML's parallelism_config). Its batch script runs `accelerate launch --config_file
    accelerate.yaml` (the job's YAML, written from its config.json) on every node, on the same training
    script, and applies and trains exactly as the torchrun run of the same config. One node's accelerate
    launch (the YAML alone deciding FULL_SHARD) is the test above; a job's one-node script is the same
    template with one node (test_every_step_renders_an_accelerate_launch_of_the_same_program)."""
    from workshop.slurm import JobState, submit_all

    profile = load_profile("local")
    specs = {"hybrid 2x2": ("multi_node", step_config("multi_node", profile, dict(
        procs_per_node=2, sharding="hybrid_shard", hybrid_replicas=2, launcher="accelerate")))}
    jobs = submit_all(specs, profile, jobs_dir=tmp_path / "jobs")
    states = jobs.wait()
    twin = runs.get("--sharding", "hybrid_shard", "--hybrid-replicas", "2", nproc=4).summary  # the mesh on one node
    job = jobs["hybrid 2x2"]
    assert states["hybrid 2x2"] is JobState.COMPLETED, job.tail(60)
    assert "accelerate launch --config_file" in job.script
    assert (job.job_dir / FILE).read_text().endswith(to_yaml(load_config(job.job_dir / "config.json")))
    mine = job.summary()
    assert mine["launcher"] == "accelerate"
    assert {k: v for k, v in applied(mine).items() if k != "nodes"} == \
        {k: v for k, v in applied(twin).items() if k != "nodes"}
    assert mine["eval_losses"] == twin["eval_losses"]
    assert mine["mesh"] == [2, 2] and mine["nodes"] == 2 and len(set(mine["hosts"])) == 2


PROBE = '''
"""Which ranks read the checkpoint in from_pretrained, loaded as workshop.training.train loads it: after the
Trainer's arguments (with fsdp_cpu_ram_efficient_loading) have set up the process group."""
import json, sys
import torch, torch.distributed as dist
from transformers import TrainingArguments
TrainingArguments(output_dir=sys.argv[2], use_cpu=True, ddp_backend="gloo", report_to=[], fsdp="full_shard auto_wrap",
                  fsdp_config={"version": 2, "cpu_ram_efficient_loading": True})
assert dist.is_initialized()
import transformers.modeling_utils as mu
from safetensors import safe_open
read = set()
class Counting:
    def __init__(self, *a, **k): self.f = safe_open(*a, **k)
    def __enter__(self): self.f.__enter__(); return self
    def __exit__(self, *a): return self.f.__exit__(*a)
    def __getattr__(self, name):
        attr = getattr(self.f, name)
        if name == "get_tensor":
            def get_tensor(key):
                read.add(key); return attr(key)
            return get_tensor
        if name != "get_slice":
            return attr
        def get_slice(key):
            sl = attr(key)
            class Slice:
                def __getitem__(self, idx):
                    read.add(key); return sl[idx]
                def __getattr__(self, n): return getattr(sl, n)
            return Slice()
        return get_slice
mu.safe_open = Counting
from transformers import BloomForCausalLM
from transformers.distributed.fsdp import is_fsdp_enabled
BloomForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
# a file per rank: two ranks printing at once can share one line of the launcher's output (seen under load)
with open(f"{sys.argv[2]}/probe-{dist.get_rank()}.json", "w") as out:
    json.dump({"rank": dist.get_rank(), "fsdp_enabled_at_load": is_fsdp_enabled(), "tensors_read": len(read)}, out)
dist.destroy_process_group()
'''


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_cpu_ram_efficient_loading_leaves_every_rank_reading_the_checkpoint(launcher: str, tmp_path: Path) -> None:
    """What accelerate_yaml's docstring and notebook 02 say, measured on the pinned versions, with
    fsdp_cpu_ram_efficient_loading in the Trainer's fsdp_config and (accelerate) in the YAML: under torchrun
    transformers does not see FSDP when the model loads (the flag reaches accelerate with the Trainer's
    Accelerator), under accelerate launch it does; under both, every rank reads every tensor."""
    from safetensors import safe_open

    from workshop.training import models

    tok = models.load_tokenizer("tiny")
    saved = tmp_path / "model"
    models.build_model("tiny", tok, 0).save_pretrained(saved)
    with safe_open(saved / "model.safetensors", "pt") as f:
        total = len(list(f.keys()))
    (tmp_path / "probe.py").write_text(PROBE)
    cfg = load_config(overrides=dict(procs_per_node=2, fsdp="full_shard auto_wrap",
                                     fsdp_config={"version": 2, "cpu_ram_efficient_loading": True}))
    (tmp_path / FILE).write_text(to_yaml(cfg))
    assert "fsdp_cpu_ram_efficient_loading: true" in to_yaml(cfg)
    start = ([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(tmp_path / FILE),
              "--main_process_port", "0"] if launcher == "accelerate" else
             [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"])
    (tmp_path / "out").mkdir()
    proc = subprocess.run([*start, str(tmp_path / "probe.py"), str(saved), str(tmp_path / "out")],
                          env=clean_env(), capture_output=True, text=True, timeout=300)
    found = [json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("probe-*.json"))]
    assert len(found) == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert all(r["fsdp_enabled_at_load"] is (launcher == "accelerate") for r in found), found
    assert [r["tensors_read"] for r in found] == [total, total], found


def test_notebook_02_shows_the_yaml_of_the_students_own_settings(course_run: Path, tmp_path: Path) -> None:
    """The executed notebook's YAML is `to_yaml` of the config the student's `my_fsdp` makes (read from the
    notebook's own output), not a copy: and accelerate launch reads it back as those settings."""
    import ast

    import nbformat

    nb = nbformat.read(course_run / "02_fsdp_single_gpu" / "02_fsdp_single_gpu.ipynb", as_version=4)
    cells = {c.id: c for c in nb.cells}
    mine = ast.literal_eval(cells["nb02-11-settings"].outputs[0]["data"]["text/plain"])
    shown = "".join(o.get("text", "") for o in cells["nb02-accelerate-yaml"].outputs)
    cfg = step_config("fsdp_1gpu", load_profile("local"), mine["full_shard+offload"])
    assert shown.strip() == to_yaml(cfg).strip()
    asked = follow_launch(load_config(), set(), launch_env(shown, tmp_path), {"procs_per_node": 1})
    assert (asked.sharding, asked.offload) == ("full_shard", True) == (cfg.sharding, cfg.offload)
