"""Where the test suite's CPU goes, by kind of process: process accounting joined with command lines.

    benchmarks/suite_cpu.py record DIR -- CI=true bash .ci/run     # as root: needs Debian's `acct`
    benchmarks/suite_cpu.py report DIR --out benchmarks/cpu/suite_cpu-DATE.json

The cores are busy through most of a suite run, so only less work shortens it; this says which work.
`record` turns on the kernel's process accounting (`accton`), which writes the CPU time of every process
that ends, and samples `/proc` every 0.3 s for each PID's command line, which accounting does not keep
(every Python process is named "python" there). `report` joins the two by PID and sums CPU seconds by
kind: training ranks (split by where their job came from), launchers, notebook kernels, the bandwidth
self-test, grading, pytest itself, the bootstrap's pip. A process shorter than one sample is counted
under "unsampled"; long-lived daemons that outlive the run (slurmctld, mariadb) are not in it at all,
and /proc/stat's busy time over the run, recorded beside, bounds what is missing. The join is by PID:
`pids_recorded_twice` counts the processes whose PID an earlier process of the run also had: their kind is
then in doubt.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def sample_commands(out: Path, stop: threading.Event) -> None:
    """Write each new PID's command line (and parent, and start tick, which tells reused PIDs apart)."""
    seen: set[tuple[int, int]] = set()
    with out.open("a") as f:
        while not stop.is_set():
            for name in os.listdir("/proc"):
                if not name.isdigit():
                    continue
                try:
                    raw = Path(f"/proc/{name}/cmdline").read_bytes()
                    fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                key = (int(name), int(fields[19]))
                if not raw or key in seen:
                    continue
                seen.add(key)
                cmd = raw.replace(b"\0", b" ").decode(errors="replace")[:400]
                f.write(json.dumps({"pid": key[0], "ppid": int(fields[1]), "start": key[1], "cmd": cmd}) + "\n")
            f.flush()
            time.sleep(0.3)


def cpu_ticks() -> dict[str, int]:
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return dict(zip(names, map(int, Path("/proc/stat").read_text().splitlines()[0].split()[1:9])))


def record(folder: Path, command: list[str]) -> int:
    if shutil.which("accton") is None:
        sys.exit("record: process accounting is not installed: apt-get install acct (as root)")
    folder.mkdir(parents=True, exist_ok=True)
    pacct = folder / "pacct"
    pacct.write_bytes(b"")
    stop = threading.Event()
    sampler = threading.Thread(target=sample_commands, args=(folder / "commands.jsonl", stop), daemon=True)
    sampler.start()
    load_before = os.getloadavg()[0]
    subprocess.run(["accton", str(pacct)], check=True)
    before, started = cpu_ticks(), time.time()
    try:
        rc = subprocess.run(command).returncode
    finally:
        after, ended = cpu_ticks(), time.time()
        subprocess.run(["accton", "off"], check=False)
        stop.set()
        sampler.join()
    (folder / "run.json").write_text(json.dumps({"command": command, "rc": rc, "load_1min_before": load_before,
                                                 "started": started, "ended": ended,
                                                 "ticks_before": before, "ticks_after": after}))
    return rc


def read_accounting(pacct: Path) -> list[dict]:
    return parse_accounting(subprocess.run(["dump-acct", str(pacct)], capture_output=True, text=True,
                                           check=True).stdout)


def parse_accounting(text: str) -> list[dict]:
    """dump-acct's fields: command | version | user | system | elapsed (centiseconds) | uid | gid | memory | io |
    pid | ppid | flags | exit code | tty | start."""
    rows = []
    for line in text.splitlines():
        f = [x.strip() for x in line.split("|")]
        rows.append({"comm": f[0], "cpu_s": (float(f[2]) + float(f[3])) / 100, "elapsed_s": float(f[4]) / 100,
                     "pid": int(f[9])})
    return rows


SLURM_COMMANDS = {"sbatch", "sacct", "squeue", "scontrol", "srun", "scancel", "sinfo", "sacctmgr", "slurmstepd",
                  "slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged"}


def kind_of(comm: str, cmd: str) -> str:
    if comm in SLURM_COMMANDS:       # before the command line: `srun ... torchrun -m workshop.training.train`
        return "Slurm commands"
    if comm in ("sh", "bash", "dash"):
        return "shells (job scripts, wrappers)"
    # a console script runs as "python SCRIPT ...": its name is the first or the second word. Both launchers
    # run torch's elastic agent, which renames the main thread: accounting names either pt_elastic
    words = {Path(word).name for word in cmd.split(" ")[:2]}
    if "accelerate" in words | {comm} or "accelerate.commands" in cmd:
        return "launcher: accelerate"
    if "torch.distributed.run" in cmd or "torchrun" in words or comm in ("torchrun", "pt_elastic"):
        return "launcher: torchrun"
    if "tests.warm_parent" in cmd:    # the tests' warm parent and the ranks it forks (their command line is its)
        return "training rank, forked (tests/warm_parent.py, with its parent)"
    if "workshop.training.train" in cmd:
        return "training rank"
    if "ipykernel" in cmd:
        return "notebook kernel"
    if "workshop.comm.bandwidth" in cmd:
        return "bandwidth self-test process"
    if "pip install" in cmd or "pip download" in cmd:
        return "bootstrap: pip"
    if "-m pytest" in cmd:
        return "pytest process (in-process tests, fixtures)"
    if "nbgrader" in cmd or "workshop.grading.grade" in cmd or "workshop.grading.integrity" in cmd or comm == "alembic":
        return "grading (nbgrader, grade, integrity review)"
    if "workshop.grading.run_all" in cmd:
        return "course runner (papermill)"
    if "workshop" in words | {comm}:
        return "workshop command (verify, diagnose, class, ...)"
    if comm.startswith("python"):
        return "other Python" if cmd else "unsampled Python (ended within one sample)"
    return "other"


