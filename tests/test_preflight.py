"""`workshop preflight`'s verdicts (issue 23, item 1), on what Slurm and a node report. The end-to-end run on
the test cluster is tests/slurm/test_preflight_on_cluster.py; these check the rules it applies to real
sites' answers, which this machine (no GPU) cannot produce: each rule gets the report a node of that kind
gives, in the shape `workshop.slurm.node_check` prints it.
"""

from __future__ import annotations

import dataclasses

import pytest

from workshop.site.checklist import FIX, NO_GPU, OK, Line, exit_code, table
from workshop.site.preflight import arch_covers, node_lines, partition_lines, sinfo_partitions
from workshop.slurm.profiles import load_profile

SITE = load_profile("example-hpc")

# torch.cuda.get_arch_list() of PyTorch's CUDA 12.6 and 12.8 wheels as their build settings give them
# (TORCH_CUDA_ARCH_LIST of each index); not read from a GPU here: this machine has none
CU126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
CU128 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


@pytest.mark.parametrize("archs, capability, covered", [
    (CU126, (7, 0), True),          # V100 on the cu126 wheel bloom_env.yml installs
    (CU128, (7, 0), False),         # ... and on cu128, which dropped Volta
    (CU126, (8, 0), True), (CU126, (8, 9), True),      # L40S (8.9): the sm_86 cubin runs on 8.x with x >= 6
    (CU126, (9, 0), True), (CU126, (10, 0), False),    # B200 needs sm_100 or PTX
    (CU128 + ["compute_90"], (10, 3), True),           # PTX is compiled for any later GPU
    (["sm_80"], (7, 5), False),                        # a cubin never runs on an older GPU
])
def test_a_wheel_covers_a_gpu_by_cuda_binary_compatibility(archs, capability, covered) -> None:
    assert arch_covers(archs, capability) is covered


def gpu_report(name: str, capability: list[int], archs: list[str], bf16: bool, **extra) -> dict:
    return {"host": "gpu042", "nvidia_gpus": [name], "torch": "2.13.0+cu126", "torch_cuda": "12.6",
            "cuda_available": True, "device_count": 1, "name": name, "capability": capability, "memory_gb": 34.1,
            "arch_list": archs, "bf16": bf16, "driver": "550.54.15",
            "nccl": {"ok": True, "version": "2.21.5", "seconds": 1.2, "env": {"NCCL_SOCKET_IFNAME": "ib0"}},
            "offline": {"model": "bloom-560m", "dataset": "squad",
                        "model_ok": {"source": "hub", "params": 559214592, "tokenizer_tokens": 250680},
                        "dataset_ok": {"train": 2000, "dev": 200, "from": "/shared/fsdp-workshop/hf_home/workshop/squad-v1.1"}},
            "disk": {"jobs": {"path": "/home/admin/preflight-jobs", "exists": True, "free_gb": 812.0}},
            **extra}


def by_check(lines: list[Line]) -> dict[str, Line]:
    return {x.check.split(": ", 1)[1]: x for x in lines}


def test_a_v100_on_the_cu126_wheel_is_ok_and_its_fp16_steps_need_no_bf16() -> None:
    lines = by_check(node_lines("gpu_v100", gpu_report("Tesla V100-SXM2-32GB", [7, 0], CU126, False), SITE,
                                SITE.partitions["v100"], 10))
    assert all(x.status == OK for x in lines.values()), table(list(lines.values()))
    assert "sm_70 (Tesla V100-SXM2-32GB) is covered" in lines["GPU architecture"].text
    assert "the profile uses none here" in lines["bf16"].text
    assert "NCCL 2.21.5" in lines["NCCL"].text and "NCCL_SOCKET_IFNAME=ib0" in lines["NCCL"].text


def test_the_wheel_without_sm_70_and_bf16_steps_on_a_v100_each_name_their_fix() -> None:
    """The example site runs its a100 steps in bf16: put them on V100s and preflight says so before sbatch would."""
    v100_for_all = dataclasses.replace(SITE, step_slurm={})                  # every step on the default (V100)
    lines = node_lines("gpu_v100", gpu_report("Tesla V100-SXM2-32GB", [7, 0], CU128, False), v100_for_all,
                       SITE.partitions["v100"], 10)
    found = by_check(lines)
    assert found["GPU architecture"].status == FIX and "no kernels for sm_70" in found["GPU architecture"].text
    assert "cu126" in found["GPU architecture"].text
    assert found["bf16"].status == FIX and "multi_gpu, multi_node" in found["bf16"].text
    assert 'precision = "fp16"' in found["bf16"].text
    assert exit_code(lines) == 1


