"""The day's schedule: the queue simulation against cases worked by hand (FIFO, backfill, a student's waves),
and the example site's 20-student day fitting its agenda in the mode the profile ships."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workshop.site.schedule import (Day, NotebookDay, SimJob, class_jobs, day_timeline, job_duration, plan_day,
                                      reading_s, simulate)
from workshop.slurm.profiles import PROFILES_DIR, ProfileError, load_profile, time_seconds

ROOT = Path(__file__).resolve().parent.parent
SITE = load_profile("example-hpc")
TWO_NODES = {"p": (2, 4)}          # 2 nodes x 4 GPUs


def by_name(placed: list) -> dict[str, tuple[float, float, float]]:
    return {p.job.name: (p.start_s, p.end_s, p.wait_s) for p in placed}


def job(name: str, nodes: int, gpus: int, duration: float, limit: float | None = None, **kw: object) -> SimJob:
    return SimJob(name, "p", nodes, gpus, duration, duration if limit is None else limit, **kw)


# A: one whole node, 10 s. B: both whole nodes, 5 s. C, D: half a node each, 3 s. Submitted at 0 in that order.
QUEUE = [job("A", 1, 4, 10), job("B", 2, 4, 5, student=1), job("C", 1, 2, 3, student=2), job("D", 1, 2, 3, student=3)]


def test_strict_fifo_by_hand() -> None:
    """t=0: A takes node 0; B needs both nodes: blocked, and nothing behind it starts (strict FIFO).
    t=10: A ends, B takes both nodes until 15. t=15: C and D share node 0 until 18.
    Waits: A 0, B 10, C 15, D 15; makespan 18."""
    got = by_name(simulate(QUEUE, TWO_NODES, backfill=False))
    assert got == {"A": (0, 10, 0), "B": (10, 15, 10), "C": (15, 18, 15), "D": (15, 18, 15)}


def test_backfill_by_hand() -> None:
    """t=0: A takes node 0; B is blocked and sure to start at 10 (A's limit). C and D fit on node 1 now and
    their limits end at 3 <= 10: they start at once, sharing node 1 until 3. t=10: B runs until 15.
    Waits: A 0, B 10, C 0, D 0; makespan 15 (3 less than FIFO)."""
    got = by_name(simulate(QUEUE, TWO_NODES, backfill=True))
    assert got == {"A": (0, 10, 0), "B": (10, 15, 10), "C": (0, 3, 0), "D": (0, 3, 0)}


def test_backfill_plans_with_time_limits_not_durations() -> None:
    """E would run 2 s but asks for 20: 0 + 20 > 10 (B's start), so backfill leaves it. t=10: B runs
    on both nodes to 15; t=15: E runs to 17. A job that ran 25 s under a 12 s limit ends at its limit."""
    queue = [job("A", 1, 4, 10), job("B", 2, 4, 5, student=1), job("E", 1, 2, 2, limit=20, student=2)]
    assert by_name(simulate(queue, TWO_NODES, backfill=True)) == {"A": (0, 10, 0), "B": (10, 15, 10), "E": (15, 17, 15)}
    assert by_name(simulate([job("T", 1, 4, 25, limit=12)], TWO_NODES)) == {"T": (0, 12, 0)}


def test_a_students_next_cell_waits_for_the_last_job_of_the_one_before() -> None:
    """One node of 4 GPUs. Student 0: wave 0 = X (4 GPUs, 6 s); wave 1 = Y (2 GPUs, 1 s). Student 1: wave 0 =
    Z (2 GPUs, 4 s). t=0: X takes the node; Z waits. t=6: X ends, student 0 submits Y at 6, after Z (submitted
    at 0): Z runs 6-10 and Y fits beside it, 6-7. Waits: X 0, Z 6, Y 0."""
    queue = [SimJob("X", "p", 1, 4, 6, 6, student=0, wave=0), SimJob("Y", "p", 1, 2, 1, 1, student=0, wave=1),
             SimJob("Z", "p", 1, 2, 4, 4, student=1, wave=0)]
    placed = simulate(queue, {"p": (1, 4)}, backfill=False)
    assert by_name(placed) == {"X": (0, 6, 0), "Z": (6, 10, 6), "Y": (6, 7, 0)}
    assert {p.job.name: p.submit_s for p in placed} == {"X": 0, "Z": 0, "Y": 6}


def test_students_submit_after_reading_in_order_of_their_reading() -> None:
    """One node of 4 GPUs. Student 0 submits R (4 GPUs, 6 s) at 5; student 1 submits S (4 GPUs, 2 s) at 3. Nothing
    runs before 3: S runs 3-5; R, submitted at 5, finds the node free at 5 and runs 5-11. Waits 0 and 0; had both
    been submitted at 0 (the old model), R would have run 0-6 and S waited 6."""
    queue = [SimJob("R", "p", 1, 4, 6, 6, student=0, release_s=5), SimJob("S", "p", 1, 4, 2, 2, student=1, release_s=3)]
    assert by_name(simulate(queue, {"p": (1, 4)})) == {"S": (3, 5, 0), "R": (5, 11, 0)}


def test_reading_time_spreads_the_class_over_the_profiles_minutes() -> None:
    """reading_min = [5, 15], a class of 3: the students start at 5, 10 and 15 minutes; a class of 1 at 5."""
    assert [reading_s(SITE, s, 3) for s in range(3)] == [300.0, 600.0, 900.0]
    assert reading_s(SITE, 0, 1) == 300.0 and SITE.reading_min == (5, 15)


def test_jobs_still_running_at_a_slots_end_carry_over_into_the_next() -> None:
    """One node of 4 GPUs, no reading time. Notebook A (slot 10 min): one whole-node job of 15 min, 0-15 min.
    Notebook B starts at 10 min: its whole-node job of 5 min waits for A's until 15 and runs 15-20. A: makespan 15,
    1 job carried over; B: makespan 20 - 10 = 10 min, longest wait 5 min."""
    import dataclasses

    profile = dataclasses.replace(SITE, agenda={"A": 10, "B": 30}, reading_min=(0, 0))
    built = {"A": [SimJob("a", "p", 1, 4, 900, 900, notebook="A")], "B": [SimJob("b", "p", 1, 4, 300, 300, notebook="B")]}
    a, b = day_timeline(profile, ["A", "B"], built, 1, {"p": (1, 4)}, backfill=True)
    assert (a.makespan_s, a.longest_wait_s, a.carried) == (900, 0, 1)
    assert (b.makespan_s, b.longest_wait_s, b.carried) == (600, 300, 0)


def test_a_slot_filled_to_90_percent_warns_with_the_field_and_its_value() -> None:
    """54 of 60 minutes is 90 %: a warning that names agenda.<notebook> and the minutes that bring it under 90 %
    (54 / 0.9 = 60, so 60 or more); 53.9 minutes is under 90 %: none."""
    import dataclasses

    def warned(minutes: float) -> list[str]:
        nb = NotebookDay("02_fsdp_single_gpu", 60, 100, minutes * 60, 0.0)
        return Day(20, True, [nb], [nb], {}, set(), []).warnings(dataclasses.replace(SITE, instructor_jobs=""))

    [line] = warned(54)
    assert line.startswith("warning: 02_fsdp_single_gpu: the class's jobs end 54 min into its 60-min slot (90%, at least")
    assert "agenda.02_fsdp_single_gpu = 60 or more" in line
    assert warned(53.9) == [] and "more than it" in warned(61)[0]


def test_other_users_nodes_are_not_the_class_s(tmp_path: Path) -> None:
    """[agenda] background_nodes = { v100 = 2 }: the class shares 2 of the 4 V100 nodes; 02's 100 one-GPU jobs then
    queue on 8 GPUs, not 16, and end later. Holding all 4 nodes, or a partition that does not exist, names the field."""
    from workshop.site.schedule import partition_sizes

    text = (PROFILES_DIR / "example-hpc.toml").read_text()
    site = tmp_path / "site.toml"
    site.write_text(text.replace("reading_min = [5, 15]", "reading_min = [5, 15]\nbackground_nodes = { v100 = 2 }"))
    shared = load_profile(site)
    assert partition_sizes(shared, ["v100", "a100"], ask_slurm=False)[0] == {"v100": (2, 4), "a100": (8, 8)}
    alone = {nb.notebook: nb.makespan_s for nb in plan_day(SITE, 20, ask_slurm=False).instructor}
    beside = {nb.notebook: nb.makespan_s for nb in plan_day(shared, 20, ask_slurm=False).instructor}
    assert beside["02_fsdp_single_gpu"] > alone["02_fsdp_single_gpu"] and beside["04_multi_gpu"] == alone["04_multi_gpu"]
    for bad in ("{ v100 = 4 }", "{ h100 = 1 }"):
        site.write_text(text.replace("reading_min = [5, 15]", f"reading_min = [5, 15]\nbackground_nodes = {bad}"))
        with pytest.raises(ProfileError, match="agenda.background_nodes"):
            load_profile(site)


def test_a_per_user_cap_holds_a_cells_jobs_back_until_one_ends() -> None:
    """jobs_per_user = 2, one student's cell of A (1 GPU, 4 s), B (1 GPU, 6 s), C (1 GPU, 2 s) on a node of 4 GPUs:
    A and B are submitted at 0; C only when A ends, at 4, and runs 4-6. Without the cap all three start at 0.
    The next cell, D (1 GPU, 1 s), is submitted when the last of them ends, at 6."""
    cell = [SimJob(n, "p", 1, 1, d, d) for n, d in (("A", 4), ("B", 6), ("C", 2))] + [SimJob("D", "p", 1, 1, 1, 1, wave=1)]
    capped = simulate(cell, {"p": (1, 4)}, cap=2)
    assert by_name(capped) == {"A": (0, 4, 0), "B": (0, 6, 0), "C": (4, 6, 0), "D": (6, 7, 0)}
    assert by_name(simulate(cell, {"p": (1, 4)}))["C"] == (0, 2, 0)


def test_a_job_larger_than_its_partition_is_refused() -> None:
    with pytest.raises(ValueError, match="never start"):
        simulate([job("big", 3, 4, 1)], TWO_NODES)




def test_the_example_site_ships_a_day_that_fits_its_agenda() -> None:
    """In instructor-run mode (the profile names its folder) every notebook's class of 20 ends within its
    slot; the same site without the mode does not fit notebook 03 (120 whole-node V100 jobs on 4 nodes)."""
    assert SITE.instructor_jobs and set(SITE.agenda) == {"01_baseline", "02_fsdp_single_gpu",
                                                         "03_sharding_strategies", "04_multi_gpu", "05_multi_node"}
    day = plan_day(SITE, 20, ask_slurm=False)
    assert day.warnings(SITE) == []
    plain = {nb.notebook: nb for nb in day.plain}
    assert plain["03_sharding_strategies"].jobs == 120
    assert plain["03_sharding_strategies"].makespan_s > 60 * SITE.agenda["03_sharding_strategies"]
    assert {nb.notebook: nb.jobs for nb in day.instructor} == {
        "01_baseline": 20, "02_fsdp_single_gpu": 100, "03_sharding_strategies": 0, "04_multi_gpu": 60,
        "05_multi_node": 20}                           # 04 without its 8-GPU run; 05: only "1 node x 2"


def test_without_instructor_run_mode_the_schedule_warns_and_names_the_fix(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text((PROFILES_DIR / "example-hpc.toml").read_text().replace(
        'instructor_jobs = "/shared/fsdp-workshop/instructor-jobs"', 'instructor_jobs = ""'))
    profile = load_profile(site)
    warnings = plan_day(profile, 20, ask_slurm=False).warnings(profile)
    assert len(warnings) == 1 and warnings[0].startswith("warning: 03_sharding_strategies")
    assert "agenda.03_sharding_strategies" in warnings[0] and "instructor_steps" in warnings[0]


def test_agenda_and_nodes_errors_name_the_field(tmp_path: Path) -> None:
    text = (PROFILES_DIR / "example-hpc.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("01_baseline = 45", "01_baseline = \"45\""))
    with pytest.raises(ProfileError, match="agenda.01_baseline"):
        load_profile(bad)
    bad.write_text(text.replace("01_baseline = 45", "06_extra = 45"))
    with pytest.raises(ProfileError, match="agenda.06_extra.*not a notebook"):
        plan_day(load_profile(bad), 20, ask_slurm=False)
    bad.write_text(text.replace("nodes = 8\n", "nodes = 2\n"))
    with pytest.raises(ProfileError, match="partitions.a100.nodes"):
        load_profile(bad)
    bad.write_text(text.replace("nodes = 8\n", ""))
    with pytest.raises(ProfileError, match="partitions.a100.nodes.*sinfo"):
        plan_day(load_profile(bad), 20, ask_slurm=False)


def test_predicted_durations_by_hand() -> None:
    """01's baseline on one V100 (fp16, 125 TFLOP/s): 6 x 559,214,592 parameters x 2,000 examples x 512 tokens
    = 3.436e15 FLOPs at 10 % of the peak = 274.9 s, plus 180 s start-up = 454.9 s (under its 20-min limit).
    The bandwidth gate: 180 s start-up + 60 s of sizes = 240 s, within its 5 minutes."""
    from workshop.slurm.steps import step_config

    d = job_duration("baseline", step_config("baseline", SITE), SITE.partitions["v100"], 1200)
    assert d.source == "predicted" and d.seconds == pytest.approx(180 + 6 * 559_214_592 * 2000 * 512 / 12.5e12, rel=1e-6)
    assert d.seconds == pytest.approx(454.9, abs=0.1)
    gate = job_duration("bandwidth", step_config("bandwidth", SITE), SITE.partitions["a100"], 300)
    assert (gate.seconds, gate.source) == (240, "predicted")


def test_a_gpu_result_replaces_the_prediction(tmp_path: Path) -> None:
    """A `workshop bench --device cuda` result on a V100 with the baseline at 10 samples/s on one GPU: 2,000
    examples take 200 s, plus the 180 s start-up = 380 s, labelled with the file it came from."""
    from workshop.slurm.steps import step_config

    (tmp_path / "2026-12-01-v100.json").write_text(json.dumps({
        "device": "cuda", "device_name": "Tesla V100-SXM2-32GB", "configs": [{"name": "baseline", "samples_per_s": 10.0}]}))
    d = job_duration("baseline", step_config("baseline", SITE), SITE.partitions["v100"], 1200, results_dir=tmp_path)
    assert (d.seconds, d.source) == (380.0, "2026-12-01-v100.json")
    jobs, sources = class_jobs(SITE, "01_baseline", 3, instructor_run=True, results_dir=tmp_path)
    assert sources == {"2026-12-01-v100.json"} and [j.duration_s for j in jobs] == [380.0] * 3
    assert all(j.limit_s == time_seconds(SITE.time) for j in jobs)


@pytest.mark.slow   # the CLI asks sinfo (a process) where Slurm answers
def test_workshop_budget_prints_the_day(capsys: pytest.CaptureFixture) -> None:
    from workshop.cli import main

    assert main(["budget", "--profile", "example-hpc", "--students", "20"]) == 0
    out = capsys.readouterr().out
    assert "| 03_sharding_strategies | 75 | 120 |" in out and "| gpu_v100 | 4 x 4 |" in out
    assert "durations predicted from the model" in out and "warning" not in out


def test_the_guides_day_command_prints_the_guides_schedule() -> None:
    """docs/instructor.md's "The day": its `workshop budget` line, typed as written in the course root, prints
    the schedule tables the guide shows (the guide cannot drift from the code) and no warning."""
    from tests.test_docs_commands import fenced, line_with, sh
    from workshop.site.schedule import markdown

    lines = [ln for ln in fenced(ROOT / "docs" / "instructor.md", "## The day") if "--replay" not in ln]
    line = line_with(lines, "workshop budget")
    assert line == "workshop budget --profile example-hpc --students 20"
    proc = sh(line, ROOT)
    assert proc.returncode == 0, proc.stderr
    table = markdown(plan_day(SITE, 20, ask_slurm=False), SITE)
    assert table in proc.stdout and table in (ROOT / "docs" / "instructor.md").read_text().split("## The day", 1)[1]
    assert "warning" not in proc.stdout
