"""The training loss without the biggest tensor of the run: logits only where a loss is computed, or a
chunk at a time.

Why: BLOOM projects every position onto its 250,880-token vocabulary. For a micro-batch of 8 x 512
tokens the fp32 logits alone are 8 * 512 * 250,880 * 4 B = 4.1 GB, and cross-entropy keeps as much
again for backward. Yet a SQuAD example's labels are -100 everywhere but its answer: almost none of
those logits feed the loss. Three settings (RunConfig.loss):

- full: the model's own forward and Hugging Face's loss (ForCausalLMLoss), untouched.
- answer_only: the hidden states of the positions whose SHIFTED label is not -100 (position t
  predicts token t+1) are gathered before lm_head; lm_head and cross-entropy run on those alone.
- chunked: lm_head and cross-entropy run over CHUNKS chunks of all positions; each chunk runs under
  activation checkpointing, so its logits are freed before the next chunk and recomputed, one chunk
  at a time, in backward.

How it stays correct under FSDP and DDP: the loss is computed INSIDE the wrapped root module's
forward, by the model's own lm_head module (`head_computes_loss` makes lm_head's forward return the
loss for the duration of one call). So FSDP2's root pre-forward has gathered the embedding that
lm_head is tied to, its backward hooks see the loss as the root's output, and the gradient of the
tied weight is reduce-scattered as with the full loss. The model runs without labels; what it returns
as "logits" is the loss (a 0-d tensor).

Normalisation is Hugging Face's: the sum over non-ignored positions divided by `num_items_in_batch`
(the Trainer's count over all micro-batches of an optimizer step, across ranks) when given, else by
this micro-batch's count. A micro-batch (or a whole step) with no answer position gives 0, not NaN:
the divisor is at least 1.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from workshop.training import torch_private
from workshop.training.config import LOSSES  # noqa: F401  (the settings, validated by RunConfig)

IGNORE_INDEX = -100
# chunked: the flattened (batch x sequence) positions are cut into this many chunks (torchtune's
# chunked cross-entropy uses 8 too): one chunk's logits are alive at a time, 1/CHUNKS of the full loss's
CHUNKS = 8


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    """The label each position predicts, as ForCausalLMLoss builds it: labels moved one to the left,
    -100 at the last position (it predicts nothing)."""
    return F.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]


def logits_positions(labels: torch.Tensor, loss: str) -> int:
    """How many positions a micro-batch projects onto the vocabulary under `loss` (lm_head's rows): all
    b x s for full (and, chunked, over all its chunks together), the positions with an answer token next
    for answer_only."""
    if loss == "answer_only" and not torch_private.is_fake(labels):
        return int((shift_labels(labels) != IGNORE_INDEX).sum())
    return labels.numel()   # (a dry run's fake labels have no values: the most there can be)


def _divisor(targets: torch.Tensor, num_items_in_batch: torch.Tensor | int | None) -> torch.Tensor | int:
    """Hugging Face's divisor (num_items_in_batch, else this micro-batch's count), at least 1."""
    if num_items_in_batch is None:
        return (targets != IGNORE_INDEX).sum().clamp(min=1)
    if torch.is_tensor(num_items_in_batch):
        return num_items_in_batch.to(targets.device).clamp(min=1)
    return max(1, int(num_items_in_batch))


def _ce_sum(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    # the upcast ForCausalLMLoss does: cross-entropy in fp32 whatever the compute dtype
    return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX, reduction="sum")


def answer_only_loss(project: Any, hidden: torch.Tensor, labels: torch.Tensor,
                     num_items_in_batch: torch.Tensor | int | None = None) -> torch.Tensor:
    """Cross-entropy over the positions whose next token is an answer token, projecting only those.
    `project` is lm_head's own forward (hidden -> logits)."""
    targets = shift_labels(labels).to(hidden.device)
    keep = targets != IGNORE_INDEX
    logits = project(hidden[keep])              # (answer positions, V): the only logits of the step
    return _ce_sum(logits, targets[keep]) / _divisor(targets, num_items_in_batch)


