"""The GPU check's report: what machine and versions ran, how they differ from pyproject.toml, and what
the GPU tier measured, merged into the bench's results file (`scripts/gpu_check.sh` calls it).

Why a report beside the bench: a lent GPU machine has its own torch, transformers and driver, never
the pinned ones, and nothing of it survives the lease. A figure from it is worth something only with
the versions, the driver and the commit that made it, and with the tier's verdicts beside the bench's
numbers in one file.

    python -m workshop.bench.gpu_report env                      # the environment, as JSON on stdout
    python -m workshop.bench.gpu_report stem --out DIR --env F   # <date>-<gpu>: the results files' name
    python -m workshop.bench.gpu_report finish --out DIR --stem STEM --work DIR [--dry-run]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shutil
import socket
import sys
import tarfile
import tomllib
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path
from typing import Any

from workshop.bench.harness import REPO, device_slug, unique_stem
from workshop.slurm.node_check import driver_version
from workshop.training import run_record

PYPROJECT = REPO / "pyproject.toml"
# What was checked of the GPU machine's software before a GPU ever ran the check (benchmarks/README.md).
CHECKED_WITHOUT_A_GPU = (
    "2026-11-26, on a 2-core CPU machine: scripts/gpu_check.sh --dry-run (the wheels' hashes, their install "
    "for CPython 3.12 manylinux x86_64, the tier collected and skipped); in a venv with transformers 5.17.0, "
    "accelerate 1.15.0, tokenizers 0.23.2, torch 2.13.0 CPU and the carried wheels' versions, without datasets, "
    "nbgrader or wandb: tests/test_training.py (after a fix for 5.17's TrainingArguments; all but the test that "
    "asserts `datasets` is installed), the bench's CPU smoke run, and notebooks 01 and 02 executed with papermill "
    "on the local profile. Not checked without a GPU: torch 2.11 itself, CUDA, NCCL, fp16, the allocator's figures.")
# What the tier and the bench import beyond pyproject's pins (the carried wheels: scripts/gpu_wheels.lock).
ALSO = ("nbclient", "nbformat", "jupyter-client", "pyzmq", "tornado", "ipython", "numpy", "huggingface-hub",
        "safetensors")


# ---------------------------------------------------------------------------------------- versions


def pins(pyproject: Path = PYPROJECT) -> dict[str, str]:
    """{name: version} of every `name==version` in pyproject.toml (dependencies and extras)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    lines = list(project["dependencies"]) + [r for extra in project.get("optional-dependencies", {}).values()
                                             for r in extra]
    out = {}
    for line in lines:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;]+)\s*", line)
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    """'2.11.0+cu130' -> (2, 11, 0): the release numbers, without a local build label."""
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:4])


def drift(pinned: dict[str, str], here: dict[str, str | None]) -> list[dict[str, Any]]:
    """Each pinned package beside what this machine has: same, older, newer or missing."""
    rows = []
    for name, want in sorted(pinned.items()):
        got = here.get(name)
        if got is None:
            relation = "missing"
        elif _release(got) == _release(want):
            relation = "same" if got == want else f"same release ({got.split('+', 1)[1]} build)"
        else:
            relation = "older" if _release(got) < _release(want) else "newer"
        rows.append({"package": name, "pinned": want, "here": got, "relation": relation})
    return rows


# ---------------------------------------------------------------------------------------- the machine


def gpu() -> dict[str, Any]:
    """This machine's CUDA devices as torch sees them ({"count": 0} without one)."""
    import torch

    if not torch.cuda.is_available():
        return {"count": 0, "name": None, "why_none": f"torch {torch.__version__} sees no CUDA device"}
    props = torch.cuda.get_device_properties(0)
    return {"count": torch.cuda.device_count(), "name": props.name,
            "memory_gib": round(props.total_memory / 2**30, 1), "capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count, "driver": driver_version(),
            "cuda_runtime": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
            "nccl": ".".join(map(str, torch.cuda.nccl.version()))}


