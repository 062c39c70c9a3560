"""fp16 sites reduce gradients in fp32 in the course's own fully_shard path (issue #35, item 2): a
student's function whose units would reduce-scatter in fp16 stops the job with the fix; the same
function with reduce_dtype=torch.float32 runs. One process (gloo, world size 1), forked from the warm
parent (tests/runs.py), so that no process group outlives the test. The Trainer's path is tests/test_gpu_paths.py's fp16 run."""

from __future__ import annotations

import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent('''
    import os, sys, torch, torch.distributed as dist
    from workshop.training.config import ConfigError, load_config
    from workshop.training.wrap_function import apply
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
    dist.init_process_group("gloo", rank=0, world_size=1)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = torch.nn.Module()
            self.transformer.h = torch.nn.ModuleList([torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)])

    for name in ("fp16_reduce", "fp32_reduce"):
        cfg = load_config(overrides={"precision": "fp16", "sharding": "full_shard", "wrap_function": f"{sys.argv[1]}:{name}"})
        try:
            apply(cfg, Net())
            print(name, "ran")
        except ConfigError as e:
            print(name, "refused:", e)
    dist.destroy_process_group()
''')

STUDENT = textwrap.dedent('''
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    def fp16_reduce(model):
        policy = MixedPrecisionPolicy(param_dtype=COMPUTE_DTYPE)   # reduces in param_dtype: fp16 here
        for block in model.transformer.h:
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)

    def fp32_reduce(model):
        policy = MixedPrecisionPolicy(param_dtype=COMPUTE_DTYPE, reduce_dtype=torch.float32)
        for block in model.transformer.h:
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
''')


def test_a_students_units_reducing_in_fp16_stop_an_fp16_job(tmp_path: Path) -> None:
    from tests.runs import fork
    from workshop.slurm.ports import rendezvous_port

    student = tmp_path / "student.py"
    student.write_text(STUDENT)
    (tmp_path / "job.py").write_text(SCRIPT)
    root = Path(__file__).resolve().parents[1]
    (log,), _ = fork([str(student), str(rendezvous_port())], script=str(tmp_path / "job.py"), cwd=root).finish(240)
    lines = [ln for ln in log.splitlines() if ln.startswith(("fp16_reduce", "fp32_reduce"))]
    assert len(lines) == 2, log[-5000:]
    # the two blocks; the root holds no parameter of its own (Net has none outside the blocks), so no group
    assert lines[0].startswith("fp16_reduce refused:") and "2 unit(s) reducing gradients in fp16" in lines[0]
    assert "reduce_dtype=torch.float32" in lines[0]
    assert lines[1] == "fp32_reduce ran"


def test_notebook_02_says_what_fsdp2_does_to_an_fp16_sum() -> None:
    # issue 49: the text said an fp16 sum over N ranks "overflows sooner"; FSDP2 divides by about sqrt(N)
    # before the sum and the rest after it, so what fp32 reduction buys is precision. This torch does so:
    import json

    import torch
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import _get_gradient_divide_factors

    pre, post, *_ = _get_gradient_divide_factors(None, None, torch.float16, factor=16.0)
    assert (pre, post) == (4, 4.0)                       # 16 ranks: 4 before the sum, 4 after
    pre, post, *_ = _get_gradient_divide_factors(None, None, torch.float32, factor=16.0)
    assert pre is None                                   # fp32: no pre-division, no range to guard
    nb = json.loads((Path(__file__).resolve().parents[1] / "solutions" / "02_fsdp_single_gpu"
                     / "02_fsdp_single_gpu.ipynb").read_text())
    text = " ".join("".join(next(c for c in nb["cells"] if c["id"] == "nb02-concept-mixed-precision")["source"]).split())
    assert "overflow sooner" not in text and "_get_gradient_divide_factors" in text and "precision" in text