def test_a_node_with_gpus_that_torch_cannot_use_needs_a_fix_and_a_gpu_less_node_says_so() -> None:
    cpu_wheel = {"host": "gpu042", "nvidia_gpus": ["NVIDIA A100-SXM4-80GB"], "torch": "2.13.0+cpu", "torch_cuda": None,
                 "cuda_available": False, "visible_devices": "0", "offline": {}, "disk": {}}
    found = by_check(node_lines("gpu_a100", cpu_wheel, SITE, SITE.partitions["a100"], 10))
    assert found["torch, CUDA"].status == FIX and "CPU build" in found["torch, CUDA"].text
    assert "cu126" in found["torch, CUDA"].text
    fake = {**cpu_wheel, "nvidia_gpus": []}            # the test cluster: a GPU slot, no device
    found = by_check(node_lines("debug", fake, SITE, SITE.partitions["a100"], 10))
    for check in ("torch, CUDA", "GPU architecture", "bf16", "NCCL"):
        assert found[check].status == NO_GPU and "no GPU on this partition" in found[check].text
    assert not any(x.needs_fix for c, x in found.items() if c in ("torch, CUDA", "GPU architecture", "bf16", "NCCL"))


def test_a_failed_offline_load_and_a_full_disk_name_their_fix() -> None:
    report = gpu_report("NVIDIA A100-SXM4-80GB", [8, 0], CU126, True)
    report["offline"] = {"model": "bloom-560m", "dataset": "squad",
                         "model_error": "OSError: We couldn't connect to 'https://huggingface.co'",
                         "dataset_error": "ConfigError: config field 'dataset': SQuAD v1.1 is not in the shared cache"}
    report["disk"]["scratch"] = {"path": "/scratch", "exists": True, "free_gb": 3.5}
    found = by_check(node_lines("gpu_a100", report, SITE, SITE.partitions["a100"], 10))
    assert found["offline load: model"].status == FIX and "workshop prefetch" in found["offline load: model"].text
    assert found["offline load: dataset"].status == FIX
    assert found["disk scratch"].status == FIX and "/scratch: 3.5 GB free" in found["disk scratch"].text
    assert found["bf16"].status == OK and "multi_gpu" in found["bf16"].text


def test_sinfo_is_read_per_partition_and_compared_with_the_profile() -> None:
    # the test cluster's own answer, and a site whose a100 nodes differ from the profile
    assert sinfo_partitions("debug|up|30:00|4|8192|gpu:2|2\n") == {
        "debug": {"up": True, "time": "30:00", "cpus": 4, "mem_mb": 8192, "gpus": 2, "gpu_types": set(), "nodes": 2}}
    found = sinfo_partitions("gpu_v100|up|1-00:00:00|32|191000|gpu:v100:4(S:0-1)|4\n"
                             "gpu_a100|up|1-00:00:00|64|515000|gpu:a100:4|2\n"
                             "gpu_a100|up|1-00:00:00|64|1031000+|gpu:a100:8|6\n"
                             "interactive|up|12:00:00|64|257000|(null)|2\n")
    assert found["gpu_a100"]["gpus"] == 8 and found["gpu_a100"]["mem_mb"] == 515000 and found["gpu_a100"]["nodes"] == 8
    lines = {x.check: x for x in partition_lines(SITE, found)}
    assert lines["partition gpu_v100"].status == OK and lines["partition interactive"].status == OK
    a100 = lines["partition gpu_a100"]           # the profile's 1000G is more than the smaller nodes' 515000 MB
    assert a100.status == FIX and "mem_per_node 1000G" in a100.text
    missing = {x.check: x for x in partition_lines(SITE, {"gpu_v100": found["gpu_v100"]})}
    assert missing["partition gpu_a100"].status == FIX and "sinfo knows no partition 'gpu_a100'" in missing["partition gpu_a100"].text
