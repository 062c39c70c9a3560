"""benchmarks/suite_cpu.py sorts a suite run's processes by what they are: command lines of the kinds a
clean-clone run recorded on 2026-11-27 (some shortened, paths kept), each with the kind and origin
written out by hand."""

from __future__ import annotations


import pytest

from benchmarks import suite_cpu

V = "/tmp/ci-clone/.venv/bin/python"
RECORDED = [
    ("python", f"{V} {V[:-6]}torchrun --standalone --nnodes=1 --nproc-per-node=2 -m workshop.training.train --config "
               "/tmp/workshop-tests.dNEXBL/course/course0/results/03_sharding_strategies/jobs/strategies-e7a8458c58/config.json",
     "launcher: torchrun", None),
    ("pt_elastic", f"{V} {V[:-6]}torchrun --standalone --nnodes=1 --nproc-per-node=2 -m workshop.training.train",
     "launcher: torchrun", None),
    ("pt_elastic", f"{V} {V[:-6]}accelerate launch --config_file /tmp/x/accelerate.yaml -m workshop.training.train",
     "launcher: accelerate", None),
    ("srun", "srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash slurm/launch-node.sh -m workshop.training.train",
     "Slurm commands", None),
    ("bash", "bash -c torchrun --standalone -m workshop.training.train --config /tmp/x/config.json",
     "shells (job scripts, wrappers)", None),
    ("python", f"{V} -m torch.distributed.run --nnodes 1 --nproc-per-node 4 -m workshop.training.train --sharding ddp",
     "launcher: torchrun", None),
    ("python", f"{V} -u -m workshop.training.train --config /tmp/workshop-tests.dNEXBL/course/course0/results/"
               "03_sharding_strategies/jobs/strategies-e7a8458c58/config.json",
     "training rank", "the course on the local backend (the course_run fixture: make course)"),
    ("python", "python -m workshop.training.train --config /tmp/workshop-slurm/shared/course-16038/results-ci/"
               "02_fsdp_single_gpu/jobs/fsdp_1gpu-56e3ff0042/config.json",
     "training rank", "the course on the test cluster (docs/instructor.md's dry run)"),
    ("python", f"{V} -u -m workshop.training.train --config /tmp/workshop-slurm/shared/resume-16038-1795759651/"
               "multi_gpu-b9264b9f3e/config.json",
     "training rank", "other jobs on the test cluster"),
    ("python", "python -m workshop.training.train --config /tmp/workshop-tests.dNEXBL/rest/"
               "test_submit_carries_the_wrap_f0/jobs/fsdp_1gpu-c7ec164a15/config.json",
     "training rank", "other local-backend jobs of tests"),
    ("python", f"{V} -u -m workshop.training.train --train-size 24 --eval-size 8 --epochs 2 --sharding full_shard",
     "training rank", "tests' direct runs (RunCache and others: flags, no job folder)"),
    ("python", "python -u -m workshop.training.train --config /tmp/workshop-tests.IWjOyk/course-run/results/"
               "05_multi_node/jobs/multi_node-1eaef2a/config.json",
     "training rank", "the course on the local backend (the course_run fixture: make course)"),
    ("python", f"{V} -m tests.warm_parent 12 [\"torch\", \"transformers.trainer\", \"workshop.training.train\"]",
     "training rank, forked (tests/warm_parent.py, with its parent)", None),
    ("python", f"{V} -m ipykernel_launcher -f /tmp/tmpa1b2/kernel-1.json --HistoryManager.hist_file=:memory:",
     "notebook kernel", None),
    ("python", f"{V} -P -m workshop.grading.integrity --root /tmp/x/nbgrader0 --db /tmp/x/gradebook.db",
     "grading (nbgrader, grade, integrity review)", None),
    ("python", f"{V} -u -m workshop.comm.bandwidth --min-busbw 0 -e 1M", "bandwidth self-test process", None),
    ("pt_elastic", f"{V} {V[:-6]}torchrun --standalone --nproc-per-node=2 -m workshop.comm.bandwidth -e 64K -n 3",
     "launcher: torchrun", "the bandwidth self-test (notebook 05's jobs and its own tests)"),
    ("python", ".venv/bin/python -m pip install -q -e .[test]", "bootstrap: pip", None),
    ("python", ".venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 tests/slurm",
     "pytest process (in-process tests, fixtures)", None),
    ("sacct", "sacct -X -n -P -j 12,13", "Slurm commands", None),
    ("python", "", "unsampled Python (ended within one sample)", None),
]


@pytest.mark.parametrize("comm, cmd, kind, origin", RECORDED)
def test_each_recorded_process_gets_its_kind_and_a_rank_its_origin(comm, cmd, kind, origin) -> None:
    assert suite_cpu.kind_of(comm, cmd) == kind
    if origin is not None:
        assert suite_cpu.origin_of(cmd) == origin


def test_dump_acct_fields_are_read_in_seconds() -> None:
    """dump-acct prints user, system and elapsed time in centiseconds; pid is the tenth field. The line is
    the one it printed for a course rank of that run (15 fields, the start time last)."""
    line = ("python          |v3|  1689.00|    87.00|  4059.00|     0|     0|1089536.00|17469440.00|   19226|   19225|"
            "S   X|       0|__      |Fri Nov 27 05:55:35 2026")
    assert suite_cpu.parse_accounting(line + "\n") == [{"comm": "python", "cpu_s": 17.76, "elapsed_s": 40.59,
                                                        "pid": 19226}]
