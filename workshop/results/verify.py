"""`workshop verify SUBMISSIONS_DIR`: are the job logs in the students' submissions real?

Grading reads tables out of each student's own job logs; this checks each submitted job
(`SUBMISSIONS_DIR/<student>/<assignment>/jobs/*/`) against what only Slurm and the job itself wrote:

- Slurm's accounting (`sacct -P`): the job exists (an invented id has no record), it ran as the
  student's Unix user (another student's log has another owner), on the nodes its log names, and
  between the times its log's `[job] start` / `[job] end` lines say;
- the run's digest (`run/digest.json`, also printed as `WORKSHOP_DIGEST`): a SHA-256 over the job
  id, summary.json and metrics.jsonl, computed by the training job itself. Edited numbers in the
  files, or in the log's WORKSHOP_SUMMARY / WORKSHOP_METRICS lines, no longer match it;
- the class as a whole: one job id, or one digest, in two submissions is one log handed in twice.
  Except the instructor's jobs in instructor-run mode (`workshop.site.budget`): every student may hand in
  the job the instructor ran for the class, as a link into the profile's `[course] instructor_jobs`
  folder or a copy the instructor's folder holds byte for byte. Its seal is checked like any other; on
  Slurm it must have run as the owner of the instructor's folder's job.json.

What the digest proves depends on its key. Keyed (HMAC-SHA256 with WORKSHOP_DIGEST_KEY, a per-site
secret in the jobs' environment and the grader's), a student cannot make a matching digest for
numbers of their own. That holds only if students cannot read the key: on a real site it must reach
the job through a mechanism they do not control (a Slurm prolog, or a file readable only by a job
user), never through a profile or environment they can read. Without a key the digest is a plain
SHA-256 that anyone can recompute: it catches careless edits, not a forger. The sacct checks hold
either way, as far as accounting can be trusted. What a student cannot forge is the root seal
(`--seal-dir`, workshop.results.root_seal): the SHA-256 of each job's log and results, recorded as root by
the site's Slurm Epilog when the job ended.

Jobs of the local backend (`job.json` says backend "local", ids `local-N`) have no accounting: they
are checked against their own job.json instead (the log's job number, start time and hosts against
the record the submitting kernel wrote), and a job is one process (host, pid, start tick), so a
folder handed in twice is seen even though every student's first local job is `local-1`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from workshop.training import log_records
from workshop.training.checkpoints import KEY_ENV, digest, read_metrics
from workshop.results.logs import json_obj
from workshop.results.root_seal import SEAL_ENV, root_seal_problems
from workshop.slurm.profiles import ProfileError
from workshop.slurm.slurm_backend import SlurmError, run

TIME_TOLERANCE_S = 120.0     # log lines vs accounting: clock skew between nodes, accounting's second granularity
LOCAL_SKEW_S = 5.0          # local jobs: submission and log share one clock (a pending job may start late)
_LOG_NAME = re.compile(r"slurm-((?:local-)?\d+)\.out")


# ---------------------------------------------------------------------------------------- the checks
@dataclass
class Verdict:
    student: str
    assignment: str
    job: str
    folder: Path
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    digest: str | None = None
    backend: str = "slurm"
    record: dict[str, Any] = field(default_factory=dict)   # the folder's job.json
    instructor: Path | None = None    # instructor-run mode: the instructor's job folder this one is

    @property
    def ok(self) -> bool:
        return not self.reasons

    @property
    def number(self) -> str:
        """The id the job itself saw as SLURM_JOB_ID (the local backend's `local-3` ran as 3)."""
        return self.job.removeprefix("local-") if self.backend == "local" else self.job

    @property
    def identity(self) -> str:
        """What names this job uniquely across the class: Slurm's id, or the local job's process."""
        if self.backend != "local":
            return self.job
        r = self.record
        return f"{self.job} (pid {r.get('pid')} on {r.get('host')}, started at tick {r.get('pid_start')})"


@dataclass
class LogFacts:
    job_id: str | None = None
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    summary: dict[str, Any] | None = None
    digest: dict[str, Any] | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)


