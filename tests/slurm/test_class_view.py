"""`workshop class`: the class at a glance from the test cluster's real accounting.

Three students (Unix and Slurm users `student`, `student2`, `student3`, in a course account of their
own) submit jobs named as `workshop submit` names them; one of another account must not show. The
jobs are small batch scripts that end as the course's jobs end (a completed run, a CUDA OOM, a bad
config), so the view's states come from slurmdbd and its diagnoses from workshop.results.diagnose reading
each job's own log.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from workshop.grading import classview
from workshop.slurm import slurm_backend

pytestmark = pytest.mark.slurm

ACCOUNT = "fsdp-class"
STUDENTS = ["student", "student2", "student3"]
LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


@pytest.fixture(scope="module")
def class_jobs(cluster) -> dict[str, str]:
    """{label: job id} of the class's finished jobs, plus one job outside the course's account."""
    if os.geteuid() != 0:
        pytest.skip("creating the students' users needs root")
    for user in STUDENTS:
        if subprocess.run(["id", user], capture_output=True).returncode != 0:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/bash", user], check=True)
    accounts = cluster.run("sacctmgr", "-n", "-P", "show", "account", "format=account").stdout.split()
    if ACCOUNT not in accounts:
        cluster.run("sacctmgr", "-i", "add", "account", ACCOUNT, "description=course", "organization=workshop")
    assoc = cluster.run("sacctmgr", "-n", "-P", "show", "assoc", "where", f"account={ACCOUNT}", "format=user").stdout.split()
    missing = [u for u in STUDENTS if u not in assoc]
    if missing:
        cluster.run("sacctmgr", "-i", "add", "user", ",".join(missing), f"account={ACCOUNT}")
        time.sleep(1.0)
    base = cluster.shared / f"class-view-{os.getpid()}-{int(time.time())}"
    base.mkdir(mode=0o1777)
    base.chmod(0o1777)
    oom = (LOGS / "cuda_oom.log").read_text()
    bad_config = (LOGS / "config_error.log").read_text()
    plan = [  # (label, user, step, account, what the job prints, exit code)
        ("student-baseline", "student", "baseline", ACCOUNT, "[job] ok\n", 0),
        ("student-multi_gpu", "student", "multi_gpu", ACCOUNT, oom, 1),
        ("student2-baseline", "student2", "baseline", ACCOUNT, bad_config, 1),
        ("student2-baseline-again", "student2", "baseline", ACCOUNT, "[job] ok\n", 0),
        ("student3-strategies", "student3", "strategies", ACCOUNT, "[job] ok\n", 0),
        ("outsider", "root", "baseline", "", "[job] ok\n", 0),
    ]
    ids = {}
    for label, user, step, account, text, rc in plan:
        folder = base / label
        folder.mkdir(mode=0o777)
        folder.chmod(0o777)
        (folder / "printed.txt").write_text(text)
        (folder / "job.sh").write_text(f"#!/bin/bash\ncat {folder / 'printed.txt'}\nexit {rc}\n")
        args = [f"--job-name=workshop-{step}", f"--chdir={folder}", "--output=slurm-%j.out", "--time=1",
                "--ntasks=1", str(folder / "job.sh")]
        if account:
            args.insert(0, f"--account={account}")
        ids[label] = cluster.sbatch(*args, user=user)
    for job_id in ids.values():
        cluster.wait(job_id, timeout=60)
    return ids


def settled(ids: set[str], **selection: str) -> None:
    """Wait until accounting lists the jobs under the selection (slurmdbd lags the job's own record)."""
    deadline = time.monotonic() + 180
    while not ids <= {j.job_id for j in classview.query(**selection).jobs} and time.monotonic() < deadline:
        time.sleep(1.0)


def test_the_class_at_a_glance(class_jobs, capsys, monkeypatch) -> None:
    settled({v for k, v in class_jobs.items() if k != "outsider"}, account=ACCOUNT)
    monkeypatch.setattr(slurm_backend, "MIN_POLL_INTERVAL", 10.0)   # the real budget, not the fixture's 0.5 s
    view = classview.class_view(account=ACCOUNT)
    mine = {j.job_id: j for j in view.jobs if j.job_id in class_jobs.values()}
    assert class_jobs["outsider"] not in mine
    assert set(mine) == {v for k, v in class_jobs.items() if k != "outsider"}
    by_label = {k: mine[v] for k, v in class_jobs.items() if v in mine}
    assert by_label["student-baseline"].state.value == "COMPLETED"
    assert by_label["student-multi_gpu"].state.value == "FAILED"
    assert "out of memory" in by_label["student-multi_gpu"].diagnosis.lower()
    assert "batch_size" in by_label["student2-baseline"].diagnosis
    table = view.table()
    assert {"student", "student2", "student3"} <= set(table.index)
    assert table.loc["student2", "baseline"].split()[-2:] == ["FAIL", "ok"]       # both jobs, in order
    assert table.loc["student", "multi_gpu"].endswith("FAIL") and table.loc["student3", "strategies"].endswith("ok")
    assert any(n.startswith("student multi_gpu job " + class_jobs["student-multi_gpu"]) for n in table.attrs["notes"])
    # within the polling budget the same answer comes back, without asking Slurm again
    assert classview.class_view(account=ACCOUNT) is view
    assert classview.class_table(account=ACCOUNT).equals(table)
    # the instructor's command, as docs/instructor.md writes it
    from workshop.cli import main

    monkeypatch.setattr(slurm_backend, "MIN_POLL_INTERVAL", 0.0)
    guide = (Path(__file__).resolve().parents[2] / "docs" / "instructor.md").read_text()
    typed = next(ln.split("  #")[0] for ln in guide.splitlines() if ln.startswith("workshop class "))
    argv = shlex.split(typed.replace("<course-account>", ACCOUNT))
    assert argv[:2] == ["workshop", "class"] and main(argv[1:]) == 0
    out = capsys.readouterr().out
    print(out)
    assert "student2" in out and "failed jobs:" in out and class_jobs["student-multi_gpu"] in out


def test_without_an_account_or_reservation_it_says_what_to_give(cluster, capsys) -> None:
    from workshop.cli import main

    assert main(["class"]) == 2
    assert "account or reservation" in capsys.readouterr().err


def test_the_class_by_reservation(class_jobs, cluster) -> None:
    """A course reservation instead of an account: only the jobs that ran in it show."""
    name = f"fsdp-day-{os.getpid()}"
    cluster.run("scontrol", "create", "reservation", f"ReservationName={name}", "Users=student3", "Nodes=n2",
                "StartTime=now", "Duration=5", "Flags=IGNORE_JOBS")
    try:
        folder = cluster.shared / f"class-view-resv-{os.getpid()}"
        folder.mkdir(mode=0o777, exist_ok=True)
        folder.chmod(0o777)
        job_id = cluster.sbatch(f"--reservation={name}", f"--account={ACCOUNT}", "--job-name=workshop-multi_node",
                                f"--chdir={folder}", "--output=slurm-%j.out", "--time=1", "--wrap", "true",
                                user="student3")
        cluster.wait(job_id, timeout=60)
        settled({job_id}, reservation=name)
        view = classview.query(reservation=name)
        assert [(j.job_id, j.user, j.step, j.state.value) for j in view.jobs] == [
            (job_id, "student3", "multi_node", "COMPLETED")]
    finally:
        cluster.run("scontrol", "delete", f"ReservationName={name}", check=False)
