"""The course's Trainer: HF Trainer plus token counting and honest FSDP on CPU hosts."""

from __future__ import annotations

from typing import Any

import torch
from transformers import Trainer

from workshop import fsdp_cpu
from workshop.metrics import StepCounter


class CourseTrainer(Trainer):
    """Counts the samples and non-pad tokens each rank trains on, and makes `fsdp=` mean FSDP on CPU."""

    def __init__(self, *args: Any, counter: StepCounter, **kwargs: Any) -> None:
        self.counter = counter
        super().__init__(*args, **kwargs)

    def create_accelerator_and_postprocess(self) -> None:
        wants_fsdp = self.args.fsdp_plugin_args is not None
        if not (wants_fsdp and (fsdp_cpu.cpu_host() or self.args.use_cpu)):
            super().create_accelerator_and_postprocess()
            if wants_fsdp:
                fsdp_cpu.assert_fsdp_active(self.accelerator)
            return
        mesh_config, self.args.parallelism_config = self.args.parallelism_config, None
        try:
            super().create_accelerator_and_postprocess()
        finally:
            self.args.parallelism_config = mesh_config
        fsdp_cpu.force_fsdp_on_cpu(self.accelerator, self.args.fsdp_plugin_args, mesh_config)
        self.is_fsdp_enabled = True
        fsdp_cpu.assert_fsdp_active(self.accelerator)

    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> torch.Tensor:
        self.counter.add(inputs)
        return super().training_step(model, inputs, *args, **kwargs)
