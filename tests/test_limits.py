"""Per-user limits against each notebook's largest cell (workshop.site.limits), on sacctmgr's own output format
(`-n -P`, the columns ASSOC_FORMAT and QOS_FORMAT name, as the repo's test cluster prints them); the cluster itself
is asked in tests/slurm/test_limits_on_cluster.py."""

from __future__ import annotations

import dataclasses

from workshop.site.limits import Limits, bursts, burst_line, limit_lines, parse_assoc, parse_qos
from workshop.slurm.profiles import load_profile

CI = load_profile("ci")
# sacctmgr -n -P show assoc where user=U format=ASSOC_FORMAT; show qos format=QOS_FORMAT
ASSOC = "workshop||normal,class3|class3|||gres/gpu=8|gres/gpu=16\nworkshop|debug|normal||20||||\n"
QOS = "normal||||\nclass3|3|2|gres/gpu=4,cpu=8|\n"


def test_sacctmgr_rows_become_limits() -> None:
    assoc, default_qos = parse_assoc(ASSOC, "workshop")
    assert assoc == Limits("association workshop", None, None, max_gpus_user=16, max_gpus_job=8)
    assert default_qos == "class3"
    assert parse_qos(QOS, "class3") == Limits("QOS class3", 3, 2, 4, None)
    assert parse_qos(QOS, "normal") == Limits("QOS normal") and parse_qos(QOS, "missing") is None
    assert parse_assoc("workshop||normal|||||\n")[1] == "normal"     # the only QOS it may use is its default
    assert parse_assoc(ASSOC, "other") == (None, "")


def test_the_burst_of_each_notebook_is_its_largest_cell() -> None:
    """On the test cluster's profile: 03's first cell is its five strategy jobs of 2 GPUs; 05's last cell four
    trainings, 2 + 2 + 4 + 4 GPUs; 02's first cell three 1-GPU jobs."""
    got = {b.notebook: (b.jobs, b.gpus, b.largest_job_gpus) for b in bursts(CI)}
    assert got == {"01_baseline": (1, 1, 1), "02_fsdp_single_gpu": (3, 3, 1), "03_sharding_strategies": (5, 10, 2),
                   "04_multi_gpu": (2, 3, 2), "05_multi_node": (4, 12, 4)}


def test_a_submit_limit_under_the_burst_names_the_cap_and_the_class_qos() -> None:
    """MaxSubmitJobsPerUser=3 with the session's own job: 5 + 1 > 3, so jobs_per_user = 2 is the fix; with it
    set, 2 + 1 fit."""
    qos = [Limits("QOS class3", max_submit=3)]
    b03 = next(b for b in bursts(CI) if b.notebook == "03_sharding_strategies")
    line = burst_line(b03, qos, CI)
    assert line.status == "FIX" and "QOS class3 lets a user queue 3" in line.text
    assert "jobs_per_user = 2" in line.text and "MaxSubmitJobsPerUser >= 6" in line.text
    capped = dataclasses.replace(CI, jobs_per_user=2)
    assert burst_line(b03, qos, capped).status == "ok"
    assert burst_line(b03, [Limits("QOS big", max_submit=6)], CI).status == "ok"


def test_running_and_per_job_limits() -> None:
    """A running limit makes jobs wait (a fact, not a fix); a job larger than the per-job GPU limit never starts."""
    b05 = next(b for b in bursts(CI) if b.notebook == "05_multi_node")
    line = burst_line(b05, [Limits("QOS q", max_jobs=2, max_gpus_user=8)], CI)
    assert line.status == "-" and "jobs (QOS q: 2)" in line.text and "GPUs (QOS q: 8)" in line.text
    line = burst_line(b05, [Limits("association a", max_gpus_job=2)], CI)
    assert line.status == "FIX" and "a job of 4 GPUs" in line.text


def test_limit_lines_read_sacctmgr_and_judge_every_notebook() -> None:
    asked = []

    def sacctmgr(cmd: list[str]) -> str:
        asked.append(cmd)
        return "AccountingStorageEnforce = associations,limits,qos\n" if cmd[0] == "scontrol" else \
            ASSOC if "assoc" in cmd else QOS

    lines = limit_lines(dataclasses.replace(CI, account="workshop"), "alice", sacctmgr)
    assert [c[4] for c in asked[:2]] == ["assoc", "qos"] and "user=alice" in asked[0]
    assert lines[0].text == "association workshop: GPUs a user 16, GPUs a job 8; QOS class3: MaxSubmit 3, MaxJobs 2, GPUs a user 4"
    status = {ln.check: ln.status for ln in lines[1:]}
    assert status == {"limits: 01_baseline": "ok", "limits: 02_fsdp_single_gpu": "FIX",
                      "limits: 03_sharding_strategies": "FIX", "limits: 04_multi_gpu": "-", "limits: 05_multi_node": "FIX"}


def test_limits_slurmctld_does_not_enforce_are_facts_with_the_fix_for_when_it_does() -> None:
    from workshop.site.limits import enforced, unenforced

    assert enforced("AccountingStorageEnforce = associations,limits,qos") and enforced("AccountingStorageEnforce = safe")
    assert not enforced("AccountingStorageEnforce = none") and not enforced("AccountingStorageEnforce = associations")
    b03 = next(b for b in bursts(CI) if b.notebook == "03_sharding_strategies")
    line = unenforced(burst_line(b03, [Limits("QOS class3", max_submit=3)], CI))
    assert line.status == "-" and line.text.startswith("not enforced here (AccountingStorageEnforce has no limits), else: ")
    assert "jobs_per_user = 2" in line.text
