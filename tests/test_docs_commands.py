"""Docs run: the command lines of README.md, docs/ and slurm/ood/README.md that no other test types, each
read out of its document and run as written (in a temporary folder where it writes into the checkout,
with .venv linked there when the line calls .venv/bin/...). Where a run must be small, the size comes
from the seed repo's environment variables (TRAIN_SIZE, EVAL_SIZE), never from an edited command.

Where the others are run: tests/test_fsdp_exercises.py (README's torchrun line), tests/test_budget.py
(the class budget's two lines), tests/test_schedule.py (the guide's `workshop budget` line of "The day"), tests/test_challenge.py (the guide's challenge sweep),
tests/test_instructor_flow.py (the instructor's day), tests/test_no_secrets.py
(the student guide's `workshop train --wandb offline` and `wandb sync --dry-run`),
tests/slurm/test_course_on_cluster.py (the instructor guide's dry run, <site> = the test cluster's profile,
narrowed to notebook 01 by WORKSHOP_COURSE_ONLY),
tests/slurm/test_preflight_on_cluster.py (its first command, `workshop preflight`), tests/test_prefetch.py
(its two `workshop prefetch` lines), tests/test_class_polling.py (its [slurm.watch] setting),
tests/test_dryrun.py (its `workshop dryrun` line, and the student guide's).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
import yaml

from tests.runs import clean_env, train
from workshop.site.ood import FILES, render_app

ROOT = Path(__file__).resolve().parent.parent
SMALL = {"TRAIN_SIZE": "8", "EVAL_SIZE": "4"}


def fenced(doc: Path, after: str = "") -> list[str]:
    """The command lines (comments cut) of the ```bash blocks of `doc`, from the heading `after` on."""
    text = doc.read_text()
    text = text[text.index(after):] if after else text
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [ln.split("  #", 1)[0].strip() for b in blocks for ln in b.splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")]


def line_with(lines: list[str], marker: str) -> str:
    found = [ln for ln in lines if marker in ln]
    assert len(found) == 1, f"{marker!r}: {found}"
    return found[0]


def sh(line: str, cwd: Path, env: dict[str, str] | None = None,
       timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A documented line typed at a shell, the course's environment first on PATH."""
    env = {**clean_env(), **(env or {})}
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    print(f"$ {line}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


# ---------------------------------------------------------------------------------- README.md

def test_readme_one_process_training_as_written(tmp_path: Path) -> None:
    line = line_with(fenced(ROOT / "README.md", "## Training by hand"), "--epochs 1")
    assert line == ".venv/bin/workshop train --epochs 1"
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")      # the README's path; runs/latest lands in tmp
    proc = sh(line, tmp_path, SMALL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "latest" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["world_size"] == 1 and summary["sharding_applied"] == "none"
    assert summary["steps"] == summary["steps_per_epoch"] and summary["samples_trained"] == 8    # one epoch of 8


def test_readme_help_lists_every_option_the_readme_names(tmp_path: Path) -> None:
    line = line_with(fenced(ROOT / "README.md", "## Training by hand"), "--help")
    assert line == ".venv/bin/workshop train --help"
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    proc = sh(line, tmp_path)
    assert proc.returncode == 0, proc.stderr
    part = (ROOT / "README.md").read_text().split("## Training by hand", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"(--[a-z][a-z-]+)", part)) - {"--nproc-per-node", "--help"}     # torchrun's own
    assert {"--epochs", "--sharding", "--procs-per-node", "--nodes", "--fsdp", "--fsdp-config", "--wrap-function",
            "--config"} <= named
    assert [opt for opt in sorted(named) if not re.search(rf"{opt}\b", proc.stdout)] == []


# ---------------------------------------------------------------------------------- Open OnDemand

def test_the_instructor_guides_ood_render_line(tmp_path: Path) -> None:
    """docs/instructor.md, "Before the workshop" 4: <site> is the example site, <apps dir> a folder here."""
    guide = (ROOT / "docs" / "instructor.md").read_text()
    line = re.search(r"`(python -m workshop\.site\.ood render [^`]*)`", guide).group(1)
    assert line == "python -m workshop.site.ood render --profile <site> --out <apps dir>/fsdp-workshop"
    proc = sh(line.replace("<site>", "example-hpc").replace("<apps dir>", str(tmp_path / "apps")), ROOT)
    assert proc.returncode == 0, proc.stderr
    app = tmp_path / "apps" / "fsdp-workshop"
    assert sorted(proc.stdout.split()) == sorted(str(app / rel) for rel in FILES)
    render_app("example-hpc", tmp_path / "by-api")
    for rel in FILES:
        assert (app / rel).read_text() == (tmp_path / "by-api" / rel).read_text(), rel
    form = yaml.safe_load((app / "form.yml.erb").read_text())
    assert form["cluster"] == "example-hpc" and form["attributes"]["bc_account"]["value"] == "CHANGE-ME-account"


def test_the_ood_readmes_render_and_install_lines(tmp_path: Path) -> None:
    """slurm/ood/README.md's two lines. The render line runs as written with HOME in a temporary folder.
    The install line needs sudo (none here) and Open OnDemand's system apps folder: it runs as root
    without the word `sudo`, in a mount namespace of its own whose /var is an empty tmpfs, so that
    /var/www/ood/apps/sys/ exists there and nothing of this machine's /var is touched."""
    render, install = fenced(ROOT / "slurm" / "ood" / "README.md")
    assert render == "python -m workshop.site.ood render --profile example-hpc --out ~/ondemand/dev/fsdp-workshop"
    assert install == "sudo cp -r ~/ondemand/dev/fsdp-workshop /var/www/ood/apps/sys/"
    home = tmp_path / "home"
    home.mkdir()
    proc = sh(render, ROOT, {"HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    sandbox = home / "ondemand" / "dev" / "fsdp-workshop"
    assert all((sandbox / rel).is_file() for rel in FILES)
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("the install line needs root and unshare (a private /var) here")
    copy = tmp_path / "installed"
    inner = (f"mount -t tmpfs none /var && mkdir -p /var/www/ood/apps/sys && {install.removeprefix('sudo ')} && "
             f"cp -r /var/www/ood/apps/sys/fsdp-workshop {copy}")
    proc = sh(f"unshare --mount --propagation private bash -c {inner!r}", tmp_path, {"HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    for rel in FILES:
        assert (copy / rel).read_bytes() == (sandbox / rel).read_bytes(), rel
        assert os.access(copy / rel, os.R_OK)
    assert not Path("/var/www/ood/apps/sys/fsdp-workshop").exists()


# ---------------------------------------------------------------------------------- one shared environment

def test_the_guides_shared_read_only_environment(tmp_path: Path) -> None:
    """docs/instructor.md, "Before the workshop" 2, with <env> a folder here and <site> the example site.
    `conda env create` and `conda activate` need conda and a package index, which this machine has neither
    of: the environment they build is this checkout's .venv (the same pins: tests/test_env_pins.py), whose
    python comes first on PATH here as it does after `conda activate <env>`. The kernel's registration into
    <env> and the step that takes its write bits away run as written."""
    lines = fenced(ROOT / "docs" / "instructor.md", "2. **One environment")
    lines = lines[:lines.index("chmod -R a-w <env>") + 1]
    assert lines == ["conda env create -p <env> -f bloom_env.yml", "conda activate <env>",
                     "bash scripts/register_kernel.sh --profile <site> --prefix <env>", "chmod -R a-w <env>"]
    env_dir = tmp_path / "bloom_env"
    for line in lines[2:]:
        proc = sh(line.replace("<env>", str(env_dir)).replace("<site>", "example-hpc"), ROOT)
        assert proc.returncode == 0, proc.stderr
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager(kernel_dirs=[str(env_dir / "share" / "jupyter" / "kernels")]).get_kernel_spec("fsdp-workshop")
    assert spec.argv[0] == str(ROOT / ".venv" / "bin" / "python") and spec.display_name == "FSDP workshop (bloom_env)"
    assert spec.env["WORKSHOP_PROFILE"] == "example-hpc" and spec.env["HF_HOME"] == "/shared/fsdp-workshop/hf_home"
    writable = [p for p in [env_dir, *env_dir.rglob("*")] if p.stat().st_mode & 0o222]
    assert writable == []                               # no one may change what the class runs
    for p in [env_dir, *env_dir.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o200)               # pytest's tmp_path cleanup


# ---------------------------------------------------------------------------------- the student guide

def test_the_student_guide_names_the_kernel_the_release_notebooks_open_with() -> None:
    guide = (ROOT / "docs" / "student.md").read_text()
    names = {nbformat.read(p, as_version=4).metadata["kernelspec"]["display_name"]
             for p in sorted((ROOT / "notebooks").glob("*/*.ipynb"))}
    assert names == {"FSDP workshop (bloom_env)"}
    assert "Use the kernel **FSDP workshop (bloom_env)**" in guide and "The release notebooks name this kernel" in guide
    assert "Python 3 (ipykernel)" not in guide


# ---------------------------------------------------------------------------------- notebook 05

def merge_command() -> str:
    """The consolidation command of notebook 05's checkpoints cell, as the student reads it."""
    nb = nbformat.read(ROOT / "notebooks" / "05_multi_node" / "05_multi_node.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "accelerate merge-weights" in c.source)
    return re.search(r"`(accelerate merge-weights [^`]+)`", cell.source).group(1)


def test_notebook_05s_merge_weights_gives_the_trained_model_to_from_pretrained(tmp_path: Path) -> None:
    """A real sharded checkpoint (FULL_SHARD on 2 processes, SHARDED_STATE_DICT: one .distcp per rank), its
    step put in for STEP, the notebook's command run in the checkpoint folder; then the notebook's next
    words: load merged/model.safetensors into a BloomForCausalLM built from the config, save_pretrained.
    What from_pretrained reads back is the trained model: its eval loss on the run's eval examples (token
    weighted, as the Trainer's) is the run's final eval loss, at the checkpoint's (final) step."""
    import torch
    from safetensors.torch import load_file
    from transformers import BloomForCausalLM

    from workshop.training import data, models
    from workshop.training.config import RunConfig

    command = merge_command()
    assert command == "accelerate merge-weights checkpoint-STEP/pytorch_model_fsdp_0 merged/"   # in the checkpoint folder
    run = train(tmp_path / "run", ["--sharding", "full_shard", "--train-size", "8", "--eval-size", "4", "--epochs", "1",
                                    "--checkpoint-every", "2"], nproc=2)
    summary = run.summary
    step = summary["steps"]
    shards = tmp_path / "run" / f"checkpoint-{step}" / "pytorch_model_fsdp_0"
    assert sorted(p.name for p in shards.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    proc = sh(command.replace("STEP", str(step)), tmp_path / "run")      # the run's checkpoint folder
    assert proc.returncode == 0, proc.stderr[-3000:]
    merged = load_file(tmp_path / "run" / "merged" / "model.safetensors")
    assert {k: list(v.shape) for k, v in merged.items() if k in summary["param_shapes"]} == summary["param_shapes"]

    tok = models.load_tokenizer("tiny")
    model = models.build_model("tiny", tok, seed=RunConfig().seed)      # the run's config, its initial weights
    init = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(merged, strict=True)                          # every weight, nothing left over
    model.save_pretrained(tmp_path / "model")
    loaded = BloomForCausalLM.from_pretrained(tmp_path / "model").eval()
    assert any(not torch.equal(init[k], v) for k, v in loaded.state_dict().items())            # trained
    examples = data.load_examples("fixture", RunConfig().eval_split, 4)
    dataset = data.EncodedDataset(tok, examples, RunConfig().max_length)
    collate = data.DynamicPaddingCollator(tok.pad_token_id, 0)
    total = tokens = 0.0
    with torch.no_grad():
        for i in range(len(dataset)):
            batch = collate([dataset[i]])
            batch.pop(data.HOST_TOKENS)          # the collator's token count: the trainer takes it out too
            n = int((batch["labels"][:, 1:] != -100).sum())
            total += float(loaded(**batch).loss) * n
            tokens += n
    assert total / tokens == pytest.approx(summary["final_eval_loss"], rel=1e-5)


def test_the_example_site_activates_the_environment_the_guide_builds() -> None:
    """The guide creates the class's environment by prefix (`conda env create -p <env>`, <env> e.g.
    /shared/fsdp-workshop/bloom_env) and says the profile's setup activates `<env>`: the example site's setup
    activates that prefix, not an environment by name that no user's conda has."""
    from workshop.slurm.profiles import load_profile

    guide = (ROOT / "docs" / "instructor.md").read_text()
    example = re.search(r"\(`<env>`, e\.g\. `([^`]+)`\)", guide).group(1)
    assert "conda env create -p <env> -f bloom_env.yml" in fenced(ROOT / "docs" / "instructor.md", "2. **One environment")
    setup = load_profile("example-hpc").setup
    assert [ln for ln in setup if ln.startswith("conda activate")] == [f"conda activate {example}"]
