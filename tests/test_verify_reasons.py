"""`workshop verify`, one reason at a time, on job folders built by hand (fast: no training, no Slurm).

Each folder is what a job leaves (job.json, slurm-<id>.out, run/summary.json, metrics.jsonl,
digest.json), sealed with the course's own digest function (workshop.training.checkpoints.digest,
the one the training job calls). A genuine folder passes; each forgery below changes one thing and
must be flagged with exactly one reason, in the words the instructor reads. The same checks on jobs
the course really ran are tests/test_verify_local.py's (local backend) and
tests/slurm/test_verify_on_cluster.py's (Slurm accounting).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from workshop.results import verify
from workshop.training.checkpoints import digest

KEY = "the-sites-secret"
SUBMITTED = "2026-11-26T10:00:00+00:00"
STARTED = "2026-11-26T10:00:03.250+00:00"
ENDED = "2026-11-26T10:00:20.500+00:00"
RECORDED_END = "2026-11-26T10:00:21+00:00"


@dataclass
class Job:
    folder: Path
    number: str
    summary: dict[str, Any]
    metrics: list[dict[str, Any]]
    sealed: dict[str, Any]
    lines: list[str]

    @property
    def log(self) -> Path:
        return next(self.folder.glob("slurm-*.out"))

    def write_log(self) -> None:
        self.log.write_text("\n".join(self.lines) + "\n")

    def replace_line(self, prefix: str, line: str) -> None:
        self.lines = [line if x.startswith(prefix) else x for x in self.lines]
        self.write_log()


def make_job(subs: Path, student: str = "alice", assignment: str = "01_baseline", job_id: str = "local-3",
             key: str | None = KEY, host: str = "node7", **record: Any) -> Job:
    """A finished job folder as a course job leaves it: its own log, its run's files and their seal."""
    folder = subs / student / assignment / "jobs" / "baseline-0a1b2c3d4e"
    (folder / "run").mkdir(parents=True)
    number = job_id.removeprefix("local-")
    summary = {"status": "completed", "world_size": 1, "hosts": [host], "final_eval_loss": 5.125, "steps": 2}
    metrics = [{"kind": "train", "step": 1, "loss": 6.25}, {"kind": "train", "step": 2, "loss": 5.5},
               {"kind": "eval", "step": 2, "epoch": 1.0, "eval_loss": 5.125}]
    sealed = digest(number, summary, metrics, key)
    (folder / "run" / "summary.json").write_text(json.dumps(summary, indent=1))
    (folder / "run" / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (folder / "run" / "digest.json").write_text(json.dumps(sealed, indent=1))
    if job_id.startswith("local-"):
        record = {"job_id": job_id, "backend": "local", "step": "baseline", "profile": "local", "name": "baseline",
                  "job_dir": str(folder), "state": "COMPLETED", "submitted_at": SUBMITTED,
                  "ended_at": RECORDED_END, "nodes": host, "host": host, "pid": 4242, "pid_start": 91234, **record}
    else:
        record = {"job_id": job_id, "backend": "slurm", "step": "baseline", "profile": "ci", "name": "baseline",
                  "job_dir": str(folder), "state": "COMPLETED", **record}
    (folder / "job.json").write_text(json.dumps(record, indent=1))
    lines = [f"[job] id {number} name baseline nodes 1: {host}", f"[job] start {STARTED} on {host} in {folder}",
             *(f"WORKSHOP_METRICS {json.dumps(m)}" for m in metrics),
             f"WORKSHOP_SUMMARY {json.dumps(summary)}", f"WORKSHOP_DIGEST {json.dumps(sealed)}", f"[job] end {ENDED}"]
    job = Job(folder, number, summary, metrics, sealed, lines)
    (folder / f"slurm-{job_id}.out").write_text("")
    job.write_log()
    return job


def reasons(subs: Path, key: str | None = KEY) -> dict[tuple[str, str], list[str]]:
    return {(v.student, v.assignment): v.reasons for v in verify.verify(subs, key=key)}


def only_reason(subs: Path, key: str | None = KEY) -> str:
    (found,) = reasons(subs, key).values()
    assert len(found) == 1, found
    return found[0]


def test_a_genuine_job_passes(tmp_path: Path) -> None:
    make_job(tmp_path)
    (v,) = verify.verify(tmp_path, key=KEY)
    assert v.ok and v.reasons == [] and v.backend == "local" and v.job == "local-3" and v.number == "3"
    assert v.notes == ["local backend: no Slurm accounting, checked against job.json"]
    assert v.digest == digest("3", *_files(v.folder), KEY)["digest"]
    # and with no site key: a plain SHA-256, which is said to catch careless edits only
    shutil.rmtree(tmp_path / "alice")
    make_job(tmp_path, key=None)
    (v,) = verify.verify(tmp_path, key=None)
    assert v.ok and "unkeyed digest: detects careless edits only" in v.notes


def _files(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run = folder / "run"
    return json.loads((run / "summary.json").read_text()), verify.read_metrics(run / "metrics.jsonl")


def test_the_logs_summary_differs_from_summary_json_while_the_digest_is_valid(tmp_path: Path) -> None:
    """The files and their seal are untouched; only the log's WORKSHOP_SUMMARY line was made better."""
    job = make_job(tmp_path)
    better = dict(job.summary, final_eval_loss=4.0)
    job.replace_line("WORKSHOP_SUMMARY ", f"WORKSHOP_SUMMARY {json.dumps(better)}")
    assert only_reason(tmp_path) == "edited numbers: the log's WORKSHOP_SUMMARY differs from run/summary.json"


def test_a_metrics_line_that_is_not_the_jobs(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    job.replace_line('WORKSHOP_METRICS {"kind": "train", "step": 2',
                     f"WORKSHOP_METRICS {json.dumps(dict(job.metrics[1], loss=4.5))}")
    assert only_reason(tmp_path) == "edited numbers: a WORKSHOP_METRICS line of the log is not in run/metrics.jsonl"
    # a line added from another run is not the job's either
    job = make_job(tmp_path / "other")
    job.lines.insert(3, 'WORKSHOP_METRICS {"kind": "train", "step": 7, "loss": 1.0}')
    job.write_log()
    assert reasons(tmp_path / "other")["alice", "01_baseline"] == [
        "edited numbers: a WORKSHOP_METRICS line of the log is not in run/metrics.jsonl"]


def test_a_digest_naming_another_job(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    # alone: the seal's own job id field names job 8 (its value still covers job 3's numbers)
    (job.folder / "run" / "digest.json").write_text(json.dumps(dict(job.sealed, job_id="8")))
    assert only_reason(tmp_path) == "digest.json belongs to job 8, not local-3"
    # as a copier leaves it: another job's whole seal, which also fails to cover this job's numbers
    other = digest("8", job.summary, job.metrics, KEY)
    (job.folder / "run" / "digest.json").write_text(json.dumps(other))
    job.replace_line("WORKSHOP_DIGEST ", f"WORKSHOP_DIGEST {json.dumps(other)}")
    assert reasons(tmp_path)["alice", "01_baseline"] == [
        "digest.json belongs to job 8, not local-3",
        "edited numbers: summary.json / metrics.jsonl do not match the run's digest"]


def test_edited_numbers_with_their_seal_left_as_it_was(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    (job.folder / "run" / "summary.json").write_text(json.dumps(dict(job.summary, final_eval_loss=4.0)))
    job.replace_line("WORKSHOP_SUMMARY ", f"WORKSHOP_SUMMARY {json.dumps(dict(job.summary, final_eval_loss=4.0))}")
    assert only_reason(tmp_path) == "edited numbers: summary.json / metrics.jsonl do not match the run's digest"


def test_an_unkeyed_digest_where_a_key_is_set(tmp_path: Path) -> None:
    """The student recomputed a plain SHA-256 over numbers of their own: without the key, it is all they can."""
    make_job(tmp_path, key=None)
    assert only_reason(tmp_path, key=KEY) == "an unkeyed digest where this site's jobs sign theirs: recomputed by hand?"


def test_a_keyed_digest_with_the_wrong_key(tmp_path: Path) -> None:
    make_job(tmp_path, key="a-key-the-student-made-up")
    assert only_reason(tmp_path, key=KEY) == "edited numbers: summary.json / metrics.jsonl do not match the run's digest"
    (v,) = verify.verify(tmp_path, key=None)       # a grader without the key cannot tell, and says so
    assert v.ok and "keyed digest not checked: set WORKSHOP_DIGEST_KEY" in v.notes


def test_a_log_whose_digest_line_is_not_the_runs(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    job.replace_line("WORKSHOP_DIGEST ", f"WORKSHOP_DIGEST {json.dumps(dict(job.sealed, digest='0' * 64))}")
    assert only_reason(tmp_path) == "the log's WORKSHOP_DIGEST line does not match run/digest.json"


@pytest.mark.parametrize("start, reason", [
    # a log from an earlier job: it started before this folder's job was submitted (5 s of skew allowed)
    ("2026-11-26T09:59:54+00:00", f"before this job was submitted ({SUBMITTED})"),
    ("2026-11-26T09:59:56+00:00", None),
    # or from a later one: it started after this job ended
    ("2026-11-26T10:00:27+00:00", f"after this job ended ({RECORDED_END})"),
    ("2026-11-26T10:00:25+00:00", None),
])
def test_a_local_job_that_started_outside_its_own_run(tmp_path: Path, start: str, reason: str | None) -> None:
    job = make_job(tmp_path)
    job.replace_line("[job] start ", f"[job] start {start} on node7 in {job.folder}")
    if reason is None:
        assert reasons(tmp_path) == {("alice", "01_baseline"): []}
    else:
        assert only_reason(tmp_path) == f"the log starts at {start}, {reason}: a log from another job"


def test_a_local_log_without_a_start_line(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    job.lines = [x for x in job.lines if not x.startswith("[job] start ")]
    job.write_log()
    assert only_reason(tmp_path) == "the log has no `[job] start` line"


def test_a_local_jobs_record_without_its_process(tmp_path: Path) -> None:
    make_job(tmp_path, pid=None)
    assert only_reason(tmp_path) == ("job.json of a local job without its process (pid, host): not written by "
                                     "workshop submit")


def test_a_local_log_from_other_hosts(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    moved = dict(job.summary, hosts=["node7", "node9"])
    sealed = digest(job.number, moved, job.metrics, KEY)      # a seal that holds: only the hosts give it away
    (job.folder / "run" / "summary.json").write_text(json.dumps(moved))
    (job.folder / "run" / "digest.json").write_text(json.dumps(sealed))
    job.replace_line("WORKSHOP_SUMMARY ", f"WORKSHOP_SUMMARY {json.dumps(moved)}")
    job.replace_line("WORKSHOP_DIGEST ", f"WORKSHOP_DIGEST {json.dumps(sealed)}")
    assert only_reason(tmp_path) == "the log's hosts ['node7', 'node9'] are not this job's ['node7']"


def test_a_log_naming_another_job_number(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    job.replace_line("[job] id ", "[job] id 5 name baseline nodes 1: node7")
    assert only_reason(tmp_path) == "the log says it is job 5, its name says local-3"


def test_results_without_a_digest_and_a_run_that_never_finished(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    (job.folder / "run" / "digest.json").unlink()
    assert only_reason(tmp_path) == "results without run/digest.json: they cannot be checked"
    shutil.rmtree(job.folder / "run")
    job.lines = [x for x in job.lines if not x.startswith(("WORKSHOP_", "[job] end"))]
    job.write_log()
    (v,) = verify.verify(tmp_path, key=KEY)
    assert v.ok and "no results (the run did not finish)" in v.notes


def test_one_folder_handed_in_twice_and_identical_results(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    shutil.copytree(tmp_path / "alice", tmp_path / "carol")
    found = reasons(tmp_path)
    identity = "local-3 (pid 4242 on node7, started at tick 91234)"
    assert found["alice", "01_baseline"] == [f"the same log (job {identity}) is also in carol/01_baseline/jobs/"
                                             f"{job.folder.name}"]
    assert found["carol", "01_baseline"] == [f"the same log (job {identity}) is also in alice/01_baseline/jobs/"
                                             f"{job.folder.name}"]
    # another process (pid) with the same numbers: not the same log, but the same results
    record = json.loads((tmp_path / "carol" / "01_baseline" / "jobs" / job.folder.name / "job.json").read_text())
    (tmp_path / "carol" / "01_baseline" / "jobs" / job.folder.name / "job.json").write_text(
        json.dumps(dict(record, pid=5151)))
    found = reasons(tmp_path)
    assert found["carol", "01_baseline"] == [f"identical results (digest) to alice/01_baseline/jobs/{job.folder.name}"]


# ---------------------------------------------------------------- Slurm jobs, against a hand-built sacct record
# Slurm's node list is expanded by Slurm's own `scontrol show hostnames` where it works (it needs a
# slurm.conf, not a controller), else by verify.expand_hostlist: these hold either way, and a machine with
# Slurm installed but no cluster configured once failed them. The cluster test
# tests/slurm/test_verify_on_cluster.py forges hosts and start times against real accounting.
HOSTLISTS = ["gpu[06-07]", "gpu[06-07,10],login1", "r[1-2]n[01-02]", "n[9-11]", "gpu07"]


@pytest.mark.parametrize("nodelist", HOSTLISTS)
def test_a_node_list_is_expanded_as_slurm_does(nodelist: str, tmp_path: Path) -> None:
    """The fallback against Slurm's own expansion, under a minimal slurm.conf of this test's."""
    if shutil.which("scontrol") is None:
        pytest.skip("Slurm's scontrol is not installed")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=hostlist\nSlurmctldHost=localhost\n")
    proc = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                          env={**os.environ, "SLURM_CONF": str(conf)}, timeout=30)
    slurm = set(proc.stdout.split()) if proc.returncode == 0 else {nodelist}
    assert verify.expand_hostlist(nodelist) == slurm, proc.stderr


@pytest.mark.parametrize("conf", ["missing", "empty"])
def test_without_a_slurm_conf_the_node_list_is_still_expanded(conf: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """scontrol present but unconfigured: the names, not the list as one name, at once. SLURM_CONF names no file
    (scontrol would retry it for 60 s: not asked), or an empty one (scontrol runs and fails)."""
    path = tmp_path / "slurm.conf"
    if conf == "empty":
        path.write_text("")
    monkeypatch.setenv("SLURM_CONF", str(path))
    started = time.monotonic()
    assert verify.hostnames("gpu[06-07]") == {"gpu06", "gpu07"}
    assert time.monotonic() - started < 10


def slurm_verdict(job: Job, subs: Path) -> verify.Verdict:
    (v,) = verify.job_folders(subs)
    return v


def record(**changes: str) -> dict[str, str]:
    return {"JobIDRaw": "4242", "User": "alice", "State": "COMPLETED", "NodeList": "gpu[06-07]",
            "Start": "2026-11-26T10:00:01", "End": "2026-11-26T10:00:22", **changes}


def local_clock(text: str) -> str:
    """sacct prints this machine's local time without a zone: the fixture's UTC times, so written."""
    import datetime as dt

    return dt.datetime.fromisoformat(text).astimezone().replace(tzinfo=None).isoformat(timespec="seconds")


def test_slurm_hosts_outside_the_jobs_node_list(tmp_path: Path) -> None:
    job = make_job(tmp_path, job_id="4242", host="gpu07")
    times = dict(Start=local_clock("2026-11-26T10:00:01+00:00"), End=local_clock("2026-11-26T10:00:22+00:00"))
    v = slurm_verdict(job, tmp_path)
    verify.check_job(v, record(**times), "alice", KEY)
    assert v.reasons == []
    v = slurm_verdict(job, tmp_path)
    verify.check_job(v, record(NodeList="gpu[01-02]", **times), "alice", KEY)
    assert v.reasons == ["the log's hosts ['gpu07'] are not the job's nodes ['gpu01', 'gpu02']"]


def test_slurm_start_and_end_against_accounting(tmp_path: Path) -> None:
    job = make_job(tmp_path, job_id="4242", host="gpu07")
    late = local_clock("2026-11-26T10:03:04+00:00")      # 180.75 s after the log's start: beyond 120 s
    v = slurm_verdict(job, tmp_path)
    verify.check_job(v, record(Start=late, End=local_clock("2026-11-26T10:00:22+00:00")), "alice", KEY)
    assert v.reasons == [f"the log starts at {STARTED.replace('.250', '.250000')}, Slurm started the job at {late}"]
    v = slurm_verdict(job, tmp_path)
    verify.check_job(v, record(Start=local_clock("2026-11-26T10:00:01+00:00"), End=late), "alice", KEY)
    assert v.reasons == [f"the log ends at {ENDED.replace('.500', '.500000')}, Slurm ended the job at {late}"]


def test_slurm_another_users_job_and_one_that_never_ran(tmp_path: Path) -> None:
    job = make_job(tmp_path, job_id="4242", host="gpu07")
    times = dict(Start=local_clock("2026-11-26T10:00:01+00:00"), End=local_clock("2026-11-26T10:00:22+00:00"))
    v = slurm_verdict(job, tmp_path)
    verify.check_job(v, record(User="bob", **times), "alice", KEY)
    assert v.reasons == ["job 4242 ran as 'bob', not as 'alice': another user's log"]
    v = slurm_verdict(job, tmp_path)
    verify.check_job(v, None, "alice", KEY)
    assert v.reasons == ["job 4242 never ran on this cluster: sacct has no record of it"]


def test_the_command_prints_one_line_a_job_and_exits_1_when_one_is_flagged(tmp_path: Path, capsys,
                                                                           monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv(verify.KEY_ENV, KEY)
    make_job(tmp_path)
    assert verify.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["student", "assignment", "job", "verdict", "reason"]
    assert out[1].split()[:4] == ["alice", "01_baseline", "local-3", "ok"]
    assert out[-1] == "1 job(s), 0 flagged; digests keyed"
    make_job(tmp_path, student="bob", pid=5151, key=None)
    assert verify.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:4] == ["alice", "01_baseline", "local-3", "ok"]
    assert out[2].split()[:4] == ["bob", "01_baseline", "local-3", "FLAGGED"]
    assert out[2].endswith("an unkeyed digest where this site's jobs sign theirs: recomputed by hand?")
    assert out[-1] == "2 job(s), 1 flagged; digests keyed"
    monkeypatch.delenv(verify.KEY_ENV)
    verify.main([str(tmp_path)])
    assert capsys.readouterr().out.splitlines()[-1].endswith("digests unkeyed (no WORKSHOP_DIGEST_KEY)")


def test_the_command_refuses_what_is_not_a_submissions_folder(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert verify.main([str(tmp_path / "nowhere")]) == 2
    assert "is not a folder. Give nbgrader's submitted/ folder" in capsys.readouterr().err
    assert verify.main([str(tmp_path)]) == 2
    assert "no job folders under" in capsys.readouterr().err


def test_the_user_map(tmp_path: Path) -> None:
    """student,unix_user lines; a header, comments, blank lines and a line missing either name are no mapping."""
    path = tmp_path / "users.csv"
    path.write_text("student,unix_user\n# a comment\n# mallory,u9999\n\nalice, u1001\nbob,u1002\nbroken line\n"
                    "carol,\n,u1003\n")
    assert verify.read_user_map(str(path)) == {"alice": "u1001", "bob": "u1002"}
    assert verify.read_user_map(None) == {}


def test_saved_digest(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    assert verify.saved_digest(job.folder) == job.sealed["digest"]
    (job.folder / "run" / "digest.json").write_text("not json")
    assert verify.saved_digest(job.folder) is None
    assert verify.saved_digest(tmp_path / "nowhere") is None


def test_exactly_five_seconds_before_submission_is_skew_not_another_job(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    job.replace_line("[job] start ", f"[job] start 2026-11-26T09:59:55+00:00 on node7 in {job.folder}")
    assert reasons(tmp_path) == {("alice", "01_baseline"): []}


def test_a_two_node_local_job_ran_on_its_simulated_nodes(tmp_path: Path) -> None:
    job = make_job(tmp_path, nodes="local-node1,local-node2", host="node7")
    both = dict(job.summary, hosts=["local-node1", "local-node2"])
    sealed = digest(job.number, both, job.metrics, KEY)
    (job.folder / "run" / "summary.json").write_text(json.dumps(both))
    (job.folder / "run" / "digest.json").write_text(json.dumps(sealed))
    job.replace_line("WORKSHOP_SUMMARY ", f"WORKSHOP_SUMMARY {json.dumps(both)}")
    job.replace_line("WORKSHOP_DIGEST ", f"WORKSHOP_DIGEST {json.dumps(sealed)}")
    assert reasons(tmp_path) == {("alice", "01_baseline"): []}


def test_the_current_job_of_a_resubmitted_folder(tmp_path: Path) -> None:
    """job.json names the folder's current job; without it, the newest log does."""
    import os

    job = make_job(tmp_path)
    old = job.folder / "slurm-local-2.out"
    old.write_text("[job] id 2 name baseline nodes 1: node7\n")
    os.utime(old, (2_000_000_000, 2_000_000_000))              # the older job's log, touched later
    (v,) = verify.job_folders(tmp_path)
    assert v.job == "local-3"
    (job.folder / "job.json").unlink()
    os.utime(job.log, (2_100_000_000, 2_100_000_000))
    (v,) = verify.job_folders(tmp_path)
    assert (v.job, v.backend) == ("local-3", "local")


def test_one_log_in_three_folders_names_the_other_two(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    for other in ("bob", "carol"):
        shutil.copytree(tmp_path / "alice", tmp_path / other)
    found = reasons(tmp_path)
    name = job.folder.name
    assert found["alice", "01_baseline"] == [
        f"the same log (job local-3 (pid 4242 on node7, started at tick 91234)) is also in bob/01_baseline/jobs/{name}, "
        f"carol/01_baseline/jobs/{name}"]


# ---------------------------------------------------------------- Slurm's answers, read (recorded text, no Slurm)
# `sacct -P -n -X --format=JobIDRaw,User,State,NodeList,Start,End`: one `|`-separated line a job, no header; a job
# still pending has no nodes and no end yet.
SACCT_OUTPUT = ("4242|alice|COMPLETED|gpu[06-07]|2026-11-26T10:00:01|2026-11-26T10:00:22\n"
                "4243|bob|PENDING|None assigned|Unknown|Unknown\n")


def test_sacct_lines_are_read_by_job_id() -> None:
    """Each accounting line becomes the job's record under its id, every field by its name."""
    records = verify.read_sacct(SACCT_OUTPUT)
    assert records == {"4242": record(), "4243": {"JobIDRaw": "4243", "User": "bob", "State": "PENDING",
                                                  "NodeList": "None assigned", "Start": "Unknown", "End": "Unknown"}}
    assert verify.read_sacct("") == {} and verify.sacct(["local-3", "?"]) == {}   # no Slurm job: sacct not asked
    assert verify.hostnames(records["4243"]["NodeList"]) == set() and verify.hostnames("(null)") == set()
    assert verify.hostnames("") == set()


@pytest.mark.parametrize(("nodelist", "names"), [
    ("gpu07", {"gpu07"}),
    ("gpu[06-07,10],login1", {"gpu06", "gpu07", "gpu10", "login1"}),     # ranges keep their zero padding
    ("n[9-11]", {"n9", "n10", "n11"}), ("n[3-3]", {"n3"}),
    ("r[1-2]n[01-02]", {"r1n01", "r1n02", "r2n01", "r2n02"}),            # several bracket groups in one name
    ("a[1-2],b[3],c", {"a1", "a2", "b3", "c"}),
    ("n[3-1]", {"n[3-1]"}), ("n[a-b]", {"n[a-b]"}), ("n[1-b]", {"n[1-b]"}), ("n[x]", {"n[x]"}),   # not understood
])
def test_a_node_list_expands_to_the_names_slurm_gives(nodelist: str, names: set[str]) -> None:
    """Slurm's compressed forms, expanded by hand as `scontrol show hostnames` prints them."""
    assert verify.expand_hostlist(nodelist) == names


def test_the_table_lines_up_one_job_a_line() -> None:
    """Columns as wide as their longest cell; a flagged job shows its reasons, a passing one its notes."""
    ok = verify.Verdict("alice", "01_baseline", "local-3", Path("a"), notes=["n1", "n2"])
    bad = verify.Verdict("bartholomew", "02", "4242", Path("b"), reasons=["r1", "r2"])
    assert verify.table([ok, bad]).splitlines() == [
        "student      assignment   job      verdict  reason",
        "alice        01_baseline  local-3  ok       n1; n2",
        "bartholomew  02           4242     FLAGGED  r1; r2"]


def test_a_usage_error_names_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    """An option verify does not know: exit 2, and the usage line names `workshop verify`."""
    with pytest.raises(SystemExit) as stopped:
        verify.main(["--no-such-option"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith("usage: workshop verify [-h] [--user-map USER_MAP]")


def test_the_root_seal_folder_must_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """--seal-dir (default $WORKSHOP_SEAL_DIR) naming no folder: exit 2 and what to give; an existing one is named in
    the summary line (a local job has no root seal: it passes)."""
    make_job(tmp_path / "subs")
    monkeypatch.setenv(verify.KEY_ENV, KEY)
    monkeypatch.setenv(verify.SEAL_ENV, str(tmp_path / "nowhere"))
    assert verify.main([str(tmp_path / "subs")]) == 2
    assert capsys.readouterr().err == (f"workshop verify: no root seal folder {tmp_path / 'nowhere'}: give the folder "
                                       "the site's Epilog writes\n")
    (tmp_path / "seals").mkdir()
    assert verify.main([str(tmp_path / "subs"), "--seal-dir", str(tmp_path / "seals")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"1 job(s), 0 flagged; digests keyed; root seal {tmp_path / 'seals'}"


def test_a_profile_that_does_not_exist_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--profile naming no profile: exit 2 with the profile's own error (the file it looked for, and the fix)."""
    make_job(tmp_path)
    assert verify.main([str(tmp_path), "--profile", "no-such-site"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("workshop verify: profile no-such-site: field 'profile': no profile file") and "Fix: " in err


def test_a_logs_time_is_quoted_as_the_log_wrote_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log's zoned time is not turned into the grader's zone: the reason quotes the instant the log wrote."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        job = make_job(tmp_path)
        job.replace_line("[job] start ", f"[job] start 2026-11-26T09:50:00+00:00 on node7 in {job.folder}")
        assert only_reason(tmp_path) == ("the log starts at 2026-11-26T09:50:00+00:00, before this job was submitted "
                                         f"({SUBMITTED}): a log from another job")
    finally:
        monkeypatch.undo()
        time.tzset()


def test_the_instructors_job_handed_in_by_every_student(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Instructor-run mode, the site profile named by the jobs' own job.json: a link to the instructor's job and a
    byte-for-byte copy pass with a note naming it; the same job under another folder name is flagged."""
    from workshop.slurm import profiles

    job = make_job(tmp_path / "instructor", profile="classroom")
    root = job.folder.parent.resolve()
    monkeypatch.setattr(profiles, "PROFILES_DIR", tmp_path / "profiles")
    monkeypatch.delenv("WORKSHOP_PROFILE", raising=False)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "classroom.toml").write_text(
        (profiles.SLURM_DIR / "profiles" / "local.toml").read_text() + f'\n[course]\ninstructor_jobs = "{root}"\n')
    subs = tmp_path / "subs"
    for student in ("bob", "carol", "dave"):
        (subs / student / "01_baseline" / "jobs").mkdir(parents=True)
    (subs / "bob" / "01_baseline" / "jobs" / job.folder.name).symlink_to(job.folder, target_is_directory=True)
    shutil.copytree(job.folder, subs / "carol" / "01_baseline" / "jobs" / job.folder.name)
    shutil.copytree(job.folder, subs / "dave" / "01_baseline" / "jobs" / "renamed")
    found = {v.student: v for v in verify.verify(subs, key=KEY)}
    for student in ("bob", "carol"):
        assert found[student].reasons == [] and found[student].instructor == root / job.folder.name
        assert f"the instructor's job for the class ({root / job.folder.name})" in found[student].notes
    others = ", ".join(f"{s}/01_baseline/jobs/{job.folder.name} (the instructor's job)" for s in ("bob", "carol"))
    assert found["dave"].reasons == [
        f"the results (digest) of the instructor's job {root / job.folder.name}, in a folder of another name",
        f"the same log (job {found['dave'].identity}) is also in {others}"]


def test_an_instructors_slurm_job_must_have_run_as_the_instructor(tmp_path: Path) -> None:
    """A Slurm job handed in as the instructor's: accounting must name the owner of the instructor's job.json."""
    import pwd

    job = make_job(tmp_path / "instructor", job_id="4242", host="gpu07")     # written, so owned, by this test's user
    me = pwd.getpwuid(os.geteuid()).pw_name
    times = dict(Start=local_clock("2026-11-26T10:00:01+00:00"), End=local_clock("2026-11-26T10:00:22+00:00"))
    v = slurm_verdict(job, tmp_path / "instructor")
    v.instructor = job.folder
    verify.check_job(v, record(User=me, **times), "alice", KEY)
    assert v.reasons == []
    verify.check_job(v, record(User="mallory", **times), "alice", KEY)
    assert v.reasons == [f"job 4242 ran as 'mallory', not as {me!r}, who ran the instructor's jobs in "
                         f"{job.folder.parent}"]


def test_exactly_five_seconds_after_the_job_ended_is_skew_not_another_job(tmp_path: Path) -> None:
    """The local skew allowance holds at its boundary after the job's recorded end too."""
    job = make_job(tmp_path)
    job.replace_line("[job] start ", f"[job] start 2026-11-26T10:00:26+00:00 on node7 in {job.folder}")
    assert reasons(tmp_path) == {("alice", "01_baseline"): []}


def test_a_local_jobs_own_host_is_allowed_without_a_node_list(tmp_path: Path) -> None:
    """job.json's host is where a one-node local job ran, whatever its node list says (or without one)."""
    make_job(tmp_path, nodes="")
    assert reasons(tmp_path) == {("alice", "01_baseline"): []}


def test_slurm_jobs_are_judged_by_their_accounting_lines(tmp_path: Path) -> None:
    """verify's judgement of Slurm jobs from sacct's lines: a job run as the student's mapped user passes, one run as
    the folder's own name passes without a mapping, one sacct never saw is flagged; a root seal folder is checked."""
    start, end = local_clock("2026-11-26T10:00:01+00:00"), local_clock("2026-11-26T10:00:22+00:00")
    for student, job_id in (("alice", "4242"), ("carol", "4244"), ("bob", "4243")):
        make_job(tmp_path, student=student, job_id=job_id, host="gpu07")
    accounting = verify.read_sacct(f"4242|u1001|COMPLETED|gpu[06-07]|{start}|{end}\n"
                                   f"4244|carol|COMPLETED|gpu07|{start}|{end}\n")
    found = {v.student: v.reasons for v in verify.judge(verify.job_folders(tmp_path), accounting, [],
                                                        {"alice": "u1001"}, KEY)}
    assert found == {"alice": [], "carol": [], "bob": ["job 4243 never ran on this cluster: sacct has no record of it"]}
    (tmp_path / "seals").mkdir()
    sealed = {v.student: v.reasons for v in verify.judge(verify.job_folders(tmp_path), accounting, [],
                                                         {"alice": "u1001"}, KEY, tmp_path / "seals")}
    assert sealed["carol"] == [f"no root seal of job 4244 in {tmp_path / 'seals'}: the site's Epilog did not record "
                               "it (not a job of this cluster, or one that ended before the Epilog was installed)"]


def test_a_log_with_bytes_that_are_not_utf8_is_still_read(tmp_path: Path) -> None:
    """A stray byte in a job's output (a progress bar, a node's locale) does not stop its records being read."""
    job = make_job(tmp_path)
    job.log.write_bytes(job.log.read_bytes() + b"progress \xff\xfe 50%\n")
    assert reasons(tmp_path) == {("alice", "01_baseline"): []}
