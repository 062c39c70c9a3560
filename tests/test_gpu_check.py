"""The GPU check without a GPU: benchmarks/README.md's two lines run as written (the locked wheels fetched,
then `scripts/gpu_check.sh --dry-run`: wheels checked and installed for the GPU machine's Python, versions
recorded, the tier collected and every test skipped for want of CUDA); a damaged wheel or a missing
folder stops the check; the report merges into a results file; fp16's scaler is read back; the
`gpu-local` profile runs notebooks 01 and 02's steps and the tier's configurations."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.runs import RunCache, clean_env

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "benchmarks" / "README.md"


def readme_lines() -> list[str]:
    """The command lines of the README's GPU-check section (comments cut)."""
    text = README.read_text().split("## On a lent GPU", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [ln.split("  #", 1)[0].strip() for b in blocks for ln in b.splitlines() if ln.strip()]


def sh(line: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """A documented line typed at a shell in the checkout, the project's venv first on PATH."""
    env = {**clean_env(), **env}
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    print(f"$ {line}\n{proc.stdout[-4000:]}{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's first line, as written: the locked wheels fetched (from the registry) into $GPU_WHEELS."""
    dest = tmp_path_factory.mktemp("whl")
    lines = readme_lines()
    assert lines[0] == "python3 scripts/gpu_wheels.py download"
    proc = sh(lines[0], {"GPU_WHEELS": str(dest)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"gpu_wheels: \d+ wheels, [\d.]+ MiB .* of the 64 MiB the device tool carries", proc.stdout)
    return dest


@pytest.fixture(scope="module")
def dry_run(wheels: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The README's second line, as written, with the fetched wheels; its files land in a temporary folder."""
    line = readme_lines()[1]
    assert line == "bash scripts/gpu_check.sh --dry-run"
    out = tmp_path_factory.mktemp("gpu-check")
    return sh(f"{line} --out {out}", {"GPU_WHEELS": str(wheels)}), out


def test_dry_run_checks_the_wheels_and_skips_the_whole_tier_for_want_of_cuda(
        dry_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"gpu_wheels: \d+ wheels in .* match gpu_wheels.lock", proc.stdout)
    assert "installed into" in proc.stdout and "for CPython 3.12 on manylinux x86_64" in proc.stdout
    (report,) = out.glob("*-tests.xml")
    cases = list(ET.parse(report).getroot().iter("testcase"))
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert len(cases) >= 30 and len(skipped) == len(cases), "every tier test is collected, and skipped here"
    assert all(c.find("skipped").get("message", "").startswith("no CUDA") for c in skipped)
    assert f"no CUDA: {len(cases)} skipped" in proc.stdout.splitlines()
    assert "bench: not on a dry run" in proc.stdout


def test_dry_run_records_the_versions_and_how_they_differ_from_pyproject(
        dry_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    import torch

    _, out = dry_run
    (check_file,) = out.glob("*-check.json")
    check = json.loads(check_file.read_text())
    env = check["environment"]
    assert env["gpu"]["count"] == 0 and env["commit"]["sha"] and env["versions"]["torch"] == torch.__version__
    rows = {r["package"]: r for r in env["drift"]}
    assert {"torch", "transformers", "accelerate", "datasets", "nbgrader", "papermill"} <= set(rows)
    assert rows["transformers"]["relation"] == "same" and rows["torch"]["here"] == torch.__version__
    assert check["tests"]["skipped"] == check["tests"]["tests"] > 0
    assert list(out.glob("*-log.txt")) and list(out.glob("*-tests.txt"))


def test_a_damaged_wheel_stops_the_check_before_anything_runs(wheels: Path, tmp_path: Path) -> None:
    bad = tmp_path / "whl"
    shutil.copytree(wheels, bad)
    victim = sorted(bad.glob("papermill-*.whl"))[0]
    victim.write_bytes(victim.read_bytes()[:-100])
    proc = sh(f"bash scripts/gpu_check.sh --dry-run --out {tmp_path / 'out'}", {"GPU_WHEELS": str(bad)})
    assert proc.returncode == 2
    assert f"{victim.name}: sha256 differs" in proc.stderr + proc.stdout
    assert "the GPU tier" not in proc.stdout


def test_no_wheels_says_how_to_get_them(tmp_path: Path) -> None:
    proc = sh(f"bash scripts/gpu_check.sh --dry-run --wheels {tmp_path / 'none'} --out {tmp_path / 'out'}", {})
    assert proc.returncode == 2
    assert "run `python3 scripts/gpu_wheels.py download`" in proc.stderr + proc.stdout


def test_a_dry_run_never_writes_into_benchmarks_results(tmp_path: Path) -> None:
    proc = sh("bash scripts/gpu_check.sh --dry-run --out benchmarks/results", {})
    assert proc.returncode == 2 and "a dry run measures nothing" in proc.stdout


def test_the_lock_is_the_whole_closure_and_fits_the_carry_limit() -> None:
    """Every Requires-Dist of a locked wheel (for Python 3.12 on Linux) is locked too, on the GPU machine
    already, or left out with its reason: `--no-deps` installs nothing else."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_wheels", ROOT / "scripts" / "gpu_wheels.py")
    gw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gw)
    locked = gw.read_lock()
    assert set(gw.NEEDS) <= set(locked) and not set(locked) & gw.GPU_HAS
    assert gw.WHEEL_BUDGET < gw.CARRY_LIMIT
    assert {"datasets", "nbgrader", "wandb"}.isdisjoint(locked), "the fixture path needs none of them"


def test_every_requirement_of_a_fetched_wheel_is_carried_or_there(wheels: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_wheels", ROOT / "scripts" / "gpu_wheels.py")
    gw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gw)
    locked = gw.read_lock()
    missing = {(w.name, dep) for w in wheels.glob("*.whl") for dep in gw.requires(w)
               if dep not in locked and dep not in gw.GPU_HAS and dep not in gw.LEFT_OUT}
    assert missing == set()
    assert gw.check(wheels, budget=1) and "over their 0 MiB" in gw.check(wheels, budget=1)[-1]


def test_the_report_merges_into_the_bench_result(tmp_path: Path) -> None:
    from workshop.bench import gpu_report

    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    env = gpu_report.environment()
    (work / "env.json").write_text(json.dumps(env))
    (work / "tests.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.gpu.test_memory_gpu" name="test_a[none-bf16]"/>'
        '<testcase classname="tests.gpu.test_memory_gpu" name="test_b[none-bf16]"><failure message="x"/></testcase>'
        '</testsuite></testsuites>')
    (work / "figures.json").write_text(json.dumps({"tracker_vs_allocator[none-bf16]": {
        "tracker_peak_mb": 900.0, "allocator_step_peak_mb": 1000.0, "ratio": 0.9}}))
    out.mkdir()
    (out / "2026-01-01-gpu.json").write_text(json.dumps({"git_sha": None, "configs": []}))
    (out / "2026-01-01-gpu.md").write_text("# bench\n")
    assert gpu_report.finish(out, "2026-01-01-gpu", work) == 0
    result = json.loads((out / "2026-01-01-gpu.json").read_text())
    assert result["git_sha"] == env["commit"]["sha"] and result["configs"] == []
    assert result["gpu_check"]["tests"]["outcomes"] == {"test_memory_gpu::test_a[none-bf16]": "passed",
                                                        "test_memory_gpu::test_b[none-bf16]": "failed"}
    md = (out / "2026-01-01-gpu.md").read_text()
    assert md.startswith("# bench\n") and "## GPU check" in md and "| tracker_vs_allocator[none-bf16] | 900.0 | 1,000.0 | 0.900 |" in md
    assert "Not passed: `test_memory_gpu::test_b[none-bf16]`" in md and (out / "2026-01-01-gpu-tests.xml").is_file()


def test_version_drift_names_older_newer_missing_and_local_builds() -> None:
    from workshop.bench.gpu_report import drift

    rows = drift({"torch": "2.13.0", "transformers": "5.23.0", "nbgrader": "0.9.6", "pandas": "3.1.1"},
                 {"torch": "2.11.0+cu130", "transformers": "5.17.0", "nbgrader": None, "pandas": "3.1.1"})
    assert [(r["package"], r["relation"]) for r in rows] == [
        ("nbgrader", "missing"), ("pandas", "same"), ("torch", "older"), ("transformers", "older")]
    assert drift({"torch": "2.13.0"}, {"torch": "2.13.0+cpu"})[0]["relation"] == "same release (cpu build)"
    assert drift({"numpy": "2.4.6"}, {"numpy": "2.5.2"})[0]["relation"] == "newer"


def test_fp16_gradient_scaler_is_read_back_with_its_skipped_steps() -> None:
    """A real scaler on the CPU: an inf in the gradients skips the step and halves the scale."""
    import torch

    from workshop.training.scaler import describe

    assert describe(None) is None
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for value in (float("inf"), 1.0):
        opt.zero_grad()
        scaler.scale((w * value).sum()).backward()
        scaler.step(opt)
        scaler.update()
    got = describe(scaler)
    assert got == {"type": "GradScaler", "enabled": True, "init_scale": 1024.0, "scale": 512.0,
                   "growth_interval": 2000}
    assert describe(torch.amp.GradScaler("cpu", enabled=False))["scale"] is None


def test_a_run_without_fp16_records_no_scaler(runs: RunCache) -> None:
    summary = runs.get("--sharding", "full_shard", nproc=2).summary
    assert "grad_scaler" in summary and summary["grad_scaler"] is None


def test_gpu_local_profile_runs_the_steps_of_notebooks_01_and_02_and_the_tier() -> None:
    from tests.gpu.conftest import PROFILE, RUNS, tier_config
    from workshop.slurm.profiles import load_profile
    from workshop.slurm.steps import step_config

    profile = load_profile(PROFILE)
    assert profile.backend == "local" and profile.partition_for("baseline").gpus_per_node == 1
    for step in ("baseline", "fsdp_1gpu"):
        cfg = step_config(step, profile)
        assert (cfg.device, cfg.model, cfg.dataset, cfg.world_size) == ("cuda", "bloom-560m-random", "fixture", 1)
    for name in RUNS:
        cfg = tier_config(name, Path("/tmp/unused"))
        strategy, precision = name.rsplit("-", 1)
        assert cfg.precision == precision and cfg.device == "cuda" and not cfg.eval_generate
        assert cfg.offload == (strategy == "offload")
        assert cfg.activation_checkpointing == (strategy == "activation_checkpointing")
        assert cfg.sharding == ("none" if strategy == "none" else "full_shard")


def test_the_gpu_local_batch_script_runs_one_process(tmp_path: Path) -> None:
    from workshop.slurm.profiles import load_profile
    from workshop.slurm.render import render
    from workshop.slurm.steps import step_config

    profile = load_profile("gpu-local")
    script = render("fsdp_1gpu", step_config("fsdp_1gpu", profile), profile, tmp_path / "job")
    launches = [ln for ln in script.splitlines() if "-m workshop.training.train" in ln and not ln.startswith("#")]
    assert launches == [f"python -m workshop.training.train --config {tmp_path.resolve() / 'job' / 'config.json'}"]
    assert "export OMP_NUM_THREADS=4" in script


@pytest.mark.parametrize("expr, trained", [
    ("memory and offload-bf16", ["offload-bf16"]),
    ("fsdp2_matches and fp16", ["none-fp16", "full_shard-fp16"]),
    ("mfu", ["none-bf16"]),
    ("notebook or bandwidth", []),
    ("", None),
])
def test_a_rerun_of_some_tier_tests_trains_only_the_runs_they_read(expr: str, trained: list[str] | None,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The tier's selection as pytest makes it (`gpu_check.sh -k EXPR`), and the runs the fixture would train.
    The GPU check's pytest is not one of the suite's parts: the part this test runs in must not narrow it."""
    monkeypatch.delenv("WORKSHOP_TEST_PART", raising=False)
    from tests.gpu.conftest import RUNS, runs_needed

    class Grab:
        items: list[pytest.Item] = []

        def pytest_collection_finish(self, session: pytest.Session) -> None:
            Grab.items = list(session.items)

    args = [str(ROOT / "tests" / "gpu"), "--collect-only", "-q", "-p", "no:cacheprovider", *(["-k", expr] if expr else [])]
    assert pytest.main(args, plugins=[Grab()]) == 0
    assert Grab.items, "nothing collected"
    assert runs_needed(Grab.items) == (RUNS if trained is None else trained)


def test_activation_checkpointing_reaches_the_trainer_under_this_transformers(tmp_path: Path) -> None:
    """transformers 5.23 calls it `activation_checkpointing` (with `gradient_checkpointing` a deprecated
    alias); 5.17, the lent GPU machine's, knows only `gradient_checkpointing` and raised TypeError on the
    other (seen in a venv with 5.17.0 and accelerate 1.15.0): the script asks TrainingArguments its name."""
    import dataclasses

    import torch
    from transformers import TrainingArguments

    from workshop.training.config import load_config
    from workshop.training.train import checkpointing_argument, training_arguments

    name = checkpointing_argument()
    assert name in {f.name for f in dataclasses.fields(TrainingArguments)}
    cfg = load_config(overrides=dict(activation_checkpointing=True, device="cpu", output_dir=str(tmp_path)))
    args = training_arguments(cfg, torch.device("cpu"), 1)
    assert getattr(args, name) is True
