"""The bandwidth self-test prints nccl-tests' table, computes busbw as nccl-tests does, lists every
rank's host, and stops a job when a node is missing or the bandwidth is too low.

One real torchrun launch holds the launch contract (the table test: `torchrun ... -m workshop.comm.bandwidth`,
as the batch scripts run it); the gate's verdicts are about the numbers and the hosts, not the launcher, so
their ranks fork from the warm parent (tests/runs.py `fork`: real processes, a real gloo group, torchrun's
rank environment) and skip ~2 CPU-s of imports per rank and ~2.5 per launcher (issue 51)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import runs
from workshop.comm.bandwidth import bus_factor, parse_size, sizes

TORCHRUN = str(Path(sys.executable).parent / "torchrun")

# The header of nccl-tests' all_reduce_perf (2.13+), character for character.
NCCL_TESTS_HEADER = [
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
]


def run_bandwidth(nproc: int, *args: str, slurm: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(slurm or {})
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run([TORCHRUN, "--standalone", f"--nproc-per-node={nproc}", "-m", "workshop.comm.bandwidth",
                           "-e", "64K", "-n", "3", "-w", "1", *args],
                          capture_output=True, text=True, timeout=180, env=env)


def fork_bandwidth(nproc: int, *args: str, slurm: dict[str, str] | None = None) -> tuple[str, int]:
    """The self-test's ranks forked from the warm parent, with the same flags as `run_bandwidth`: (rank 0's
    and the others' output, the launch's exit code as torchrun would give it)."""
    logs, code = runs.fork(["-e", "64K", "-n", "3", "-w", "1", *args], nproc=nproc, module="workshop.comm.bandwidth",
                           env=slurm).finish(timeout=180)
    return logs[0], code


def test_bus_bandwidth_factor_is_nccl_tests_all_reduce_factor():
    assert [bus_factor(n) for n in (1, 2, 4, 8)] == [0.0, 1.0, 1.5, 1.75]
    assert sizes(8, parse_size("1M"), 4)[:3] == [8, 32, 128] and sizes(8, parse_size("1M"), 4)[-1] == 524288


def test_three_gloo_ranks_print_nccl_tests_table_with_right_numbers():
    proc = run_bandwidth(3, "--expect-nodes", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    host = socket.gethostname()
    ranks = [line for line in lines if line.startswith("#  Rank ")]
    assert [r.split()[2] for r in ranks] == ["0", "1", "2"]
    assert all(f" on {host:>10s} device " in r and "[cpu]" in r for r in ranks)
    start = lines.index(NCCL_TESTS_HEADER[0])
    assert lines[start:start + 3] == NCCL_TESTS_HEADER
    rows = [line.split() for line in lines[start + 3:] if line and not line.startswith("#")]
    assert [int(r[0]) for r in rows] == sizes(8, 64 * 1024, 4)
    for size, count, typ, redop, root, *places in rows:
        assert (int(count), typ, redop, root) == (int(size) // 4, "float", "sum", "-1")
        for time_us, algbw, busbw, wrong in (places[:4], places[4:]):
            expected_algbw = int(size) / (float(time_us) * 1e-6) / 1e9
            assert float(algbw) == pytest.approx(expected_algbw, abs=0.011, rel=0.01)
            assert float(busbw) == pytest.approx(float(algbw) * 4 / 3, abs=0.011)   # 2(n-1)/n, n = 3
            assert wrong == "0"
    assert "# Out of bounds values : 0 OK" in lines
    assert any(line.startswith("# Avg bus bandwidth    : ") for line in lines)
    # the gate's figure: the best bus bandwidth of the largest message, in GB/s
    gate = next(line for line in lines if line.startswith("# Large-message busbw  : "))
    largest = rows[-1]
    assert gate.endswith(f" GB/s at {largest[0]} B (the gate's figure)")
    assert float(gate.split(":")[1].split()[0]) == pytest.approx(max(float(largest[7]), float(largest[11])), abs=0.011)
    assert f"# Hosts                : 1 ({host}), 3 ranks, backend gloo" in lines
    assert lines[-1] == "# PASSED"


def test_gate_fails_when_bandwidth_is_too_low_or_a_node_is_missing():
    out, code = fork_bandwidth(2, "--min-busbw", "1000000", "--expect-nodes", "2")
    assert code != 0, out
    assert "# FAILED: expected 2 node(s), but the ranks ran on 1 host(s)" in out
    largest = sizes(8, 64 * 1024, 4)[-1]                              # the largest message, not the average
    assert f"# FAILED: bus bandwidth at {largest} B is " in out
    assert "GB/s, below the site's minimum 1e+06 GB/s" in out


def test_a_missing_node_fails_the_gate_as_the_batch_script_runs_it():
    # the site's script passes no --expect-nodes: the gate takes the node count Slurm gave the job
    out, code = fork_bandwidth(2, "--min-busbw", "0", slurm={"SLURM_NNODES": "2"})
    assert code != 0, out
    assert "# FAILED: expected 2 node(s), but the ranks ran on 1 host(s)" in out
    alone, code = fork_bandwidth(2, "--min-busbw", "0", slurm={"SLURM_NNODES": "1"})
    assert code == 0 and "FAILED" not in alone and "# PASSED" in alone, alone


def test_without_torchrun_it_says_how_to_launch_it():
    proc = subprocess.run([sys.executable, "-m", "workshop.comm.bandwidth"], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "RANK"})
    assert proc.returncode == 2 and "torchrun" in proc.stderr
    assert shutil.which(TORCHRUN)
