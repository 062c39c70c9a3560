"""The course's Trainer: HF Trainer plus token counting and honest FSDP on CPU hosts, and the
callback that checkpoints when Slurm warns of the time limit."""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
from transformers import Trainer, TrainerCallback

from workshop.training import fsdp_cpu, hf_fsdp, loss as course_loss
from workshop.training.data import HOST_TOKENS
from workshop.training.metrics import StepCounter


class CourseTrainer(Trainer):
    """Counts the samples and non-pad tokens each rank trains on, and makes `fsdp=` mean FSDP on CPU."""

    def __init__(self, *args: Any, counter: StepCounter, loss: str = "full", **kwargs: Any) -> None:
        self.counter = counter
        self.loss_setting = loss
        # optimizer step -> the most positions one micro-batch projected onto the vocabulary (summary.json)
        self.logits_positions: dict[int, int] = {}
        # optimizer step -> the most positions with an answer token next in one micro-batch (any loss setting)
        self.answer_positions: dict[int, int] = {}
        # optimizer step -> bytes of the largest logits tensor lm_head built in it (LogitsMeter)
        self.logits_bytes: dict[int, int] = {}
        super().__init__(*args, **kwargs)

    def create_accelerator_and_postprocess(self) -> None:
        wants_fsdp = self.args.fsdp_plugin_args is not None
        if not (wants_fsdp and (fsdp_cpu.cpu_host() or self.args.use_cpu)):
            super().create_accelerator_and_postprocess()
            fsdp_cpu.fp16_on_cpu(self.accelerator)
            if wants_fsdp:
                fsdp_cpu.assert_fsdp_active(self.accelerator)
                hf_fsdp.reduce_in_fp32(self.accelerator)   # fp16 sites: gradients reduced in fp32
            return
        mesh_config, self.args.parallelism_config = self.args.parallelism_config, None
        try:
            with fsdp_cpu.no_mesh_from_launcher():
                super().create_accelerator_and_postprocess()
        finally:
            self.args.parallelism_config = mesh_config
        fsdp_cpu.force_fsdp_on_cpu(self.accelerator, self.args.fsdp_plugin_args, mesh_config)
        fsdp_cpu.fp16_on_cpu(self.accelerator)
        self.is_fsdp_enabled = True
        fsdp_cpu.assert_fsdp_active(self.accelerator)
        hf_fsdp.reduce_in_fp32(self.accelerator)

    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> torch.Tensor:
        self.counter.add(inputs)   # counts on the host, and takes the collator's token count out of the batch
        return super().training_step(model, inputs, *args, **kwargs)

    def compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        """`loss` = full: the Trainer's own. answer_only / chunked (training steps; evaluation keeps the
        model's full loss and logits): workshop.training.loss, inside the wrapped model's forward, with the
        Trainer's normalisation (num_items_in_batch, and its rescaling when tokens are averaged across ranks)."""
        labels = inputs.get("labels")
        training = labels is not None and model.training and not return_outputs
        lm_head = self.accelerator.unwrap_model(model).get_output_embeddings()
        meter = course_loss.LogitsMeter()
        if training:
            step = self.state.global_step + 1
            positions = course_loss.logits_positions(labels, self.loss_setting)
            self.logits_positions[step] = max(self.logits_positions.get(step, 0), positions)
            answers = course_loss.logits_positions(labels, "answer_only")
            self.answer_positions[step] = max(self.answer_positions.get(step, 0), answers)
        if self.loss_setting == "full" or not training:
            with meter.watching(lm_head) if training else contextlib.nullcontext():
                result = super().compute_loss(model, inputs, return_outputs=return_outputs,
                                              num_items_in_batch=num_items_in_batch)
            if training:
                self.logits_bytes[step] = max(self.logits_bytes.get(step, 0), meter.largest)
            return result
        value = course_loss.model_loss(model, lm_head, inputs, self.loss_setting,
                                       num_items_in_batch if self.model_accepts_loss_kwargs else None, meter)
        self.logits_bytes[step] = max(self.logits_bytes.get(step, 0), meter.largest)
        # as Trainer.compute_loss: a sum over this rank's tokens divided by the count over all ranks,
        # multiplied back by the ranks (the gradient all-reduce/reduce-scatter averages over them)
        if self.args.average_tokens_across_devices and self.model_accepts_loss_kwargs and num_items_in_batch is not None:
            tp = self.get_tp_size() if hasattr(self, "get_tp_size") else 1
            value = value * (self.accelerator.num_processes // tp)
        return value

    def prediction_step(self, model: torch.nn.Module, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        inputs.pop(HOST_TOKENS, None)   # evaluation batches come from the same collator; the model never sees it
        return super().prediction_step(model, inputs, *args, **kwargs)


# How often the ranks agree on a stop request, in optimizer steps. The agreement is a collective and a
# `.item()`: on a GPU that waits for the device to finish the step, so it runs every STOP_CHECK_EVERY_GPU
# steps (the course's steps take well under a second: Slurm's USR1 lead of ~90 s is reached within
# seconds). On a CPU nothing runs ahead of the host, so the ranks agree at every step.
STOP_CHECK_EVERY_GPU = 10


def stop_check_every(device: torch.device) -> int:
    return 1 if device.type == "cpu" else STOP_CHECK_EVERY_GPU


class CheckpointOnSignal(TrainerCallback):
    """Save a checkpoint and stop at the end of the step during which a stop was requested.

    Slurm sends USR1 `signal_lead_s` seconds before the time limit (`--signal=B:USR1@LEAD`) to the batch
    shell, which touches $WORKSHOP_STOP_FILE; a USR1 sent to a training process itself counts too
    (`requested` asks both). A request can reach the ranks in different steps, so the ranks agree on
    it (one tiny all_reduce) at every `every`-th step end: all of them save the same step, or the
    sharded save would wait forever for a rank still training.
    """

    def __init__(self, is_main: bool, requested: Callable[[], bool], every: int = 1) -> None:
        self.is_main = is_main
        self.requested = requested
        self.every = max(1, every)
        self.stopped_at: int | None = None

    def _anyone_requested(self) -> bool:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return self.requested()
        flag = torch.tensor([int(self.requested())], dtype=torch.int32)
        if dist.get_backend() == "nccl":
            flag = flag.cuda()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
        if self.stopped_at is None and state.global_step % self.every == 0 and self._anyone_requested():
            self.stopped_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
            if self.is_main:
                print(f"[workshop] SIGUSR1 (time limit near): saving checkpoint-{state.global_step} and stopping",
                      flush=True)
        return control

    def on_save(self, args, state, control, **kwargs):  # noqa: ANN001
        if self.is_main:
            print(f"[workshop] saved checkpoint-{state.global_step} in {args.output_dir}", flush=True)
        return control

    def on_epoch_end(self, args, state, control, **kwargs):  # noqa: ANN001
        # a stop in mid-epoch must not record an "end of epoch" evaluation that never was
        if self.stopped_at is not None and abs(state.epoch - round(state.epoch)) > 1e-6:
            control.should_evaluate = False
            control.should_save = False
        return control
