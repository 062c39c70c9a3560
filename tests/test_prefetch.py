"""The shared cache (issue 23, item 2): `workshop prefetch` fills a site's hf_home and proves, from a
read-only copy of it, that the jobs' offline load works; the guide's two lines run as written.

Nothing here reaches the Hub (HF_HUB_OFFLINE=1): the model is a tiny BLOOM put into the Hub cache the
way `hf download bigscience/bloom-560m` leaves the real one (refs/main -> a snapshot of the repo's files),
and SQuAD v1.1 comes from the course's shipped fixture, which has SQuAD's own JSON format.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_docs_commands import fenced, sh
from workshop.site.prefetch import read_only_copy
from workshop.training.data import squad_dir

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "workshop" / "assets" / "squad_fixture"
COMMIT = "b" * 40


def put_model_in_hub_cache(home: Path) -> None:
    """A tiny BLOOM and the course's offline tokenizer, saved as bigscience/bloom-560m in the Hub cache."""
    from transformers import BloomForCausalLM

    from workshop.training import models
    from workshop.training.tokenizer import load_offline_tokenizer

    tok = load_offline_tokenizer()
    repo = home / "hub" / "models--bigscience--bloom-560m"
    snapshot = repo / "snapshots" / COMMIT
    BloomForCausalLM(models.bloom_config(models.TINY, tok)).save_pretrained(snapshot)
    tok.save_pretrained(snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)


def site_profile(tmp_path: Path) -> Path:
    """The example site with its hf_home here and its sizes cut to the fixture's (50 train, 15 dev examples)."""
    text = (ROOT / "slurm/profiles/example-hpc.toml").read_text()
    text = text.replace('hf_home = "/shared/fsdp-workshop/hf_home"', f'hf_home = "{tmp_path / "hf_home"}"')
    text = re.sub(r"^train_size = \d+", "train_size = 24", text, flags=re.M)
    text = re.sub(r"^eval_size = \d+", "eval_size = 8", text, flags=re.M)
    path = tmp_path / "mysite.toml"
    path.write_text(text)
    return path


def rows(out: str) -> dict[str, tuple[str, str]]:
    """The table's lines: check -> (status, result)."""
    found = {}
    for line in out.splitlines():
        m = re.match(r"^(\S.*?)\s{2,}(ok|FIX|-|no GPU)\s{2,}(.*)$", line)
        if m:
            found[m.group(1)] = (m.group(2), m.group(3))
    return found


def test_the_guides_prefetch_lines_fill_the_cache_and_prove_a_read_only_offline_load(tmp_path: Path) -> None:
    guide = ROOT / "docs" / "instructor.md"
    lines = [ln for ln in fenced(guide, "## Before the workshop") if ln.startswith("workshop prefetch")]
    assert lines == ["workshop prefetch --profile <site>", "workshop prefetch --profile <site> --squad-json <squad dir>"]
    profile = site_profile(tmp_path)
    home = tmp_path / "hf_home"
    put_model_in_hub_cache(home)

    # the first line, on a machine that reaches no Hub: the model is there, SQuAD cannot come; it says what to do
    proc = sh(lines[0].replace("<site>", str(profile)), tmp_path)
    table = rows(proc.stdout)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert table["model bloom-560m"][0] == "ok" and "bigscience/bloom-560m" in table["model bloom-560m"][1]
    assert table["dataset squad"][0] == "FIX" and "--squad-json" in table["dataset squad"][1]
    assert "offline load: model" not in table                    # no proof of a cache that is not filled

    # the second: SQuAD's own JSON files (the fixture), then the proof on a read-only copy
    proc = sh(lines[1].replace("<site>", str(profile)).replace("<squad dir>", str(FIXTURE)), tmp_path)
    table = rows(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert table["read-only copy"][0] == "ok"
    status, text = table["offline load: model"]
    assert status == "ok" and text.startswith("bloom-560m (hub, ") and "tokenizer of 800 tokens" in text
    status, text = table["offline load: dataset"]
    assert status == "ok" and text.endswith("(train 24, dev 8 examples)") and "workshop-hf-readonly-" in text
    assert "nothing to fix" in proc.stdout
    saved = squad_dir(home)
    assert sorted(p.name for p in saved.iterdir()) == ["dataset_dict.json", "train", "validation"]


def _python(code: str, env: dict[str, str], prefix: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


def test_the_read_only_copy_refuses_datasets_lock_files(tmp_path: Path) -> None:
    """What the proof stands on: on the read-only copy, `load_dataset` of a dataset it prepared itself, offline,
    fails on its lock file, as it would on the students' shared cache (which is why jobs read the course's copy
    with `load_from_disk`: the test above loads it, through workshop.training.data, from such a copy)."""
    home = tmp_path / "hf_home"
    jsonl = tmp_path / "train.jsonl"
    from workshop.training.data import squad_rows

    jsonl.write_text("".join(json.dumps(r) + "\n" for r in squad_rows(json.loads((FIXTURE / "train.json").read_text()))))
    from datasets import load_dataset

    load_dataset("json", data_files={"train": str(jsonl)}, cache_dir=str(home / "datasets"))   # as a job once did
    assert list((home / "datasets").rglob("*.lock")), "load_dataset leaves lock files beside its cache"
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    again = f"from datasets import load_dataset; print(load_dataset('json', data_files={{'train': {str(jsonl)!r}}}))"

    with read_only_copy(home, tmp_path) as (copy, prefix):
        ro_env = {**env, "HF_HOME": str(copy), "HF_DATASETS_OFFLINE": "1"}
        proc = _python(again, ro_env, prefix)
        assert proc.returncode != 0
        assert re.search(r"(Read-only file system|Permission denied): '[^']*\.lock'", proc.stderr), proc.stderr[-2000:]
    assert not copy.exists()


def test_an_offline_machine_without_the_copy_is_told_to_prefetch(tmp_path: Path, monkeypatch) -> None:
    from workshop.training.config import ConfigError
    from workshop.training.data import load_examples

    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(ConfigError, match=r"config field 'dataset'.*not in the shared cache.*workshop prefetch"):
        load_examples("squad", "train", 8)
