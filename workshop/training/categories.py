"""The memory categories' names, in one place: the tensor-memory tracker (`tensor_memory`) sorts what it
measures into them, and the memory model, the tables and the plots read them, so a prediction and a
measurement always meet under the same name. No torch import: a grader's or a plot's process can read them."""

from __future__ import annotations

CATEGORIES = ("params", "grads", "optimizer", "activations", "other")
# where offload keeps the sharded parameters, gradients and optimizer state (host memory, not the GPU's)
HOST = ("host_params", "host_grads", "host_optimizer")