def origin_of(cmd: str) -> str:
    """Where a training rank's (or its launcher's) job came from: its config's folder says which run made it."""
    if "workshop.comm.bandwidth" in cmd:
        return "the bandwidth self-test (notebook 05's jobs and its own tests)"
    found = re.search(r"--config (\S+)", cmd)
    if not found:
        return "tests' direct runs (RunCache and others: flags, no job folder)"
    path = found.group(1)
    if "/results-ci/" in path:
        return "the course on the test cluster (docs/instructor.md's dry run)"
    if re.search(r"/course(\d*|-run)/results/", path):
        return "the course on the local backend (the course_run fixture: make course)"
    if path.startswith("/tmp/workshop-slurm/"):
        return "other jobs on the test cluster"
    return "other local-backend jobs of tests"


def report(folder: Path, exclude: list[str], only: list[str] | None = None) -> dict:
    """CPU by kind. `only`: keep just the processes whose command line holds one of these texts (the clone's
    folder, the suite's scratch): on a shared machine, others' processes may look like the suite's."""
    commands: dict[int, str] = {}
    for line in (folder / "commands.jsonl").read_text().splitlines():
        r = json.loads(line)
        commands[r["pid"]] = r["cmd"]
    run = json.loads((folder / "run.json").read_text())
    by_kind: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    by_origin: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    launchers_by_origin: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    rank_cpu, excluded = [], 0.0
    rows = read_accounting(folder / "pacct")
    # the join is by PID: a PID that two recorded processes had (pid_max is often 32768) is ambiguous
    reused = sum(n - 1 for n in collections.Counter(row["pid"] for row in rows).values() if n > 1)
    for row in rows:
        cmd = commands.get(row["pid"], "")
        if any(e in cmd for e in exclude) or (only and not any(o in cmd for o in only)):
            excluded += row["cpu_s"]
            continue
        kind = kind_of(row["comm"], cmd)
        by_kind[kind][0] += row["cpu_s"]
        by_kind[kind][1] += 1
        if kind.startswith("training rank"):
            origin = origin_of(cmd)
            by_origin[origin][0] += row["cpu_s"]
            by_origin[origin][1] += 1
            rank_cpu.append(row["cpu_s"])
        elif kind.startswith("launcher"):
            origin = origin_of(cmd)
            launchers_by_origin[origin][0] += row["cpu_s"]
            launchers_by_origin[origin][1] += 1
    total = sum(cpu for cpu, _ in by_kind.values())
    ticks = {k: run["ticks_after"][k] - run["ticks_before"][k] for k in run["ticks_before"]}
    busy = sum(v for k, v in ticks.items() if k not in ("idle", "iowait")) / 100
    rank_cpu.sort()

    def table(d: dict) -> dict:
        return {k: {"cpu_s": round(cpu, 1), "pct": round(100 * cpu / total, 1), "processes": int(n)}
                for k, (cpu, n) in sorted(d.items(), key=lambda kv: -kv[1][0])}

    return {
        "recorded_cpu_s": round(total, 1),
        "machine_busy_cpu_s_proc_stat": round(busy, 1),
        "machine_idle_cpu_s_proc_stat": round((ticks["idle"] + ticks["iowait"]) / 100, 1),
        "wall_s": round(run["ended"] - run["started"], 1),
        "excluded_cpu_s": round(excluded, 1),
        "pids_recorded_twice": reused,
        "by_kind": table(by_kind),
        "training_ranks_by_origin": table(by_origin),
        "launchers_by_origin": table(launchers_by_origin),
        "training_rank_cpu_s": {"processes": len(rank_cpu), "median": rank_cpu[len(rank_cpu) // 2],
                                "p10": rank_cpu[len(rank_cpu) // 10], "p90": rank_cpu[9 * len(rank_cpu) // 10]}
                               if rank_cpu else None,
        "load_1min_before": run["load_1min_before"],
        "rc": run["rc"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    rec = sub.add_parser("record", help="run a command with process accounting on (root)")
    rec.add_argument("folder", type=Path)
    rec.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    rep = sub.add_parser("report", help="CPU seconds by kind of process, from a recorded folder")
    rep.add_argument("folder", type=Path)
    rep.add_argument("--out", type=Path)
    rep.add_argument("--exclude", action="append", default=[],
                     help="leave out processes whose command line holds this text (a probe of your own)")
    rep.add_argument("--only", action="append", default=[],
                     help="keep only processes whose command line holds this text (e.g. the clone's folder)")
    rep.add_argument("--what", default="make test as CI runs it (CI=true bash .ci/run) in a clean clone")
    args = parser.parse_args(argv)
    if args.action == "record":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        return record(args.folder, command)
    from benchmarks import machine

    found = report(args.folder, args.exclude, args.only)
    load = found.pop("load_1min_before")
    out = {**machine.record(args.what, load or 0.0), **found}
    out["machine"]["load_1min_before"] = load   # None: not recorded
    text = json.dumps(out, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
