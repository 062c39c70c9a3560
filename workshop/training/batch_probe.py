"""The global batch each optimizer step really trained on, counted from the batches, over all ranks.

`summary.json`'s `global_batch` is the config's arithmetic (batch_size x grad_acc x world_size);
`global_batch_measured` is what the job did, so a check of notebook 04 can set the student's pair
beside the samples that went through the model.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from workshop.training.metrics import StepCounter, all_gather


class GlobalBatchProbe(TrainerCallback):
    """Samples this rank trained on in each optimizer step (from the StepCounter the trainer fills)."""

    def __init__(self, counter: StepCounter) -> None:
        self.counter = counter
        self.start = 0
        self.per_step: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
        self.per_step.append(self.counter.seen_samples - self.start)
        self.start = self.counter.seen_samples
        return control

    def gathered(self) -> dict[str, Any]:
        """Summary fields (every rank must call it: it gathers): the largest step's global batch (only
        an epoch's last step can be smaller) and all samples trained, summed over ranks."""
        per_rank = all_gather(self.per_step)
        steps = [sum(samples) for samples in zip(*per_rank)]
        return {"global_batch_measured": max(steps) if steps else None, "samples_trained": sum(steps)}
