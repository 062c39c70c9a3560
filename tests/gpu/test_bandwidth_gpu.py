"""The bandwidth self-test with NCCL on one rank: nccl-tests' table and the gate's summary line.

One rank has no link to measure (busbw = algbw x 2(n-1)/n = 0), so this proves the NCCL path itself:
the communicator forms on the GPU, every all_reduce returns right values, and the table and the
gate's lines come out in the shape cluster staff read."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

from tests.gpu.conftest import ROOT


def test_nccl_self_test_on_one_rank_prints_the_table_and_the_gate(figures: Any) -> None:
    from workshop.bench.harness import child_env
    from workshop.slurm.ports import rendezvous_port

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
           "--master-port", str(rendezvous_port()), "-m", "workshop.comm.bandwidth", "--device", "cuda", "-e", "64M"]
    proc = subprocess.run(cmd, cwd=ROOT, env=child_env("cuda"), capture_output=True, text=True, timeout=180)
    out = proc.stdout
    rows = [ln for ln in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s+float\s+sum\s+-1\s", ln)]
    gate = [ln for ln in out.splitlines() if ln.startswith("# Large-message busbw")]
    figures.put("bandwidth_nccl_one_rank", exit=proc.returncode, table=[ln for ln in out.splitlines() if ln.strip()],
                stderr_tail=proc.stderr[-1500:])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert re.search(r"#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw\s+#wrong", out), out
    assert len(rows) == 24, f"sizes 8 B .. 64 MB by 2: {len(rows)} rows\n{out}"   # 8 * 2**k <= 64M
    assert all(ln.split()[8] == "0" and ln.split()[-1] == "0" for ln in rows), "a size returned wrong values"
    assert "# Out of bounds values : 0 OK" in out
    assert len(gate) == 1 and re.search(r"GB/s at 67108864 B", gate[0]), gate
    assert "backend nccl" in out and out.rstrip().endswith("# PASSED")
