"""Which GPUs compute in bfloat16: the rule a submission checks (by the partition's GPU name) and a job
checks again (by the device's compute capability).

bf16 arithmetic arrived with compute capability 8.0 (Ampere: A100, A10, A30, A40, L4, L40S, H100,
H200, ...). Older GPUs (Volta V100 7.0, Turing T4 and the RTX 20 series 7.5, Pascal P100/P40 6.x,
Kepler K80) have none: PyTorch either emulates it, at a fraction of fp16's speed, or stops in a
kernel. Their mixed precision is fp16, with a gradient scaler.
"""

from __future__ import annotations

import re

BF16_CAPABILITY = (8, 0)
# Names (as a profile's gpu_type / gpu_name or torch.cuda.get_device_name() spell them) of the GPUs
# before compute capability 8.0 that sites still run.
NO_BF16 = re.compile(r"V100|\bT4\b|P100|P40|\bK80\b|\bK40|TITAN V|TITAN RTX|RTX 20[0-9]0|Quadro RTX|RTX [4-8]000\b(?! Ada)",
                     re.I)


def bf16_capable(capability: tuple[int, int]) -> bool:
    """Does a GPU of this compute capability compute in bf16?"""
    return tuple(capability) >= BF16_CAPABILITY


def lacks_bf16(name: str) -> bool:
    """Is this a GPU known to have no bf16 (a V100, a T4, ...)? Unknown names are not refused."""
    return bool(name) and NO_BF16.search(name) is not None


# What a GPU process holds beside its tensors, which neither PyTorch's tracker nor a dry run on fake tensors
# sees. Stated constants, not measurements on the course's GPUs (none has run it yet): the first GPU run's
# summary (peak_reserved_mb against peak_mem_mb, and nvidia-smi's figure against peak_reserved_mb) replaces them.
# - The CUDA context: the driver's and the CUDA runtime's own memory in each process, ~300-500 MiB
#   depending on the GPU, driver and CUDA version (PyTorch docs, "CUDA semantics: Memory management": "the
#   CUDA context ... can take up to a few hundred MB"; CUDA >= 11.7 lazy module loading lowers it). 0.5 GiB.
CUDA_CONTEXT_BYTES = 512 * 2**20
# - The caching allocator's reserve: memory it holds beyond the live tensors (freed blocks it keeps, sizes
#   rounded up to 512 B blocks inside 2 MiB and 20 MiB segments, fragmentation; PyTorch docs, "CUDA semantics:
#   Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF"). Taken as 10 % of the tensor peak.
ALLOCATOR_RESERVE = 0.10