def commit() -> dict[str, Any]:
    """The course's commit: git's, where the checkout has its .git; else $GPU_CHECK_COMMIT, which the
    device call sets (the tool copies the working tree, not necessarily its history)."""
    sha = run_record.git_sha()
    if sha:
        return {"sha": sha, "from": "git"}
    given = os.environ.get("GPU_CHECK_COMMIT", "").strip()
    if given:
        return {"sha": given, "from": "GPU_CHECK_COMMIT (the caller's checkout; no .git here)"}
    return {"sha": None, "from": "unknown: no .git here and GPU_CHECK_COMMIT unset"}


def environment() -> dict[str, Any]:
    pinned = pins()
    here = {name: installed(name) for name in (*pinned, *ALSO)}
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"),
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(), "platform": platform.platform(), "python": platform.python_version(),
        "python_executable": sys.executable, "cpus": os.cpu_count(), "gpu": gpu(), "commit": commit(),
        "versions": here, "drift": drift(pinned, here),
    }


def stem_for(out_dir: Path, device_name: str | None, date: str | None = None) -> str:
    date = date or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    return unique_stem(out_dir, f"{date}-{device_slug(device_name or 'cpu')}")


# ---------------------------------------------------------------------------------------- the tier


def junit(path: Path) -> dict[str, Any]:
    """Counts and each test's outcome from pytest's --junitxml file."""
    if not path.is_file():
        return {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0, "outcomes": {},
                "note": f"no report at {path}: the tier did not run or was stopped"}
    outcomes: dict[str, str] = {}
    reasons: set[str] = set()
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        if case.find("failure") is not None:
            outcomes[name] = "failed"
        elif case.find("error") is not None:
            outcomes[name] = "error"
        elif (skip := case.find("skipped")) is not None:
            outcomes[name] = "skipped"
            reasons.add(skip.get("message", ""))
        else:
            outcomes[name] = "passed"
    counts = {k: sum(v == k for v in outcomes.values()) for k in ("passed", "failed", "error", "skipped")}
    return {"tests": len(outcomes), "passed": counts["passed"], "failed": counts["failed"], "errors": counts["error"],
            "skipped": counts["skipped"], "skip_reasons": sorted(reasons), "outcomes": outcomes}


def markdown(check: dict[str, Any]) -> str:
    """The check's section of the results markdown: machine, versions against the pins, the tier."""
    env, tests, figures = check["environment"], check["tests"], check.get("figures") or {}
    g = env["gpu"]
    lines = ["", "## GPU check (`scripts/gpu_check.sh`)", "",
             f"{g.get('name') or 'no GPU'}" + (f", {g['memory_gib']} GiB, compute {g['capability']}, driver "
                                              f"{g['driver']}, CUDA {g['cuda_runtime']}, cuDNN {g['cudnn']}, "
                                              f"NCCL {g['nccl']}" if g.get("name") else "")
             + f"; Python {env['python']} ({env['python_executable']}); {env['cpus']} CPUs; host {env['host']}; "
               f"commit `{env['commit']['sha']}` ({env['commit']['from']}).", "",
             "Versions against pyproject.toml (the course is pinned and tested with the left column):", "",
             "| package | pinned | here | |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['package']} | {r['pinned']} | {r['here'] or '-'} | {r['relation']} |"
              for r in env["drift"] if r["relation"] != "same"]
    same = [r["package"] for r in env["drift"] if r["relation"] == "same"]
    if same:
        lines += ["", f"Same as pinned: {', '.join(same)}."]
    lines += ["", f"Checked before a GPU ran it: {check['checked_without_a_gpu']}"]
    lines += ["", f"Tier (tests/gpu): {tests['passed']} passed, {tests['failed']} failed, {tests['errors']} errors, "
                  f"{tests['skipped']} skipped of {tests['tests']}." + (f" {tests['note']}" if tests.get("note") else ""),
              ""]
    bad = [n for n, o in tests["outcomes"].items() if o in ("failed", "error")]
    if bad:
        lines += ["Not passed: " + ", ".join(f"`{n}`" for n in bad) + ".", ""]
    ratios = [(k, v) for k, v in figures.items() if isinstance(v, dict) and "ratio" in v]
    if ratios:
        lines += ["| measured on one step (tier runs) | figure | allocator step peak MB | ratio |",
                  "| --- | ---: | ---: | ---: |"]
        for key, v in ratios:
            fig = v.get("tracker_peak_mb", v.get("gpu_peak_mb"))
            lines.append(f"| {key} | {fig:,.1f} | {v['allocator_step_peak_mb']:,.1f} | {v['ratio']:.3f} |")
        lines.append("")
    for key, v in figures.items():
        if key.startswith("fsdp2_vs_none"):
            lines.append(f"- {key}: {v['verdict']}; worst step {v['worst_step_rel']}")
    if "mfu" in figures:
        v = figures["mfu"]
        lines.append(f"- tier MFU (shared GPU, not a benchmark): {v['summary_mfu']} against "
                     f"{v['peak_tflops_bf16']} TFLOP/s bf16 for {v['device_name']}")
    return "\n".join(lines) + "\n"