def read_log(path: Path) -> LogFacts:
    facts = LogFacts()
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("[job] id "):
            facts.job_id = line.split()[2]
        elif line.startswith("[job] start "):
            facts.start = _time(line.split()[2])
        elif line.startswith("[job] end "):
            facts.end = _time(line.split()[2])
        elif (record := log_records.read(line)) is not None:
            kind, text = record
            if kind == log_records.SUMMARY:
                facts.summary = json_obj(text)
            elif kind == log_records.DIGEST:
                facts.digest = json_obj(text)
            elif kind == log_records.METRICS and (metrics := json_obj(text)) is not None:
                facts.metrics.append(metrics)
    return facts


def _time(text: str) -> dt.datetime | None:
    """A log's `date -Is` or sacct's local time (no zone: this machine's), as an aware datetime."""
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo else t.astimezone()


def sacct(job_ids: Iterable[str]) -> dict[str, dict[str, str]]:
    """Accounting records of the jobs (allocation lines), every user's: {} for an id Slurm never ran."""
    ids = sorted({j for j in job_ids if j.isdigit()})
    if not ids:
        return {}
    try:
        text = run(["sacct", "-P", "-n", "-X", "--allusers", "-j", ",".join(ids),
                    "--format=" + ",".join(SACCT_FIELDS)], timeout=60)
    except SlurmError as e:
        raise RuntimeError(f"{e}. verify needs Slurm accounting (slurmdbd): run it on the cluster's login node") from None
    return read_sacct(text)


SACCT_FIELDS = ("JobIDRaw", "User", "State", "NodeList", "Start", "End")


def read_sacct(text: str) -> dict[str, dict[str, str]]:
    """`sacct -P -n --format=<SACCT_FIELDS>` output (one `|`-separated line a job, no header) by job id."""
    out = {}
    for line in text.splitlines():
        rec = dict(zip(SACCT_FIELDS, line.split("|")))
        out[rec["JobIDRaw"]] = rec
    return out


def hostnames(nodelist: str) -> set[str]:
    """Slurm's compressed node list (n[1-2],gpu07) as names, by Slurm's own expansion where it works.

    `scontrol show hostnames` needs a slurm.conf even for this local computation: on a machine with
    Slurm's client but no configuration (an instructor's laptop, a test machine between clusters) it
    fails, and the compressed list read as one name would flag every multi-node job. The common forms
    are then expanded here. Where SLURM_CONF names no file, scontrol is not asked at all: it retries the
    missing file for 60 s before it fails (30 s of waiting per job folder, cut by the timeout)."""
    if not nodelist or nodelist in ("None assigned", "(null)"):
        return set()
    if os.environ.get("SLURM_CONF") and not os.path.isfile(os.environ["SLURM_CONF"]):
        return expand_hostlist(nodelist)
    try:
        return set(run(["scontrol", "show", "hostnames", nodelist], timeout=30).split())
    except SlurmError:
        return expand_hostlist(nodelist)


def expand_hostlist(nodelist: str) -> set[str]:
    """`gpu[06-07,10],login1` -> {gpu06, gpu07, gpu10, login1}: ranges keep their zero padding, and a
    name may hold several bracket groups (`r[1-2]n[1-2]`). A form not understood stays one name."""
    names: set[str] = set()
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", nodelist):
        names |= _expand_one(item)
    return names


def _expand_one(item: str) -> set[str]:
    found = re.match(r"([^\[]*)\[([^\]]*)\](.*)", item)
    if not found:
        return {item}
    head, ranges, tail = found.groups()
    out: set[str] = set()
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
            return {item}
        width = len(lo)
        out |= {f"{head}{n:0{width}d}{rest}" for n in range(int(lo), int(hi or lo) + 1)
                for rest in _expand_one(tail)}
    return out


