"""A student's W&B API key never lands in anything the course writes or ships.

A real (tiny, offline) W&B run is made with a fake key in the environment; then the run's folder
(W&B's own files included), its stdout and stderr, every batch script the course renders (each step
on each site profile), the Open OnDemand app, the course kernelspec and the notebooks are searched
for the key. W&B offline needs neither network nor key; `wandb sync` uploads later (docs/student.md).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from workshop.training.config import ConfigError
from workshop.site.ood import render_app
from workshop.slurm.profiles import available, load_profile
from workshop.slurm import STEPS, step_config
from workshop.slurm.render import render

ROOT = Path(__file__).resolve().parent.parent
FAKE_KEY = "local-0123456789abcdef0123456789abcdef01234567"
# a masked key ("***...cdef01234567") still gives part of it away: its tail counts as a leak too
NEEDLES = (FAKE_KEY, FAKE_KEY[-16:])


def _leaks(text: str | bytes) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [n for n in NEEDLES if n.encode() in data]


def _files_with_key(folder: Path) -> list[str]:
    return [str(p) for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()
            and _leaks(p.read_bytes())]


def student_guide_lines() -> list[str]:
    """docs/student.md's W&B command lines: the run by hand (inline) and the ```bash block's lines."""
    guide = (ROOT / "docs" / "student.md").read_text().split("## Weights & Biases", 1)[1]
    block = guide.split("```bash", 1)[1].split("```", 1)[0]
    return re.findall(r"`(workshop train [^`]*)`", guide) + [ln.split("  #", 1)[0].strip() for ln in block.splitlines()
                                                             if ln.strip()]


def guide_shell(line: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A line of the guide typed in `cwd`, the course's environment first on PATH, the fake key set."""
    full = dict(os.environ, WANDB_API_KEY=FAKE_KEY, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
                HF_HUB_OFFLINE="1", PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **env)
    full.pop("WANDB_MODE", None)           # the run's own --wandb flag decides
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=full, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def wandb_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One real offline W&B run with the fake key set, as a student's environment would have it: the
    student guide's run by hand, as written, with DIR a folder where a job's would be (jobs/<name>/), so
    that the guide's sync line finds it. Small through the seed's variables (TRAIN_SIZE, EVAL_SIZE)."""
    line = student_guide_lines()[0]
    assert line == "workshop train --wandb offline --output-dir DIR"
    course = tmp_path_factory.mktemp("wandb-run")
    proc = guide_shell(line.replace("DIR", "jobs/by-hand"), course, TRAIN_SIZE="8", EVAL_SIZE="4", NUM_EPOCHS="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return course / "jobs" / "by-hand", proc


def test_the_offline_run_is_a_real_wandb_run(wandb_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, _ = wandb_run
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, f"no offline W&B run under {out / 'wandb'}"
    assert list(runs[0].glob("run-*.wandb")), "the run has no .wandb file for `wandb sync`"
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"


def test_the_guides_dry_run_sync_lists_the_run_offline(
        wandb_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    """`wandb sync --dry-run` as the guide writes it, without network: it names the offline run to upload.
    `wandb login` and the real `wandb sync -p ...` need W&B's server: no test runs them (the guide says so)."""
    out, _ = wandb_run
    lines = student_guide_lines()
    assert lines[1:] == ["conda activate bloom_env", "wandb login",
                         "wandb sync --dry-run jobs/*/wandb/offline-run-*",
                         "wandb sync -p fsdp-workshop jobs/*/wandb/offline-run-*"]
    proc = guide_shell(lines[3], out.parent.parent)
    assert proc.returncode == 0, proc.stderr
    run = next((out / "wandb").glob("offline-run-*"))
    assert "Would sync 1 run(s)" in proc.stdout + proc.stderr
    assert f"jobs/by-hand/wandb/{run.name}/" in proc.stdout + proc.stderr
    assert _leaks(proc.stdout + proc.stderr) == []


def test_the_key_is_in_none_of_the_runs_files(wandb_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, _ = wandb_run
    assert len([p for p in out.rglob("*") if p.is_file()]) >= 5
    assert _files_with_key(out) == []


def test_the_key_is_not_in_the_runs_output(wandb_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    _, proc = wandb_run
    assert "WORKSHOP_SUMMARY" in proc.stdout
    assert _leaks(proc.stdout) == [] and _leaks(proc.stderr) == []


def test_the_key_is_in_no_rendered_batch_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step on each site profile, rendered while the key is in the environment."""
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    rendered = 0
    for name in available():
        profile = load_profile(name)
        for step in STEPS:
            try:
                config = step_config(step, profile)
                script = render(step, config, profile, tmp_path / f"{name}-{step}")
            except ConfigError:           # a step this site cannot run (e.g. 2 nodes on the local backend)
                continue
            assert _leaks(script) == [], f"{name}/{step}"
            assert _leaks(json.dumps(config.to_dict())) == [], f"{name}/{step} config"
            rendered += 1
    assert rendered >= 2 * len(STEPS)


def test_the_key_is_in_neither_the_ood_app_nor_the_kernelspec(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    for name in available():
        if load_profile(name).backend == "slurm":
            render_app(name, tmp_path / "ood" / name)
    env = dict(os.environ, WANDB_API_KEY=FAKE_KEY)
    subprocess.run([sys.executable, "-m", "workshop.student.kernel", "--profile", "example-hpc", "--prefix",
                    str(tmp_path / "kernel")], env=env, check=True, capture_output=True, timeout=60)
    assert list((tmp_path / "kernel").rglob("kernel.json"))
    assert _files_with_key(tmp_path) == []


def test_no_notebook_carries_a_wandb_key() -> None:
    """The course's notebooks (sources and release, where they exist) hold no key and set none."""
    setting = re.compile(r"WANDB_API_KEY['\"]?\s*[\]:=,)]*\s*['\"][^'\"]+['\"]|wandb\.login\([^)]*key\s*=")
    for nb in sorted([*ROOT.glob("solutions/**/*.ipynb"), *ROOT.glob("notebooks/**/*.ipynb")]):
        text = nb.read_text()
        assert _leaks(text) == [], nb
        assert not setting.search(text), f"{nb.relative_to(ROOT)} writes a W&B key into the notebook"