def finish(out: Path, stem: str, work: Path, dry_run: bool = False) -> int:
    """Merge the environment, the tier's report and figures into <stem>.json/.md; copy the test report,
    the log and the executed notebooks beside them. Returns the check's exit code."""
    env = json.loads((work / "env.json").read_text())
    tests = junit(work / "tests.xml")
    figures_path = work / "figures.json"
    check = {"environment": env, "tests": tests, "dry_run": dry_run,
             "figures": json.loads(figures_path.read_text()) if figures_path.is_file() else {},
             "checked_without_a_gpu": CHECKED_WITHOUT_A_GPU}
    out.mkdir(parents=True, exist_ok=True)
    for name, suffix in (("tests.xml", "-tests.xml"), ("tests.txt", "-tests.txt"), ("log.txt", "-log.txt")):
        if (work / name).is_file():
            shutil.copyfile(work / name, out / f"{stem}{suffix}")
    notebooks = work / "notebooks"
    if notebooks.is_dir() and any(notebooks.iterdir()):
        with tarfile.open(out / f"{stem}-notebooks.tar.gz", "w:gz") as tar:
            tar.add(notebooks, arcname=f"{stem}-notebooks")
    if not dry_run:
        result_path = out / f"{stem}.json"
        result = json.loads(result_path.read_text()) if result_path.is_file() else {
            "date": env["date"], "device": "cuda", "device_name": env["gpu"].get("name"),
            "note": "the bench did not write this file (not run, or stopped): the GPU check's part only"}
        result["gpu_check"] = check
        if not result.get("git_sha"):
            result["git_sha"] = env["commit"]["sha"]
        result_path.write_text(json.dumps(result, indent=1, default=str) + "\n")
        md_path = out / f"{stem}.md"
        head = md_path.read_text() if md_path.is_file() else f"# GPU check — {env['gpu'].get('name')}, {env['date']}\n"
        md_path.write_text(head + markdown(check))
    else:
        (out / f"{stem}-check.json").write_text(json.dumps(check, indent=1, default=str) + "\n")
    if dry_run:
        ran = tests["passed"] + tests["failed"] + tests["errors"]
        print(f"no CUDA: {tests['skipped']} skipped" if env["gpu"]["count"] == 0 else
              f"CUDA is here ({env['gpu']['name']}): run without --dry-run")
        return 0 if tests["skipped"] > 0 and ran == 0 and env["gpu"]["count"] == 0 else 1
    print(f"tier: {tests['passed']} passed, {tests['failed']} failed, {tests['errors']} errors, {tests['skipped']} skipped")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workshop.bench.gpu_report", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("env", help="this machine and its versions, as JSON")
    p = sub.add_parser("stem", help="the results files' name: <date>-<gpu>, unique in --out")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--env", type=Path, required=True, help="the JSON `env` wrote")
    p = sub.add_parser("finish", help="merge the check into <stem>.json/.md and copy its reports beside them")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--stem", required=True)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    if args.command == "env":
        print(json.dumps(environment(), indent=1, default=str))
        return 0
    if args.command == "stem":
        env = json.loads(args.env.read_text())
        print(stem_for(args.out, env["gpu"].get("name"), env["date"]))
        return 0
    return finish(args.out, args.stem, args.work, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