def check_job(v: Verdict, record: dict[str, str] | None, user: str, key: str | None,
              seal_dir: Path | None = None) -> None:
    """Fill `v.reasons` with everything that does not add up for one job folder (`seal_dir`: the root seal's
    folder, where the site's Epilog records each Slurm job's files at its end)."""
    log_path = v.folder / f"slurm-{v.job}.out"
    if not log_path.is_file():
        v.reasons.append(f"no log slurm-{v.job}.out in the job folder")
        return
    facts = read_log(log_path)
    if facts.job_id is not None and facts.job_id != v.number:
        v.reasons.append(f"the log says it is job {facts.job_id}, its name says {v.job}")
    if v.backend == "local":
        check_local(v, facts)
    elif record is None:
        v.reasons.append(f"job {v.job} never ran on this cluster: sacct has no record of it")
    else:
        if v.instructor is not None:
            owner = _owner(v.instructor / "job.json")
            if record["User"] != owner:
                v.reasons.append(f"job {v.job} ran as {record['User']!r}, not as {owner!r}, who ran the instructor's "
                                 f"jobs in {v.instructor.parent}")
        elif record["User"] != user:
            v.reasons.append(f"job {v.job} ran as {record['User']!r}, not as {user!r}: another user's log")
        hosts = set((facts.summary or {}).get("hosts") or [])
        allocated = hostnames(record["NodeList"])
        if hosts and not hosts <= allocated:
            v.reasons.append(f"the log's hosts {sorted(hosts)} are not the job's nodes {sorted(allocated)}")
        start, end = _time(record["Start"]), _time(record["End"])
        if facts.start and start and abs((facts.start - start).total_seconds()) > TIME_TOLERANCE_S:
            v.reasons.append(f"the log starts at {facts.start.isoformat()}, Slurm started the job at {record['Start']}")
        if facts.end and end and abs((facts.end - end).total_seconds()) > TIME_TOLERANCE_S:
            v.reasons.append(f"the log ends at {facts.end.isoformat()}, Slurm ended the job at {record['End']}")
    check_digest(v, facts, key)
    if seal_dir is not None and v.backend == "slurm":
        v.reasons += root_seal_problems(v.folder, v.job, seal_dir)


def _owner(path: Path) -> str:
    """The user name owning a file (its uid where the name is unknown)."""
    import pwd

    uid = path.stat().st_uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def check_local(v: Verdict, facts: LogFacts) -> None:
    """A local-backend job has no accounting: its log must agree with the job.json written at submission."""
    r = v.record
    v.notes.append("local backend: no Slurm accounting, checked against job.json")
    if not r.get("pid") or not r.get("host"):
        v.reasons.append("job.json of a local job without its process (pid, host): not written by workshop submit")
    submitted, ended = _time(str(r.get("submitted_at") or "")), _time(str(r.get("ended_at") or ""))
    if facts.start is None:
        v.reasons.append("the log has no `[job] start` line")
    elif submitted and (facts.start - submitted).total_seconds() < -LOCAL_SKEW_S:
        v.reasons.append(f"the log starts at {facts.start.isoformat()}, before this job was submitted "
                         f"({r.get('submitted_at')}): a log from another job")
    elif ended and (facts.start - ended).total_seconds() > LOCAL_SKEW_S:
        v.reasons.append(f"the log starts at {facts.start.isoformat()}, after this job ended "
                         f"({r.get('ended_at')}): a log from another job")
    hosts = set((facts.summary or {}).get("hosts") or [])
    allowed = {r.get("host")} | set(str(r.get("nodes") or "").split(","))
    if hosts and not hosts <= allowed:
        v.reasons.append(f"the log's hosts {sorted(hosts)} are not this job's {sorted(h for h in allowed if h)}")


@dataclass
class SealCheck:
    """What a job folder's digest seal says: the problems (reasons to flag), notes, and the digest it holds."""

    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    digest: str | None = None


