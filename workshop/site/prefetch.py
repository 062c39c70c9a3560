"""`workshop prefetch --profile <site>`: fill the shared cache on a login node, then prove jobs can read it.

Compute nodes have no internet, so the model and SQuAD must be in the profile's `hf_home` before the
class. On a login node this downloads `bigscience/bloom-560m` (its config, tokenizer and safetensors
weights, nothing else of the repository) into the Hub cache, and SQuAD v1.1 into the course's copy
(`$HF_HOME/workshop/squad-v1.1`, see workshop/training/hf_cache.py). A login node without the Hub
either can bring SQuAD v1.1's own JSON files (`--squad-json DIR`: train-v1.1.json and dev-v1.1.json,
or the course's shipped fixture, train.json and dev.json).

Then the proof: a copy of the cache, made read-only (for root, whom permission bits do not stop, a
read-only mount of it in a mount namespace of its own), and in a fresh process with the jobs'
settings (HF_HOME = the copy, HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1) the load a job makes: tokenizer,
model, the steps' train and eval examples. Any write it would need (a lock file of `datasets`, a
download) fails there, as it would on the students' read-only cache. One table; exit 1 when a line
needs a fix.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from workshop.site.checklist import FIX, INFO, OK, Line, exit_code, table
from workshop.slurm.profiles import Profile, ProfileError, load_profile

MODEL_FILES = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "*.safetensors"]      # not the repo's .bin, flax or onnx copies
SQUAD_FILES = (("train-v1.1.json", "dev-v1.1.json"), ("train.json", "dev.json"))
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def needs(profile: Profile) -> dict[str, Any]:
    """What the course's jobs load on this site: the model, the dataset, the most examples any step reads."""
    from workshop.slurm.steps import STEPS, step_config

    configs = [step_config(s, profile) for s, info in STEPS.items() if info.program == "train"]
    return {"model": configs[0].model, "dataset": configs[0].dataset,
            "train_size": max(c.train_size for c in configs), "eval_size": max(c.eval_size for c in configs),
            "eval_split": configs[0].eval_split}


def fill_model(model: str, home: Path) -> Line:
    from workshop.training import models

    prof = models.resolve_profile(model)
    if not prof.needs_hub:
        return Line(f"model {model}", OK, "nothing to fetch: " + ("built from its config (random weights)"
                                                                   if prof.source == "random" else "a local folder"))
    from huggingface_hub import snapshot_download

    try:
        path = snapshot_download(models.HUB_ID, allow_patterns=MODEL_FILES, cache_dir=str(home / "hub"))
    except Exception as e:      # noqa: BLE001 -- offline, a proxy, a gated repo: each is a line to fix
        return Line(f"model {model}", FIX, f"could not fetch {models.HUB_ID} ({type(e).__name__}: {str(e)[:200]}). "
                    "Fix: run prefetch on a login node that reaches huggingface.co (a proxy: HTTPS_PROXY)")
    size = sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file())
    return Line(f"model {model}", OK, f"{models.HUB_ID} in {home / 'hub'} ({size / 1e9:.2f} GB)")


def read_squad_json(folder: Path) -> dict[str, Any]:
    """SQuAD v1.1's JSON files in `folder` as the Hub's splits."""
    from datasets import Dataset

    from workshop.training.data import squad_rows

    for train, dev in SQUAD_FILES:
        if (folder / train).is_file() and (folder / dev).is_file():
            return {split: Dataset.from_list(squad_rows(json.loads((folder / name).read_text())))
                    for split, name in (("train", train), ("validation", dev))}
    raise FileNotFoundError(f"no {' / '.join(a + ' + ' + b for a, b in SQUAD_FILES)} in {folder}")


def fill_dataset(dataset: str, home: Path, squad_json: Path | None) -> Line:
    from workshop.training import hf_cache

    if dataset != "squad":
        return Line(f"dataset {dataset}", OK, "nothing to fetch: it ships with the course")
    try:
        if squad_json is not None:
            splits, source = read_squad_json(squad_json), str(squad_json)
        else:
            from datasets import load_dataset
            splits, source = dict(load_dataset("rajpurkar/squad")), "rajpurkar/squad"
    except Exception as e:      # noqa: BLE001
        return Line("dataset squad", FIX, f"could not read SQuAD v1.1 ({type(e).__name__}: {str(e)[:200]}). Fix: run "
                    "prefetch where huggingface.co answers, or pass --squad-json DIR with train-v1.1.json and "
                    "dev-v1.1.json (rajpurkar.github.io/SQuAD-explorer)")
    dest = hf_cache.save_squad(splits, home)
    counts = ", ".join(f"{k} {len(v)}" for k, v in splits.items())
    return Line("dataset squad", OK, f"SQuAD v1.1 from {source} saved in {dest} ({counts} examples)")


@contextmanager
def read_only_copy(home: Path, under: Path | None = None) -> Iterator[tuple[Path, list[str]]]:
    """A copy of the cache and the command prefix that runs a process on it read-only.

    A normal user: the copy loses every write bit. Root writes through those, so root gets a read-only
    bind mount of the copy in a mount namespace of its own (`unshare --mount`); nothing outside changes."""
    tmp = Path(tempfile.mkdtemp(prefix="workshop-hf-readonly-", dir=under))
    copy = tmp / "hf_home"
    shutil.copytree(home, copy, symlinks=True)
    prefix: list[str] = []
    try:
        if os.geteuid() == 0 and shutil.which("unshare"):
            prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                      'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"', str(copy)]
        else:
            _chmod_tree(copy, writable=False)
        yield copy, prefix
    finally:
        _chmod_tree(copy, writable=True)
        shutil.rmtree(tmp, ignore_errors=True)


