"""Make the HF Trainer really run FSDP2 on a CPU host (gloo), or fail loudly.

Upstream behaviour worked around (transformers 5.23.0 + accelerate 1.15.0):
  1. `AcceleratorState` switches to `DistributedType.FSDP` only for accelerator backends (CUDA, XPU,
     NPU, ...). On a CPU host it stays MULTI_CPU, so `Trainer(fsdp=...)` silently wraps the model
     in DDP and the run looks fine while nothing is sharded.
  2. A `ParallelismConfig` (HSDP's 2-D mesh) is validated inside `Accelerator.__init__`, which rejects
     it on MULTI_CPU; so it is attached after the switch to FSDP, with the same mesh and validation.
  3. FSDP2's `CPUOffloadPolicy` pins host memory by default, which needs CUDA; on a CPU-only host
     the offload policy must use `pin_memory=False`.
This is the only module that reaches into accelerate's state. On CUDA nothing here is needed, and
`assert_fsdp_active` still refuses to let a run that asked for FSDP continue under another wrapper.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

import torch


def force_fsdp_on_cpu(accelerator: Any, fsdp_plugin_args: dict[str, Any], parallelism_config: Any = None) -> None:
    """Put an Accelerator built on a CPU host into FSDP mode with the plugin (and mesh) the Trainer asked for."""
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    from torch.distributed.fsdp import CPUOffloadPolicy

    state = accelerator.state
    if state.distributed_type == DistributedType.FSDP:
        return
    if state.device.type != "cpu":
        raise RuntimeError(f"accelerate did not enable FSDP on device {state.device}; refusing to fall back "
                           f"to {state.distributed_type}")
    if state.distributed_type not in (DistributedType.MULTI_CPU, DistributedType.NO):
        raise RuntimeError(f"unexpected accelerate state {state.distributed_type} on a CPU host")
    plugin = FullyShardedDataParallelPlugin(**fsdp_plugin_args)
    if plugin.fsdp_version != 2:
        raise RuntimeError("the course runs FSDP2 only; FSDP1 strategies are silently ignored upstream")
    if isinstance(plugin.cpu_offload, CPUOffloadPolicy):  # (no offload is a plain, truthy OffloadPolicy)
        plugin.cpu_offload = CPUOffloadPolicy(pin_memory=False)
    if state.mixed_precision != "no":
        plugin.set_mixed_precision(state.mixed_precision)
    state.fsdp_plugin = plugin
    state.distributed_type = DistributedType.FSDP
    # AcceleratorState and PartialState keep separate shared dicts; both must agree.
    AcceleratorState._shared_state["distributed_type"] = DistributedType.FSDP
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    if parallelism_config is not None:
        state.parallelism_config = parallelism_config
        state.device_mesh = parallelism_config.get_device_mesh("cpu")
        parallelism_config._validate_accelerator(accelerator)


@contextlib.contextmanager
def no_mesh_from_launcher() -> Iterator[None]:
    """Hide `accelerate launch`'s ACCELERATE_USE_PARALLELISM_CONFIG while the Accelerator is built on a CPU
    host: it would build the HSDP mesh from the environment and reject it on MULTI_CPU (point 2 above);
    `force_fsdp_on_cpu` attaches the same mesh, read from the same YAML, afterwards."""
    hidden = os.environ.pop("ACCELERATE_USE_PARALLELISM_CONFIG", None)
    try:
        yield
    finally:
        if hidden is not None:
            os.environ["ACCELERATE_USE_PARALLELISM_CONFIG"] = hidden


def assert_fsdp_active(accelerator: Any) -> None:
    from accelerate.utils import DistributedType

    if accelerator.state.distributed_type != DistributedType.FSDP or not accelerator.is_fsdp2:
        raise RuntimeError(f"FSDP2 was requested but accelerate is in {accelerator.state.distributed_type} mode")


def cpu_host() -> bool:
    return not torch.cuda.is_available()
