"""The report of scripts/compat_check.sh: benchmarks/compat/compat-DATE.json and .md from the step logs it left.

Counts come from pytest's JUnit XML (the fast tier) and its collection line (tests/gpu); the notebooks' result
from the course runner's exit status and its "done in" lines. A step that did not run is "not measured",
with the reason (the side environment did not build, or the step's log is missing).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "compat"
SHOWN = ("torch", "transformers", "accelerate", "datasets", "tokenizers", "numpy", "pandas", "papermill", "nbgrader",
         "ipykernel", "jupyter_client", "pytest")


def status(logs: Path, step: str) -> tuple[int, int] | None:
    path = logs / f"{step}.status"
    if not path.is_file():
        return None
    rc, seconds = path.read_text().split()
    return int(rc), int(seconds)


def junit(path: Path) -> dict:
    """passed/failed/errors/skipped and the names of the tests that failed, from pytest's JUnit XML."""
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    failed, errors, skipped = [], [], []
    for case in suite.iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        if case.find("failure") is not None:
            failed.append((name, _first_line(case.find("failure"))))
        elif case.find("error") is not None:
            errors.append((name, _first_line(case.find("error"))))
        elif case.find("skipped") is not None:
            skipped.append((name, case.find("skipped").get("message", "")))
    total = int(suite.get("tests", 0))
    return {"tests": total, "passed": total - len(failed) - len(errors) - len(skipped), "failed": len(failed),
            "errors": len(errors), "skipped": len(skipped),
            "failures": [{"test": n, "message": m} for n, m in failed + errors],
            "skips": [{"test": n, "reason": m} for n, m in skipped]}


def _first_line(element: ET.Element) -> str:
    text = element.get("message") or element.text or ""
    return text.strip().splitlines()[0][:300] if text.strip() else ""


def jobs(results: Path) -> list[dict]:
    """What each of the notebooks' jobs measured: a job can complete with a feature "not measured" (its reason
    says why), which the notebook's exit status does not show."""
    out = []
    for path in sorted(results.glob("*/jobs/*/run/summary.json")):
        summary = json.loads(path.read_text())
        comm = summary.get("comm") or {}
        out.append({"job": f"{path.parts[-5]}/{path.parts[-3]}", "status": summary.get("status"),
                    "sharding_applied": summary.get("sharding_applied"), "world_size": summary.get("world_size"),
                    "memory_kind": summary.get("mem_kind"), "comm": comm.get("status"),
                    "comm_reason": comm.get("reason")})
    return out


def build(logs: Path, build_status: int, requested: list[str], results: Path | None = None) -> dict:
    report: dict = {"what": "scripts/compat_check.sh: the course on the lent GPU machine's versions, on CPU",
                    "date": dt.date.today().isoformat(), "machine": f"{platform.node()}, {os.cpu_count()} cores",
                    "python": platform.python_version(), "commit": _git("rev-parse", "--short", "HEAD"),
                    "requested": requested, "steps": {}, "not_measured": []}
    if (logs / "build.seconds").is_file():
        report["build_seconds"] = int((logs / "build.seconds").read_text())
    if build_status != 0:
        report["build"] = {"exit": build_status, "log_tail": _tail(logs / "build.log")}
        report["not_measured"].append({"what": "every step", "why": "the side environment did not build "
                                       f"(pip exit {build_status}); see build.log_tail"})
        return report
    if (logs / "versions.log").is_file():
        try:
            listed = {p["name"].lower().replace("_", "-"): p["version"]
                      for p in json.loads((logs / "versions.log").read_text().strip().splitlines()[-1])}
            report["versions"] = {n: listed.get(n.replace("_", "-")) for n in SHOWN}
        except (ValueError, KeyError):
            report["versions"] = {"unreadable": _tail(logs / "versions.log")}
    for step, why in (("fast_tier", "the fast tier (scripts/test.sh --fast)"),
                      ("gpu_collect", "collection of tests/gpu (they need a CUDA device to run)"),
                      ("notebooks_02_03", "notebooks 02 and 03 on the local profile")):
        st = status(logs, step)
        if st is None:
            report["not_measured"].append({"what": why, "why": "the step did not run (no status file)"})
            continue
        entry: dict = {"what": why, "exit": st[0], "seconds": st[1]}
        if step == "fast_tier" and (logs / "fast_tier.xml").is_file():
            entry.update(junit(logs / "fast_tier.xml"))
        elif step == "gpu_collect":
            m = re.search(r"(\d+) tests? collected", (logs / f"{step}.log").read_text())
            entry["collected"] = int(m.group(1)) if m else None
            if st[0] != 0:
                entry["log_tail"] = _tail(logs / f"{step}.log")
        elif step == "notebooks_02_03":
            text = (logs / f"{step}.log").read_text()
            entry["notebooks"] = re.findall(r"\] (\S+): (done in \d+ s[^\n]*|FAILED[^\n]*)", text)
            entry["tcp_warning_lines"] = text.count("running over TCP without encryption")
            if st[0] != 0:
                entry["log_tail"] = _tail(logs / f"{step}.log", 60)
        report["steps"][step] = entry
    if results is not None and results.is_dir():
        report["jobs"] = jobs(results)
    report["not_measured"].append({"what": "anything on a GPU (CUDA kernels, NCCL, bf16 on device, tests/gpu run)",
                                   "why": "this machine has no GPU: the CUDA build of torch ran on CPU only"})
    unmeasured = [j for j in report.get("jobs", []) if j["status"] != "completed" or j["comm"] != "measured"
                  or j["memory_kind"] != "tensor"]
    if unmeasured:
        reasons = sorted({f"status {j['status']}, memory {j['memory_kind']}, comm {j['comm']}"
                          + (f" ({re.sub(r'[(]ranks? [0-9, ]+: ', '(', j['comm_reason'])})" if j["comm_reason"] else "")
                          for j in unmeasured})
        report["not_measured"].append({"what": f"{len(unmeasured)} of the notebooks' {len(report['jobs'])} jobs "
                                       "completed with a feature not measured (their table above)",
                                       "why": "; ".join(reasons)[:2000]})
    report["passed"] = (all(s.get("exit") == 0 for s in report["steps"].values()) and len(report["steps"]) == 3
                        and not unmeasured)
    return report


