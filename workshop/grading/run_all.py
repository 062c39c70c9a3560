"""Run the whole course headless: every solution notebook, executed with papermill, into a results folder.

    python -m workshop.grading.run_all --output results                      # the embedded default (profile: local)
    python -m workshop.grading.run_all --profile ci --only 01,05             # some steps, on another site profile
    python -m workshop.grading.run_all --parallel 2                          # two notebooks at a time

Each notebook runs in a working copy, `results/<assignment>/`, never in solutions/ (papermill's
metadata would leak into the release). Its jobs, tables (CSV) and plots (PNG) land beside it; the
tables and plots are also gathered into `results/tables/` and `results/plots/`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from workshop.grading import references
from workshop.grading.release import REPO, RUN_OUTPUTS, assignments, venv_on_path


def run_notebook(name: str, output: Path, parameters: dict[str, Any], log_output: bool = False,
                 cell_timeout: float | None = None, source: Path | None = None, side_by_side: bool = False) -> Path:
    """Execute solutions/<name>/<name>.ipynb (or source/<name>.ipynb) in output/<name>/ and return the
    executed notebook.

    With `cell_timeout`, a cell that gets no reply from its kernel for that long is taken for a hang
    and the notebook runs once more in the same folder. About one notebook execution in a few dozen
    here, a cell's execute_reply never reached papermill although the kernel had finished and sat
    idle (nteract/papermill#711, jupyter/jupyter_client#922): without a limit it waits forever. The
    second run finds every job the first one submitted (a re-run cell never resubmits), so nothing
    runs twice; the notebook's metadata says that it was run again.

    `side_by_side`: other notebooks run in this process at the same time. papermill's `cwd` changes the
    whole process's working directory, so their kernels would start in each other's folders (and put
    their jobs there); instead the kernel alone starts in `work` (nbclient's resources path).

    The kernel talks over Unix sockets (workshop.grading.ipc_kernel): ipykernel's "running over TCP without
    encryption" warning does not arise."""
    import nbformat
    import papermill

    from workshop.grading.ipc_kernel import IPCKernelManager

    src = source or REPO / "solutions" / name
    work = output / name
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(src, work, ignore=shutil.ignore_patterns(".ipynb_checkpoints", *RUN_OUTPUTS))
    notebook = work / f"{name}.ipynb"
    for attempt in (1, 2):
        try:
            where = {"resources": {"metadata": {"path": str(work)}}} if side_by_side else {"cwd": str(work)}
            # the notebook is saved and its jobs have ended: a graceful kernel shutdown only waited ~1 s
            papermill.execute_notebook(str(src / f"{name}.ipynb"), str(notebook), parameters=parameters,
                                       kernel_name="python3", progress_bar=False, log_output=log_output,
                                       execution_timeout=cell_timeout, shutdown_kernel="immediate",
                                       kernel_manager_class=IPCKernelManager, **where)
            break
        except TimeoutError:   # nbclient's CellTimeoutError
            if attempt == 2:
                raise
            print(f"  {name}: a cell had no reply from its kernel for {cell_timeout:g} s; running the notebook "
                  "again (its jobs are found, not resubmitted)", flush=True)
    if attempt == 2:
        nb = nbformat.read(notebook, as_version=4)
        nb.metadata.setdefault("workshop", {})["run_again_after_a_hung_cell"] = True
        nbformat.write(nb, notebook)
    return notebook


def gather(output: Path, name: str) -> tuple[list[Path], list[Path]]:
    """Copy a notebook's tables and plots into results/tables and results/plots."""
    found: tuple[list[Path], list[Path]] = ([], [])
    for kind, pattern, bucket in (("tables", "*.csv", found[0]), ("plots", "*.png", found[1])):
        (output / kind).mkdir(parents=True, exist_ok=True)
        for f in sorted((output / name / kind).glob(pattern)):
            shutil.copy2(f, output / kind / f.name)
            bucket.append(output / kind / f.name)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workshop.grading.run_all", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default="results", help="results folder (default: results)")
    parser.add_argument("--profile", default="local", help="site profile the jobs run on (default: local)")
    parser.add_argument("--only", default=os.environ.get("WORKSHOP_COURSE_ONLY", ""),
                        help="comma-separated notebook numbers or names, e.g. 01,03 (default: $WORKSHOP_COURSE_ONLY, "
                             "else every notebook: a test narrows the guide's dry run, typed as written, with it)")
    parser.add_argument("--set", dest="overrides", default="{}",
                        help='JSON run settings for every job, e.g. \'{"epochs": 1}\'')
    parser.add_argument("--log-output", action="store_true", help="stream each cell's output")
    parser.add_argument("--cell-timeout", type=float, default=os.environ.get("WORKSHOP_CELL_TIMEOUT"), metavar="S",
                        help="a cell without a reply from its kernel for S seconds is a hang: the notebook runs "
                             "once more (default: $WORKSHOP_CELL_TIMEOUT, else no limit, as a cell may wait in a "
                             "real queue for hours)")
    parser.add_argument("--parallel", type=int, default=1, metavar="N",
                        help="notebooks executed at the same time (default 1: one after another)")
    args = parser.parse_args(argv)
    venv_on_path()
    names = assignments()
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        names = [n for n in names if any(n == w or n.startswith(w + "_") for w in wanted)]
        if not names:
            print(f"--only {args.only!r} matches none of {', '.join(assignments())}", file=sys.stderr)
            return 2
    output = Path(args.output).resolve()
    output.mkdir(parents=True, exist_ok=True)
    parameters = {"profile": args.profile, "overrides": json.loads(args.overrides)}
    references.rows_for_the_sites([args.profile])    # the solutions' hidden tests read the site's rows
    started = time.perf_counter()
    failed = threading.Event()          # after a failure, notebooks not yet started are not started

    def run_one(i: int, name: str) -> tuple[str, float, int, list[Path], list[Path]] | None:
        if failed.is_set():
            return None
        print(f"[{i}/{len(names)}] {name}: running on profile {args.profile!r} ...", flush=True)
        t0 = time.perf_counter()
        try:
            notebook = run_notebook(name, output, parameters, args.log_output, args.cell_timeout,
                                    side_by_side=args.parallel > 1)
        except Exception as e:  # papermill raises PapermillExecutionError with the failing cell
            print(f"[{i}/{len(names)}] {name}: FAILED after {time.perf_counter() - t0:.0f} s\n{e}", flush=True)
            print(f"  the partly executed notebook is {output / name / (name + '.ipynb')}", file=sys.stderr)
            failed.set()
            return None
        tables, plots = gather(output, name)
        jobs = len(list((output / name / "jobs").glob("*/job.json")))
        took = time.perf_counter() - t0
        print(f"[{i}/{len(names)}] {name}: done in {took:.0f} s, {jobs} job(s), "
              f"{len(tables)} table(s), {len(plots)} plot(s) -> {notebook.relative_to(output.parent)}", flush=True)
        return name, took, jobs, tables, plots

    # Notebooks side by side overlap a kernel's start, tables and plots with another's jobs; the jobs
    # still queue for the cores (the local backend's queue), so no job runs on a shared core. On 2 cores
    # that gains nothing (2026-11-24: 181 s at --parallel 2, 185-204 s one after another): the jobs are
    # the time. It pays where a cluster's queue, not this machine's cores, holds the jobs.
    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        results = list(pool.map(run_one, range(1, len(names) + 1), names))
    if failed.is_set():
        return 1
    report = [r for r in results if r is not None]
    total = time.perf_counter() - started
    print(f"\ncourse finished in {total:.0f} s: executed notebooks, tables and plots are in {output}/")
    for name, took, jobs, tables, plots in report:
        print(f"  {name:<26} {took:5.0f} s  {jobs} jobs  tables: {', '.join(t.name for t in tables) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
