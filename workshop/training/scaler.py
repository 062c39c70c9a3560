"""fp16's gradient scaler, read back from the run: which one ran and where its scale ended.

Why: fp16 (a V100's mixed precision) trains only with loss scaling. Without FSDP accelerate scales with
`torch.amp.GradScaler`; under FSDP2 it may pick another class, or none. A run that says "fp16" but
stepped without a scaler underflows its gradients silently, so the summary names the scaler that ran
(`grad_scaler` in summary.json, null in bf16 and fp32) and its scale: each step whose gradients held
an inf or NaN was skipped and halved the scale, so `log2(init_scale / scale)` counts the skipped steps
of a run shorter than the scaler's growth interval.
"""

from __future__ import annotations

from typing import Any


def describe(scaler: Any) -> dict[str, Any] | None:
    """{"type", "enabled", "init_scale", "scale", "growth_interval"} of a GradScaler-like object, or None."""
    if scaler is None:
        return None
    enabled = bool(scaler.is_enabled()) if hasattr(scaler, "is_enabled") else True
    if not enabled:   # a disabled GradScaler keeps no scale (its getters raise or return 1.0)
        return {"type": type(scaler).__name__, "enabled": False, "init_scale": None, "scale": None,
                "growth_interval": None}
    init = getattr(scaler, "_init_scale", None)
    interval = getattr(scaler, "get_growth_interval", None)
    return {"type": type(scaler).__name__, "enabled": True,
            "init_scale": float(init) if init is not None else None,
            "scale": float(scaler.get_scale()) if hasattr(scaler, "get_scale") else None,
            "growth_interval": int(interval()) if callable(interval) else None}