def _chunk_sum(project: Any, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return _ce_sum(project(hidden), targets)


def chunked_loss(project: Any, hidden: torch.Tensor, labels: torch.Tensor,
                 num_items_in_batch: torch.Tensor | int | None = None, chunks: int = CHUNKS) -> torch.Tensor:
    """Cross-entropy over every position, `chunks` chunks of positions at a time, each chunk's logits
    recomputed in backward instead of kept (non-reentrant checkpoint: autocast state and the RNG are
    replayed, and the weight's gradient flows through the forward graph as usual)."""
    targets = shift_labels(labels).to(hidden.device)
    flat_h, flat_t = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    total = hidden.new_zeros((), dtype=torch.float32)
    for h, t in zip(flat_h.chunk(chunks), flat_t.chunk(chunks)):
        total = total + checkpoint(_chunk_sum, project, h, t, use_reentrant=False)
    return total / _divisor(targets, num_items_in_batch)


LOSS_FUNCTIONS = {"answer_only": answer_only_loss, "chunked": chunked_loss}


class LogitsMeter:
    """The bytes of the largest logits tensor lm_head built (one call's output): the tensor this module
    shrinks, measured where it is made. Full loss: lm_head's output (b, s, V); answer_only: (answer
    positions, V); chunked: one chunk's (positions / CHUNKS, V)."""

    def __init__(self) -> None:
        self.largest = 0

    def saw(self, logits: torch.Tensor) -> torch.Tensor:
        self.largest = max(self.largest, logits.numel() * logits.element_size())
        return logits

    @contextlib.contextmanager
    def watching(self, lm_head: torch.nn.Module) -> Iterator[None]:
        """Meter lm_head's own output while the model's forward runs with the full loss."""
        handle = lm_head.register_forward_hook(lambda _m, _i, out: self.saw(out) if torch.is_tensor(out) else None)
        try:
            yield
        finally:
            handle.remove()


@contextlib.contextmanager
def head_computes_loss(lm_head: torch.nn.Module, loss: str, labels: torch.Tensor,
                       num_items_in_batch: torch.Tensor | int | None = None,
                       meter: LogitsMeter | None = None) -> Iterator[None]:
    """For one forward of the (wrapped) model: lm_head returns `loss`'s value instead of logits.

    lm_head is called by the model's forward, inside the FSDP/DDP root, on the final hidden states
    (b, s, h); the instance's forward is replaced for the duration and the class's own forward
    (F.linear with the tied weight, read at call time: FSDP2's gathered one) does the projection."""
    if loss not in LOSS_FUNCTIONS:
        raise ValueError(f"loss {loss!r} is computed by the model itself; head_computes_loss serves "
                         f"{', '.join(LOSS_FUNCTIONS)}")
    own = type(lm_head).forward.__get__(lm_head)
    compute = LOSS_FUNCTIONS[loss]

    def project(hidden: torch.Tensor) -> torch.Tensor:
        return meter.saw(own(hidden)) if meter is not None else own(hidden)

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        return compute(project, hidden, labels, num_items_in_batch)

    lm_head.forward = forward   # type: ignore[method-assign]
    try:
        yield
    finally:
        del lm_head.forward


def model_loss(model: torch.nn.Module, lm_head: torch.nn.Module, inputs: dict[str, Any], loss: str,
               num_items_in_batch: torch.Tensor | int | None = None, meter: LogitsMeter | None = None) -> torch.Tensor:
    """The loss of one micro-batch under `loss` (answer_only or chunked): `model` is what the Trainer
    calls (FSDP2 root, DDP wrapper or the bare model), `lm_head` the module inside it."""
    inputs = dict(inputs)
    labels = inputs.pop("labels")
    with head_computes_loss(lm_head, loss, labels, num_items_in_batch, meter):
        out = model(**inputs)
    return out["logits"] if isinstance(out, dict) else out[0]
