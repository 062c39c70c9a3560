"""Issue #50 item 5: where a notebook compares a model with a case no job runs (03's 8-GPU node, 05's 2 nodes x 8),
the dry run's figures at BLOOM-560M's real size reach the student in the feedback once graded (`checks.reveal`),
never before: in the live notebook the cell runs no dry run and shows nothing of it. The cells are read out of
the released notebooks (what the student has) and run as written, with a real Lab and real dry runs.

A grader meets two cases: the first student graded, whose reveal runs the dry runs (a process of its own) into the
jobs folder's cache and the grader's; and every later student, whose reveal reads the grader's cache. In a suite run
the course's own grading (the `local` profile: the same configs, the suite's $WORKSHOP_DRYRUN_CACHE) has usually
dry-run the cells' BLOOM-560M pairs already: the reveal test then takes the later student's case from those
(13-15 CPU-s each saved), and a tiny config takes the first student's; alone, or first, it runs them itself and
leaves them for the course's grading."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import pytest

from workshop.slurm.fit import config_hash, write_cached
from workshop.student import checks
from workshop.student import lab as lab_module
from workshop.student.lab import Lab

ROOT = Path(__file__).resolve().parents[1]
CELLS = {"03_sharding_strategies": ("nb03-paper-reveal", ("shard_grad_op", "full_shard")),
         "05_multi_node": ("nb05-paper-reveal", ("full_shard", "hybrid_shard"))}


def released_cell(assignment: str, cell_id: str) -> str:
    nb = json.loads((ROOT / "notebooks" / assignment / f"{assignment}.ipynb").read_text())
    [cell] = [c for c in nb["cells"] if c["id"] == cell_id]
    assert cell["metadata"]["nbgrader"]["locked"] and not cell["metadata"]["nbgrader"]["grade"]
    return "".join(cell["source"])


def run_cell(source: str, lab: Lab):
    """The cell as a kernel runs it: every statement, then the last expression's value (what is displayed)."""
    import pandas as pd

    tree = ast.parse(source)
    namespace = {"checks": checks, "lab": lab, "pd": pd}
    exec(compile(ast.Module(tree.body[:-1], type_ignores=[]), "<cell>", "exec"), namespace)
    return eval(compile(ast.Expression(tree.body[-1].value), "<cell>", "eval"), namespace)


GRADER_CACHE = ("cache", "fsdp-workshop", "dryrun")   # under $XDG_CACHE_HOME: the account's (shared_dry_run_cache)