def digest_seal(run: Path, job: str, facts: LogFacts, key: str | None) -> SealCheck:
    """The run's digest (run/digest.json) against the job's id, its files and its log: edited numbers, or a
    digest of another job, no longer match. The one check `workshop verify` and the integrity review share.
    `job`: Slurm's id, or the local backend's `local-N` (which ran, and signed, as N)."""
    number = job.removeprefix("local-")
    out = SealCheck()
    summary_path, digest_path = run / "summary.json", run / "digest.json"
    if not summary_path.is_file() and facts.summary is None:
        out.notes.append("no results (the run did not finish)")
        return out
    if not digest_path.is_file():
        out.reasons.append("results without run/digest.json: they cannot be checked")
        return out
    try:
        saved = json.loads(digest_path.read_text())
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else None
        metrics = read_metrics(run / "metrics.jsonl")
    except (OSError, ValueError):
        out.reasons.append("run/summary.json, metrics.jsonl or digest.json is unreadable")
        return out
    out.digest = saved.get("digest")
    if str(saved.get("job_id")) != number:
        out.reasons.append(f"digest.json belongs to job {saved.get('job_id')}, not {job}")
    if key and not saved.get("keyed"):
        out.reasons.append("an unkeyed digest where this site's jobs sign theirs: recomputed by hand?")
    elif saved.get("keyed") and not key:
        out.notes.append(f"keyed digest not checked: set {KEY_ENV}")
    else:
        expected = digest(number, summary or {}, metrics, key if saved.get("keyed") else None)
        if summary is None or expected["digest"] != saved.get("digest"):
            out.reasons.append("edited numbers: summary.json / metrics.jsonl do not match the run's digest")
        if not saved.get("keyed"):
            out.notes.append("unkeyed digest: detects careless edits only")
    if facts.digest is None or facts.digest.get("digest") != saved.get("digest"):
        out.reasons.append("the log's WORKSHOP_DIGEST line does not match run/digest.json")
    if facts.summary is not None and facts.summary != summary:
        out.reasons.append("edited numbers: the log's WORKSHOP_SUMMARY differs from run/summary.json")
    file_records = {json.dumps(r, sort_keys=True) for r in metrics}
    if any(json.dumps(r, sort_keys=True) not in file_records for r in facts.metrics):
        out.reasons.append("edited numbers: a WORKSHOP_METRICS line of the log is not in run/metrics.jsonl")
    return out


def check_digest(v: Verdict, facts: LogFacts, key: str | None) -> None:
    """The run's digest against its files and its log, into the verdict."""
    sealed = digest_seal(v.folder / "run", v.job, facts, key)
    v.reasons += sealed.reasons
    v.notes += sealed.notes
    v.digest = sealed.digest


def job_folders(submissions: Path) -> list[Verdict]:
    """One Verdict per `<student>/<assignment>/jobs/<job>/` (its current job: job.json, else its log)."""
    out = []
    for folder in sorted(submissions.glob("*/*/jobs/*/")):
        student, assignment = folder.parts[-4], folder.parts[-3]
        record: dict[str, Any] = {}
        if (folder / "job.json").is_file():
            try:
                loaded = json.loads((folder / "job.json").read_text())
                record = loaded if isinstance(loaded, dict) else {}
            except ValueError:
                pass
        job_id = str(record["job_id"]) if record.get("job_id") is not None else None
        if job_id is None:
            logs = sorted(folder.glob("slurm-*.out"), key=lambda p: p.stat().st_mtime)
            m = _LOG_NAME.fullmatch(logs[-1].name) if logs else None
            job_id = m.group(1) if m else "?"
        backend = "local" if record.get("backend") == "local" or job_id.startswith("local-") else "slurm"
        out.append(Verdict(student, assignment, job_id, folder, backend=backend, record=record))
    return out


def verify(submissions: Path, users: dict[str, str] | None = None, key: str | None = None,
           profile: str | Path | None = None, seal_dir: Path | None = None) -> list[Verdict]:
    """Check every submitted job; `users` maps a submission folder name to its Unix user (default: same).
    `profile` names the site profile whose instructor_jobs folder holds the instructor-run jobs (default:
    $WORKSHOP_PROFILE's, and the profiles of this checkout the jobs name). `seal_dir`: the root seal's
    folder (workshop.results.root_seal); None checks no root seal."""
    from workshop.slurm.shared import instructor_roots

    verdicts = job_folders(submissions)
    roots = instructor_roots(profile, {str(v.record.get("profile") or "") for v in verdicts})
    records = sacct(v.job for v in verdicts if v.backend == "slurm")
    return judge(verdicts, records, roots, users, key, seal_dir)