def _chmod_tree(root: Path, writable: bool) -> None:
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder, name)
            if not path.is_symlink():
                mode = path.stat().st_mode
                path.chmod(mode | 0o200 if writable else mode & ~0o222)
    mode = root.stat().st_mode
    root.chmod(mode | 0o200 if writable else mode & ~0o222)


def prove(home: Path, want: dict[str, Any], under: Path | None = None) -> list[Line]:
    """Run the jobs' offline load (workshop.training.hf_cache, in a fresh process) on a read-only copy."""
    loader = [sys.executable, "-m", "workshop.training.hf_cache", "--model", want["model"],
                        "--dataset", want["dataset"], "--train-size", str(want["train_size"]),
                        "--eval-size", str(want["eval_size"]), "--eval-split", want["eval_split"]]
    with read_only_copy(home, under) as (copy, prefix):
        env = {**os.environ, **OFFLINE, "HF_HOME": str(copy)}
        env.pop("HF_HUB_CACHE", None)
        env.pop("HF_DATASETS_CACHE", None)
        proc = subprocess.run([*prefix, *loader], env=env, capture_output=True, text=True, timeout=1800)
    try:
        report = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return [Line("offline load", FIX, f"the proof's process printed no report (exit {proc.returncode}): "
                     f"{(proc.stderr or proc.stdout).strip()[-400:]}")]
    lines = [Line("read-only copy", OK if report.get("cache_writable") is False else FIX,
                  f"{copy} (deleted after the proof)" if report.get("cache_writable") is False else
                  "the copy could still be written, so the proof would prove nothing. Fix: run prefetch as a "
                  "normal user (or as root where `unshare --mount` works)")]
    return lines + report_lines(report, "offline load")


def report_lines(report: dict[str, Any], where: str) -> list[Line]:
    """hf_cache's report as lines: the model, the dataset, each ok or the fix."""
    fix = "run `workshop prefetch --profile <site>` on a login node, and keep the cache readable by everyone"
    out = []
    if "model_ok" in report:
        m = report["model_ok"]
        out.append(Line(f"{where}: model", OK, f"{report['model']} ({m['source']}, {m['params']:,} parameters, "
                        f"tokenizer of {m['tokenizer_tokens']:,} tokens)"))
    else:
        out.append(Line(f"{where}: model", FIX, _with_fix(report.get("model_error", "not loaded"), fix)))
    if "dataset_ok" in report:
        d = report["dataset_ok"]
        counts = ", ".join(f"{k} {v}" for k, v in d.items() if k != "from")
        source = "the course package" if d["from"] == "fixture" else d["from"]
        out.append(Line(f"{where}: dataset", OK, f"{report['dataset']} from {source} ({counts} examples)"))
    else:
        out.append(Line(f"{where}: dataset", FIX, _with_fix(report.get("dataset_error", "not loaded"), fix)))
    return out


def _with_fix(error: str, fix: str) -> str:
    """The error as reported; with the course's fix unless the error already says what to do."""
    return error if "Fix:" in error else f"{error}. Fix: {fix}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="workshop prefetch", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default=None, help="site profile (name or .toml path); its [env] hf_home is filled")
    ap.add_argument("--hf-home", default=None, help="fill this folder instead of the profile's hf_home")
    ap.add_argument("--squad-json", type=Path, default=None,
                    help="a folder with SQuAD v1.1's train-v1.1.json and dev-v1.1.json (no Hub needed for the data)")
    ap.add_argument("--copy-dir", type=Path, default=None, help="where the proof's read-only copy goes (default: $TMPDIR)")
    args = ap.parse_args(argv)
    try:
        profile = load_profile(args.profile)
        want = needs(profile)
    except ProfileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    where = args.hf_home or os.path.expandvars(profile.hf_home)
    if not where:
        print(f"error: profile {profile.source}: field 'env.hf_home': not set, so jobs would look for the model and "
              "data in each user's own ~/.cache. Fix: set hf_home = \"/shared/...\" (a folder every node reads), or "
              "pass --hf-home DIR", file=sys.stderr)
        return 2
    home = Path(where).expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["HF_HOME"] = str(home)              # before huggingface_hub reads it (at its import)
    lines = [Line("hf_home", INFO, f"{home} (jobs: model {want['model']}, dataset {want['dataset']}, up to "
                  f"{want['train_size']} train and {want['eval_size']} eval examples)")]
    lines.append(fill_model(want["model"], home))
    lines.append(fill_dataset(want["dataset"], home, args.squad_json))
    if not any(x.needs_fix for x in lines):
        lines += prove(home, want, under=args.copy_dir)
    print(table(lines, f"workshop prefetch: profile {profile.name}"))
    if not exit_code(lines):
        print(f"Students read {home} and never write it: keep it so (e.g. chmod -R a-w, or owned by you with "
              "go-w); every job reads it offline.")
    return exit_code(lines)


if __name__ == "__main__":
    sys.exit(main())