def lab_on(profile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Lab:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("WORKSHOP_DRYRUN_CACHE", raising=False)    # the account's cache, not the suite's
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    return Lab(profile, jobs_dir=tmp_path / "jobs", quiet=True)


@pytest.fixture
def lab(tmp_path, monkeypatch):
    return lab_on("ci", tmp_path, monkeypatch)


@pytest.fixture
def course_lab(tmp_path, monkeypatch):
    """On the profile the course is run and graded on: the cells' configs are the ones its grading dry-runs."""
    return lab_on("local", tmp_path, monkeypatch)


class Asking(Lab):
    """A Lab that runs nothing: it records the configs a cell asks `lab.paper` for."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[str] = []

    def paper(self, step: str, **changes):
        import pandas as pd

        self.asked.append(f"{config_hash(self.config(step, **changes))}.json")
        return pd.DataFrame()


def cell_dry_runs(source: str, lab: Lab) -> list[str]:
    """The cache names (config hashes) of the dry runs the cell shows while grading."""
    asking = Asking(lab.profile.name, jobs_dir=lab.jobs_dir, quiet=True)
    run_cell(source, asking)
    return asking.asked


def copy_whole(src: Path, dest: Path) -> None:
    """Whole or absent, as workshop.slurm.fit writes a cache (write_cached): another process may read `dest`
    at once."""
    write_cached(dest.parent, dest.name, json.loads(src.read_text()))


def from_the_suite(suite: Path, names: list[str], grader: Path) -> bool:
    """A later student's grading: the grader's cache holds the cell's dry runs, taken from the suite's cache where
    it holds every one of them (valid JSON: a cache file may be being written); False (nothing copied) if not."""
    try:
        if not all(json.loads((suite / n).read_text()).get("params_total") for n in names):
            return False
    except (OSError, ValueError):
        return False
    for name in names:
        copy_whole(suite / name, grader / name)
    return True


def filler_ended(grader: Path, within_s: float = 30) -> bool:
    """No filler's marker or config file left in the grader's cache: a filler removes both just after writing
    its result, which the reveal may have read already."""
    def left() -> list[Path]:
        return [*grader.glob("*.running"), *grader.glob("*.config.json")]

    deadline = time.monotonic() + within_s
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    return not left()


def test_the_reveal_cells_come_after_every_graded_cell():
    """After the test cells: the student's answers are written (and graded) before the figures exist."""
    for assignment, (cell_id, _) in CELLS.items():
        nb = json.loads((ROOT / "notebooks" / assignment / f"{assignment}.ipynb").read_text())
        ids = [c["id"] for c in nb["cells"]]
        graded = [i for i, c in enumerate(nb["cells"]) if c["metadata"].get("nbgrader", {}).get("grade")]
        assert ids.index(cell_id) > max(graded), assignment


@pytest.mark.parametrize("assignment", sorted(CELLS))
def test_the_dry_run_is_absent_in_the_live_notebook_and_in_the_feedback_once_graded(assignment, course_lab, tmp_path,
                                                                                    monkeypatch, capsys,
                                                                                    dry_run_cache):
    lab = course_lab
    cell_id, strategies = CELLS[assignment]
    source = released_cell(assignment, cell_id)
    # the live notebook: no figure, no dry run (nothing cached anywhere), a line saying where it will be
    assert run_cell(source, lab) is None
    assert "shown in your feedback, once your answers are graded" in capsys.readouterr().out
    assert not (tmp_path / "jobs" / ".dryrun").exists() and not (tmp_path / "cache").exists()
    # graded: the dry runs at BLOOM-560M's size, beside the memory model, for each strategy (this shared
    # machine may take longer than a grader's 55 s each: the timeout is the next test's)
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setattr(lab_module, "PAPER_GRADING_S", 600)
    names, grader = cell_dry_runs(source, lab), tmp_path.joinpath(*GRADER_CACHE)
    assert len(set(names)) == len(strategies)
    later = from_the_suite(dry_run_cache, names, grader)
    table = run_cell(source, lab)
    assert sorted({s for s, _ in table.columns}) == sorted(strategies)
    for strategy in strategies:
        column = table[strategy].iloc[:, 0]
        assert column["peak (MB)"] > 1000   # BLOOM-560M's logits alone, not the tiny model's MB
        assert column["all_gather: MB sent per step"] > 100 and column["reduce_scatter: calls per step"] > 0
    assert all(json.loads((grader / n).read_text())["params_total"] == 559_214_592 for n in names)
    assert filler_ended(grader)   # each filler ended and said so
    if later:   # a later student's: read from the grader's cache, no dry run started, nothing else written
        assert not (tmp_path / "jobs" / ".dryrun").exists()
        return
    # the first student's: the cell's dry runs ran, into the jobs folder's cache and the grader's (the next
    # student reads these), and no other
    assert sorted(p.name for p in (tmp_path / "jobs" / ".dryrun").glob("*.json")) == sorted(names)
    assert sorted(p.name for p in grader.glob("*.json")) == sorted(names)
    for name in names:    # for the course's grading in this suite, if it comes later
        copy_whole(grader / name, dry_run_cache / name)


def test_a_graded_reveal_with_nothing_cached_waits_for_its_dry_run_and_fills_both_caches(lab, monkeypatch, tmp_path):
    """The first student graded, on a tiny config (the test above takes this case at BLOOM-560M's size when it runs
    before the course's grading, or alone): the reveal starts the dry run in a process of its own, waits for it,
    shows its figures, and leaves them in the jobs folder's cache and the grader's, with no marker or config file."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setattr(lab_module, "PAPER_GRADING_S", 600)
    tiny = dict(model="tiny", nodes=1, procs_per_node=2, sharding="full_shard", max_length=32)
    table = lab.paper("multi_node", **tiny)
    assert table["dry run (fake tensors, CPU device: tensor bytes only)"]["reduce_scatter: calls per step"] > 0
    name, grader = f"{config_hash(lab.config('multi_node', **tiny))}.json", tmp_path.joinpath(*GRADER_CACHE)
    assert [p.name for p in (tmp_path / "jobs" / ".dryrun").iterdir()] == [name]
    assert filler_ended(grader) and [p.name for p in grader.iterdir()] == [name]


def test_a_dry_run_too_long_for_grading_goes_on_and_the_next_notebook_graded_shows_it(lab, monkeypatch, tmp_path):
    """nbgrader stops a cell after 120 s (nbgrader_config.py) and fails the notebook: a reveal must not. Past its
    wait the dry run goes on in a process of its own and fills the grader's cache for the next student."""
    import time

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setattr(lab_module, "PAPER_GRADING_S", 0.1)
    tiny = dict(model="tiny", nodes=1, procs_per_node=2, sharding="full_shard", max_length=64)
    [said] = lab.paper("multi_node", **tiny)["dry run"]
    assert said.startswith("still running after 0.1 s while grading (the next notebook graded shows it); this "
                           "computes it too: workshop dryrun multi_node --profile ci ") and "--set model=tiny" in said
    # the next notebook graded while it runs waits for nothing (one filler per machine, each grading would wait)
    monkeypatch.setattr(lab_module, "PAPER_GRADING_S", 60)
    started = time.monotonic()
    again = lab.paper("multi_node", **tiny)
    assert "dry run" not in again.columns or time.monotonic() - started < 5
    shared = tmp_path / "cache" / "fsdp-workshop" / "dryrun"
    deadline = time.monotonic() + 240
    while not list(shared.glob("*[0-9a-f].json")) and time.monotonic() < deadline:
        time.sleep(1)
    assert not list(shared.glob("*.running")) or list(shared.glob("*[0-9a-f].json"))
    table = lab.paper("multi_node", **tiny)   # the next student: read from the cache at once
    assert table["dry run (fake tensors, CPU device: tensor bytes only)"]["reduce_scatter: calls per step"] > 0