def judge(verdicts: list[Verdict], records: dict[str, dict[str, str]], roots: list[Path],
          users: dict[str, str] | None = None, key: str | None = None, seal_dir: Path | None = None) -> list[Verdict]:
    """`verify`'s judgement of the job folders, given Slurm's accounting records of them (`read_sacct`) and the
    instructor_jobs folders (`roots`): each job on its own, then the class as a whole (one log or one digest in
    two submissions)."""
    from workshop.slurm.shared import instructor_original

    users = users or {}
    for v in verdicts:
        v.instructor = instructor_original(v.folder, roots)
        if v.instructor is not None:
            v.notes.append(f"the instructor's job for the class ({v.instructor})")
    for v in verdicts:
        check_job(v, records.get(v.job), users.get(v.student, v.student), key, seal_dir)
    by_job: dict[str, list[Verdict]] = {}
    by_digest: dict[str, list[Verdict]] = {}
    for v in verdicts:
        by_job.setdefault(v.identity, []).append(v)
        if v.digest:
            by_digest.setdefault(v.digest, []).append(v)

    def where(others: list[Verdict]) -> str:
        return ", ".join(f"{o.student}/{o.assignment}/jobs/{o.folder.name}"
                         + (" (the instructor's job)" if o.instructor else "") for o in others)

    shared = {d: folder for root in roots for folder in sorted(root.glob("*/"))
              if (d := saved_digest(folder))}
    for v in verdicts:
        others = [o for o in by_job[v.identity] if o is not v]
        if v.instructor is not None:
            continue                  # handed to every student on purpose; its seal was checked above
        if v.digest in shared:
            v.reasons.append(f"the results (digest) of the instructor's job {shared[v.digest]}, in a folder of "
                             "another name")
        if others:
            v.reasons.append(f"the same log (job {v.identity}) is also in {where(others)}")
        elif v.digest and len(by_digest[v.digest]) > 1:
            v.reasons.append(f"identical results (digest) to {where([o for o in by_digest[v.digest] if o is not v])}")
    return verdicts


def saved_digest(folder: Path) -> str | None:
    """The digest a job folder's run/digest.json holds (None when it is missing or unreadable)."""
    try:
        return json.loads((folder / "run" / "digest.json").read_text()).get("digest")
    except (OSError, ValueError, AttributeError):
        return None


def table(verdicts: list[Verdict]) -> str:
    rows = [("student", "assignment", "job", "verdict", "reason")]
    for v in verdicts:
        why = "; ".join(v.reasons) if v.reasons else "; ".join(v.notes)
        rows.append((v.student, v.assignment, v.job, "ok" if v.ok else "FLAGGED", why))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4] for r in rows)


def read_user_map(path: str | None) -> dict[str, str]:
    """`student,unix_user` lines (a header line, blank lines, # comments and a line without both names are
    skipped: a student mapped to no user would flag every Slurm job of theirs as another user's)."""
    if not path:
        return {}
    out = {}
    for line in Path(path).read_text().splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0] and parts[1] and not parts[0].startswith("#") and parts[0] != "student":
            out[parts[0]] = parts[1]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="workshop verify", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("submissions", help="folder of <student>/<assignment>/jobs/<job>/ (nbgrader's submitted/)")
    p.add_argument("--user-map", help="CSV of student,unix_user where submission folders are not user names")
    p.add_argument("--profile", help="site profile whose [course] instructor_jobs holds the instructor-run jobs "
                                     "(default: WORKSHOP_PROFILE's, and each job's own profile in slurm/profiles/)")
    p.add_argument("--seal-dir", type=Path, default=os.environ.get(SEAL_ENV) or None,
                   help="the root seal's folder, where the site's Slurm Epilog records each job's files at its end "
                        f"(docs/instructor.md, 'The root seal'; default: ${SEAL_ENV})")
    args = p.parse_args(argv)
    root = Path(args.submissions)
    if not root.is_dir():
        print(f"workshop verify: {root} is not a folder. Give nbgrader's submitted/ folder", file=sys.stderr)
        return 2
    key = os.environ.get(KEY_ENV) or None
    try:
        if args.seal_dir is not None and not Path(args.seal_dir).is_dir():
            raise OSError(f"no root seal folder {args.seal_dir}: give the folder the site's Epilog writes")
        verdicts = verify(root, read_user_map(args.user_map), key, args.profile,
                          Path(args.seal_dir) if args.seal_dir else None)
    except (RuntimeError, OSError, SlurmError, ProfileError) as e:
        print(f"workshop verify: {e}", file=sys.stderr)
        return 2
    if not verdicts:
        print(f"workshop verify: no job folders under {root}/<student>/<assignment>/jobs/", file=sys.stderr)
        return 2
    print(table(verdicts))
    flagged = sum(not v.ok for v in verdicts)
    seal = f"; root seal {args.seal_dir}" if args.seal_dir else ""
    print(f"\n{len(verdicts)} job(s), {flagged} flagged; digests {'keyed' if key else 'unkeyed (no ' + KEY_ENV + ')'}"
          + seal)
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
