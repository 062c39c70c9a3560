"""The memory explorer: the plain function and the ipywidgets controls follow the memory model."""

from __future__ import annotations

import pytest

from workshop.student import explorer
from workshop.results.memory import GiB, estimate


def test_explore_is_the_memory_model_and_says_what_fits() -> None:
    r = explorer.explore("bloom-560m", 8, 512, "bf16", "full_shard", gpus=4)
    assert r.breakdown == estimate("bloom-560m", "full_shard", 4, "bf16", 8, 512)
    assert set(r.fits) == {"V100-32GB", "A100-80GB", "H100-80GB"}
    # its peak, worked out in tests/test_memory_by_hand.py: 3P + 2·V·h + activations + the loss's gradient
    # = 23,037,399,040 bytes (21.5 GiB): every card holds it (80 or 32 GiB less the CUDA context)
    assert r.breakdown.gpu_peak == 23_037_399_040
    assert r.fits == {"V100-32GB": True, "A100-80GB": True, "H100-80GB": True}
    assert r.figure is not None
    big = explorer.explore("bloom-7b1", 8, 2048, "bf16", "none", gpus=1, draw=False)
    assert not any(big.fits.values()) and big.figure is None


def test_moving_the_controls_moves_the_figures() -> None:
    base = dict(model="bloom-560m", batch_size=4, max_length=512, precision="bf16", sharding="full_shard",
                gpus=2, draw=False)
    ref = explorer.explore(**base).breakdown
    more_gpus = explorer.explore(**{**base, "gpus": 8}).breakdown
    assert more_gpus.optimizer == ref.optimizer // 4 and more_gpus.grads < ref.grads
    bigger_batch = explorer.explore(**{**base, "batch_size": 8}).breakdown
    assert bigger_batch.activations > 1.9 * ref.activations and bigger_batch.optimizer == ref.optimizer
    ac = explorer.explore(**{**base, "activation_checkpointing": True}).breakdown
    assert ac.activations < 0.7 * ref.activations  # the blocks' share; the logits stay
    off = explorer.explore(**{**base, "offload": True}).breakdown
    assert off.optimizer == 0 and off.host_optimizer == ref.optimizer and off.peak < ref.peak
    ddp = explorer.explore(**{**base, "sharding": "ddp"}).breakdown
    assert ddp.optimizer == 2 * ref.optimizer
    fp32 = explorer.explore(**{**base, "precision": "fp32"}).breakdown
    assert fp32.params > ref.params  # gathered units in fp32 instead of bf16
    assert explorer.explore(**{**base, "sharding": "none"}).breakdown.shard_size == 1  # several GPUs: ddp


def test_widgets_drive_the_same_function() -> None:
    pytest.importorskip("ipywidgets")
    ui = explorer.memory_explorer()
    controls = {w.description: w for w in ui.children if hasattr(w, "value") and w.description}
    assert {"model", "batch_size", "max_length", "precision", "sharding", "offload",
            "activation_checkpointing", "gpus"} <= set(controls)
    controls["gpus"].value = 8
    controls["batch_size"].value = 2
    controls["sharding"].value = "shard_grad_op"
    got = ui.result.breakdown
    assert got == estimate("bloom-560m", "shard_grad_op", 8, "bf16", 2, 512)
    controls["model"].value = "tiny"
    assert ui.result.breakdown.n_params == 322_368


def test_the_widget_only_where_jupyterlab_runs_the_kernel(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ipywidgets")
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)   # papermill, nbgrader: no front end
    assert explorer.show_explorer() is None and "call explore(" in capsys.readouterr().out
    monkeypatch.setenv("JPY_SESSION_NAME", "01_baseline.ipynb")   # what jupyter_server gives its kernels
    assert explorer.show_explorer().result.breakdown == estimate("bloom-560m", "full_shard", 4, "bf16", 8, 512)


def test_fits_uses_the_cards_capacity_and_what_a_gpu_holds() -> None:
    """A card's GiB less the CUDA context; DDP's gradient buckets count against it (not in `peak`)."""
    assert explorer.GPUS == {"V100-32GB": 31.5 * GiB, "A100-80GB": 79.5 * GiB, "H100-80GB": 79.5 * GiB}
    ddp = explorer.explore("bloom-1b1", 8, 512, "bf16", "ddp", gpus=4, draw=False)
    bd = ddp.breakdown
    assert bd.ddp_buckets == 4 * bd.n_params and bd.gpu_peak == bd.peak + bd.ddp_buckets
    # 41,861,939,200 bytes (38.99 GiB, tests/test_memory_by_hand.py): over a V100's 31.5, under 79.5
    assert bd.gpu_peak == 41_861_939_200
    assert ddp.fits == {"V100-32GB": False, "A100-80GB": True, "H100-80GB": True}
    # bloom-1b1, full_shard on 4, 10 x 512 bf16: ~30.1 GiB, which a V100-32GB holds (32e9 bytes would not)
    fsdp = explorer.explore("bloom-1b1", 10, 512, "bf16", "full_shard", gpus=4, draw=False)
    assert 29.8 * GiB < fsdp.breakdown.gpu_peak <= 31.5 * GiB and fsdp.fits["V100-32GB"]


def test_offload_without_fsdp_is_ignored_and_said_so() -> None:
    ddp = explorer.explore("bloom-560m", 4, 512, "bf16", "ddp", offload=True, gpus=2)
    assert ddp.breakdown == estimate("bloom-560m", "ddp", 2, "bf16", 4, 512)
    assert any("offload ignored" in n for n in ddp.notes)
    assert "offload" not in ddp.figure.axes[0].get_title()
    sharded = explorer.explore("bloom-560m", 4, 512, "bf16", "full_shard", offload=True, gpus=2)
    assert sharded.notes == [] and sharded.breakdown.host_optimizer > 0
    assert ", offload" in sharded.figure.axes[0].get_title()
