"""Nothing lost: a run stopped by Slurm's time-limit warning (USR1) and resumed from its sharded
checkpoint ends exactly where the uninterrupted run ends (same data order, optimizer, scheduler).

The stop is real: SIGUSR1 is sent to one worker of a 2-process FULL_SHARD run while it trains,
at whatever step that happens to be. The ranks agree on the step, save, and exit; the resumed run's
eval losses must match the uninterrupted run's however many steps were done before the stop.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.runs import BASE_FLAGS, fork, train
from workshop.training.config import ConfigError, RunConfig, load_config

FLAGS = ["--sharding", "full_shard"]


def stop_with_usr1(out_dir: Path, after_step: int, nproc: int = 2) -> tuple[str, int]:
    """Start the run (its ranks forked as torchrun would start them, tests/runs.py), and once the log shows
    `after_step`, send USR1 to the last rank only."""
    out_dir.mkdir(parents=True, exist_ok=True)
    launch = fork([*BASE_FLAGS, *FLAGS, "--output-dir", str(out_dir), "--procs-per-node", str(nproc)], nproc=nproc,
                  module="workshop.training.train")
    reached = re.compile(rf"^\[workshop\] step {after_step}/", re.M)
    sent = False
    deadline = time.monotonic() + 300
    while not sent and time.monotonic() < deadline and all(r.poll() is None for r in launch.ranks):
        if reached.search(launch.text()):
            os.kill(launch.ranks[-1].pid, signal.SIGUSR1)
            sent = True
        else:
            time.sleep(0.1)
    (log,), rc = launch.finish(max(1.0, deadline - time.monotonic()))
    assert sent, "the run never reached step %d:\n%s" % (after_step, log[-5000:])
    return log, rc


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int]:
    out = tmp_path_factory.mktemp("resume") / "run"
    log, rc = stop_with_usr1(out, after_step=3)
    return out, log, rc


def test_usr1_on_one_rank_stops_every_rank_at_one_checkpoint(stopped) -> None:
    out, log, rc = stopped
    assert rc == 0, log[-3000:]
    line = next(x for x in log.splitlines() if x.startswith("WORKSHOP_CHECKPOINT "))
    info = json.loads(line.split(" ", 1)[1])
    step = info["step"]
    assert 3 <= step < 12 and info["status"] == "checkpointed"
    ckpt = out / f"checkpoint-{step}"
    # sharded: one model and one optimizer shard per rank, no gathered copy
    assert sorted(p.name for p in (ckpt / "pytorch_model_fsdp_0").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert sorted(p.name for p in (ckpt / "optimizer_0").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert (ckpt / "scheduler.pt").is_file() and (ckpt / "rng_state_1.pth").is_file()
    assert not (out / "summary.json").exists()           # the run did not finish: no summary
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == step


def test_resumed_run_matches_the_uninterrupted_run(stopped, runs) -> None:
    out, log, _ = stopped
    step = json.loads(next(x for x in log.splitlines() if x.startswith("WORKSHOP_CHECKPOINT ")).split(" ", 1)[1])["step"]
    t0 = time.monotonic()
    resumed = train(out, [*FLAGS, "--resume"], nproc=2).summary
    seconds = time.monotonic() - t0
    whole = runs.get(*FLAGS, nproc=2).summary
    print(f"\nresume: stopped at step {step}/12, resumed in {seconds:.1f} s; eval losses "
          f"uninterrupted {whole['eval_losses']} vs resumed {resumed['eval_losses']}")
    assert resumed["resumed_from_step"] == step
    assert resumed["steps"] == whole["steps"] == 12
    assert resumed["eval_losses"] == pytest.approx(whole["eval_losses"], rel=1e-3)
    assert resumed["train_loss"] == pytest.approx(whole["train_loss"], rel=1e-3)
    # every step logged once: the resumed run appends to the stopped run's records
    trains = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in trains if r["kind"] == "train"] == list(range(1, 13))


def test_resume_without_a_checkpoint_says_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from workshop.training.train import main

    rc = main(["--output-dir", str(tmp_path / "empty"), "--resume"])
    err = capsys.readouterr().err
    assert rc == 2 and "config field 'resume'" in err and "checkpoint_every" in err


def test_checkpoint_fields_are_validated() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(overrides={"checkpoint_every": -1})
    assert e.value.field == "checkpoint_every"
    assert load_config(overrides={"checkpoint_every": "20", "resume": "yes"}).resume is True
    assert RunConfig().checkpoint_every == 0


def test_checkpoint_at_end_saves_the_last_step_only(tmp_path: Path) -> None:
    """One sharded checkpoint, of the last step, and none before it: what notebook 05 merges."""
    done = train(tmp_path / "run", ["--sharding", "full_shard", "--checkpoint-at-end"], nproc=2)
    steps = done.summary["steps"]
    assert steps > 1
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint-*")) == [f"checkpoint-{steps}"]
    assert len(list((tmp_path / "run" / f"checkpoint-{steps}" / "pytorch_model_fsdp_0").glob("*.distcp"))) == 2


def test_resume_is_the_same_job_and_needs_an_earlier_one_with_a_checkpoint(tmp_path: Path) -> None:
    from workshop.slurm.profiles import load_profile
    from workshop.slurm import job_key, submit

    prof = load_profile("local")
    cfg = RunConfig(train_size=8, eval_size=4)
    assert job_key("baseline", cfg, prof, "n") == job_key("baseline", cfg.replace(resume=True), prof, "n")
    with pytest.raises(ConfigError, match="no earlier job") as e:
        submit("baseline", profile="local", overrides={"train_size": 8}, jobs_dir=tmp_path / "jobs", resume=True)
    assert e.value.field == "resume"
