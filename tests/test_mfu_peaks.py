"""MFU's denominator is the data-sheet peak of the exact GPU model: an H100 PCIe or NVL is not an
SXM, an A10G is not an A10, and a GPU no data sheet covers gets no MFU rather than a wrong one."""

from __future__ import annotations

import pytest

from workshop.training.metrics import peak_for_name


@pytest.mark.parametrize("name,precision,peak", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.5),          # SXM5, as torch.cuda.get_device_name() reports it
    ("NVIDIA H100 PCIe", "bf16", 756.5),
    ("NVIDIA H100 NVL", "bf16", 835.5),
    ("NVIDIA H200", "bf16", 989.5),
    ("NVIDIA H200 NVL", "fp16", 835.5),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
    ("NVIDIA A100 80GB PCIe", "bf16", 312.0),
    ("Tesla V100-SXM2-32GB", "fp16", 125.0),
    ("Tesla V100-PCIE-32GB", "fp16", 112.0),
    ("Tesla V100S-PCIE-32GB", "fp16", 130.0),
    ("NVIDIA A10", "bf16", 125.0),
    ("NVIDIA A10G", "bf16", None),                     # no data sheet: no MFU, not the A10's 125
    ("NVIDIA L40S", "bf16", 362.0),
    ("NVIDIA L4", "bf16", 121.0),
    ("Tesla V100-SXM2-32GB", "bf16", None),            # no bf16 on Volta
    ("NVIDIA GeForce RTX 4090", "bf16", None),
])
def test_peak_by_exact_model(name: str, precision: str, peak: float | None) -> None:
    assert peak_for_name(name, precision) == peak
