"""`workshop <command>`: one console script; each command lives in its own module.

The table maps a command to `module:function`; the function takes the remaining argv and returns
an exit code. Modules are imported lazily so `workshop status` does not pay for importing torch.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("workshop.training.train:main", "run one training job (launch it with torchrun for several processes)"),
    "submit": ("workshop.slurm.cli:submit_main", "render and submit a course step as a batch job"),
    "status": ("workshop.slurm.cli:status_main", "state of a submitted job"),
    "cancel": ("workshop.slurm.cli:cancel_main", "cancel a submitted job"),
    "logs": ("workshop.slurm.cli:logs_main", "print a job's log"),
    "bandwidth": ("workshop.comm.bandwidth:main", "all_reduce bus-bandwidth self-test (nccl-tests' table)"),
    "table": ("workshop.results.tables:main", "turn a job log or run folder into the step's exercise table"),
    "diagnose": ("workshop.results.diagnose:main", "explain why a job failed and what to change"),
    "estimate": ("workshop.results.memory:main", "predict peak memory per GPU for a config"),
    "dryrun": ("workshop.slurm.fit:main", "a step's job at full size on fake tensors: memory per GPU, FLOPs, collectives"),
    "bench": ("workshop.bench.harness:main", "benchmark the course configurations on one GPU"),
    "verify": ("workshop.results.verify:main", "check submitted job logs against Slurm accounting and their digests"),
    "budget": ("workshop.site.schedule:main", "instructor: the class's GPU-hours, disk, and the day's schedule per notebook"),
    "class": ("workshop.grading.classview:main", "instructor: every student's jobs per step, states and failures, from sacct"),
    "preflight": ("workshop.site.preflight:main", "admin: check a site profile on its cluster (partitions, account, a job per GPU partition)"),
    "student-folder": ("workshop.site.student_folder:main", "instructor: write a student's course folder (the release notebooks, no answers)"),
    "prefetch": ("workshop.site.prefetch:main", "admin: fill the shared cache with the model and SQuAD, prove an offline read-only load"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: workshop <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "`workshop <command> --help` documents each command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"workshop: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module_name, func_name = COMMANDS[name][0].split(":")
    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