def markdown(report: dict) -> str:
    lines = [f"# Compatibility check, {report['date']}", "",
             f"{report['what']}. Commit {report['commit']}, {report['machine']}, Python {report['python']}. "
             f"Asked for: {', '.join(report['requested'])}; the rest as pyproject.toml pins.", ""]
    if "versions" in report:
        lines += ["Installed: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v), ""]
    if "build" in report:
        lines += [f"**The side environment did not build** (pip exit {report['build']['exit']}):", "", "```",
                  report["build"]["log_tail"], "```", ""]
    lines += ["| step | exit | seconds | result |", "|---|---:|---:|---|"]
    for step, s in report["steps"].items():
        if step == "fast_tier" and "tests" in s:
            result = (f"{s['passed']} passed, {s['failed']} failed, {s['errors']} errors, {s['skipped']} skipped "
                      f"of {s['tests']}")
        elif step == "gpu_collect":
            result = f"{s.get('collected')} collected"
        else:
            result = "; ".join(f"{n}: {r}" for n, r in s.get("notebooks", [])) or "see log"
        lines.append(f"| {step} | {s['exit']} | {s['seconds']} | {result} |")
    if report.get("jobs"):
        lines += ["", "## The notebooks' jobs", "", "| job | status | sharding | ranks | memory | comm |",
                  "|---|---|---|---:|---|---|"]
        lines += [f"| {j['job']} | {j['status']} | {j['sharding_applied']} | {j['world_size']} | {j['memory_kind']} | "
                  f"{j['comm']} |" for j in report["jobs"]]
    failures = report["steps"].get("fast_tier", {}).get("failures", [])
    if failures:
        lines += ["", "## Failed", ""] + [f"- `{f['test']}`: {f['message']}" for f in failures]
    lines += ["", "## Not measured", ""] + [f"- {n['what']}: {n['why']}" for n in report["not_measured"]]
    return "\n".join(lines) + "\n"


def _tail(path: Path, n: int = 25) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.is_file() else "(no log)"


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--logs", type=Path, required=True)
    ap.add_argument("--build-status", type=int, default=0)
    ap.add_argument("--requested", nargs="*", default=[])
    ap.add_argument("--results", type=Path, help="the notebooks' results folder (their jobs' summaries)")
    args = ap.parse_args(argv)
    report = build(args.logs, args.build_status, args.requested, args.results)
    OUT.mkdir(parents=True, exist_ok=True)
    stem = OUT / f"compat-{report['date']}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    print(f"wrote {stem}.json and .md")
    return 0 if report.get("passed") else 1


if __name__ == "__main__":
    raise SystemExit(main())
