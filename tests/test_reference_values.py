"""The hidden tests' reference values (issue 48): data in the grading room, equal to the course's models.

`workshop/grading/reference_values.json` is what every hidden test that grades against the memory model, the
communication model, the bus-bandwidth rule, the Trainer's step arithmetic or the training script's encoding reads,
so that no hidden test calls code the student's install holds. These tests keep the table equal to those models:
a model change that moves a reference fails here and names the command that rewrites it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workshop.grading import references
from workshop.results.memory import estimate_config
from workshop.slurm.profiles import available, load_profile
from workshop.slurm.steps import scaling_plan, step_config
from workshop.training.counted_steps import expected_steps

ROOT = Path(__file__).resolve().parent.parent


def test_the_committed_table_is_what_the_models_give_today(capsys: pytest.CaptureFixture[str]) -> None:
    """The same check in-process (the fast tier's: a model change that moves a reference fails here first)."""
    assert references.main([]) == 0, f"the hidden tests' references moved: run `{references.FIX}` and commit the file"
    assert capsys.readouterr().out.strip().endswith("current")


def test_the_committed_table_is_what_the_docs_command_writes_today(tmp_path: Path) -> None:
    """docs/grading.md's and docs/design.md's command, as written, in a copy of the package (so the committed file
    is never rewritten by a test): it writes what is committed, byte for byte."""
    import os
    import shutil
    import subprocess
    import sys

    shutil.copytree(ROOT / "workshop", tmp_path / "workshop",
                    ignore=shutil.ignore_patterns("__pycache__", references.SITE_FILE.name))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH")}
    done = subprocess.run(references.FIX.split(), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    written = tmp_path / "workshop" / "grading" / references.VALUES_FILE.name
    assert done.returncode == 0 and f"wrote {written}" in done.stdout, done.stdout + done.stderr
    assert written.read_text() == references.VALUES_FILE.read_text(), \
        f"the hidden tests' references moved: run `{references.FIX}` and commit the file"


def test_a_reference_that_moved_is_named_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    table = json.loads(references.VALUES_FILE.read_text())
    table["bus_factor"][references.key("all_reduce", 8)] = 1.5          # 2 (8 - 1) / 8 = 1.75 in the rule
    stale = tmp_path / "reference_values.json"
    stale.write_text(references.dumps(table))
    monkeypatch.setattr(references, "VALUES_FILE", stale)
    assert references.main([]) == 1
    assert references.FIX in capsys.readouterr().out
    assert references.bus_factor(8) == 1.5                              # the hidden tests read the file, not the rule


def test_a_case_the_table_lacks_names_the_command_that_writes_it() -> None:
    with pytest.raises(KeyError, match=r"python -m workshop\.grading\.references --profile"):
        references.memory_mb("bloom-3b", "full_shard", 5, "bf16", "cuda")


def test_a_sites_own_profile_gets_its_rows_beside_the_committed_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A site's profile (here: the local one with bf16 and a batch of 3, which no shipped profile runs) misses
    notebook 03's ranking until the course run or grading writes its rows; the committed table is left as it is."""
    profile = tmp_path / "our-site.toml"
    profile.write_text((ROOT / "workshop/slurm/files/profiles/local.toml").read_text()
                       .replace('name = "local"', 'name = "our-site"').replace("batch_size = 2", "batch_size = 3")
                       + '\n[run.strategies]\nprecision = "bf16"\n')
    monkeypatch.setattr(references, "SITE_FILE", tmp_path / "reference_values.site.json")
    committed = references.VALUES_FILE.read_text()
    configs = {run: step_config(spec["step"], load_profile(profile), {k: v for k, v in spec.items() if k != "step"})
               for run, spec in references.strategy_runs().items()}
    with pytest.raises(KeyError, match="--profile"):
        references.peak_ranking(configs)
    references.rows_for_the_sites([str(profile)])
    assert "wrote the hidden tests' references" in capsys.readouterr().out
    assert references.peak_ranking(configs) == sorted(configs, key=lambda run: estimate_config(configs[run]).peak)
    assert references.VALUES_FILE.read_text() == committed
    assert references.add_site_rows([str(profile)]) == []                 # written once


@pytest.mark.parametrize("name", available())
def test_every_shipped_profile_has_its_sites_rows(name: str) -> None:
    """Notebook 03's ranking, notebook 04's plan and the bandwidth job's ranks, for every profile the course ships."""
    profile = load_profile(name)
    configs = {run: step_config(spec["step"], profile, {k: v for k, v in spec.items() if k != "step"})
               for run, spec in references.strategy_runs().items()}
    assert references.peak_ranking(configs) == sorted(configs, key=lambda run: estimate_config(configs[run]).peak)
    plan = scaling_plan(profile, {})
    for n in plan.gpu_counts:
        case = (references.SQUAD_TRAIN, 1, plan.micro_batch, plan.global_batch // (plan.micro_batch * n), n)
        assert references.optimizer_steps(*case) == expected_steps(*case)
    ranks = step_config("bandwidth", profile, {"nodes": 2}).world_size
    assert references.bus_factor(ranks) == pytest.approx(2 * (ranks - 1) / ranks)


def test_the_failed_jobs_category_is_what_diagnose_reads_in_that_failure() -> None:
    """Notebook 05's broken job (a rendezvous endpoint no node serves): its recorded failure's category."""
    from workshop.results.diagnose import diagnose

    assert diagnose(ROOT / "tests" / "fixtures" / "logs" / "rendezvous_failure.log")[0].kind \
        == references.FAILED_RENDEZVOUS_KIND


def test_the_encoding_rows_are_the_training_scripts_for_the_offline_tokenizer() -> None:
    from workshop.training import models
    from workshop.training.data import encode_for_training, load_examples

    config = step_config("baseline", load_profile("ci"), {})
    tok = models.load_tokenizer(config.model)
    examples = load_examples(config.dataset, "train", config.train_size + 20)
    for i in references.UNSEEN:
        ex = examples[config.train_size + i]
        for length in (config.max_length, references.SHORT_LENGTH):
            assert references.encoded(tok, ex, length) == encode_for_training(tok, ex, length)
