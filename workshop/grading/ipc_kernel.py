"""The course's headless kernels talk to papermill over Unix sockets (ZeroMQ `ipc`), not TCP.

ipykernel warns "Kernel is running over TCP without encryption" whenever its transport is TCP; `make course`
printed it once per notebook and a newcomer read it as a security problem. The kernel and papermill are on
the same machine, so the transport can be Unix sockets: the warning does not arise, no port is picked (no
race with another kernel for a free port) and nothing listens on the network. papermill passes
`kernel_manager_class` through to nbclient (run_all.run_notebook). nbgrader's autograde hard-sets its executor's
kernel manager class to `AsyncKernelManager`, so grading gets the same transport by configuration of that class
(`use_ipc_for_async_kernels`, called by workshop.grading.grade).

The sockets live in the temporary folder, absolute paths: papermill's process and the kernel may run in
different folders (`side_by_side`), and a path relative to either would not meet. jupyter_client removes
them when the kernel shuts down.
"""

from __future__ import annotations

import os
import tempfile
import uuid

from jupyter_client.manager import AsyncKernelManager
from traitlets import default


def socket_prefix() -> str:
    """A fresh absolute prefix for one kernel's sockets ("<prefix>-<n>"), in the temporary folder: two kernels
    (or two grading processes) never pick the same file."""
    return os.path.join(tempfile.gettempdir(), f"workshop-kernel-{uuid.uuid4().hex[:12]}")


def use_ipc_for_async_kernels(config: "object") -> None:
    """Make every `AsyncKernelManager` this traitlets `config` reaches start its kernel over Unix sockets.

    For nbgrader, whose `Execute` preprocessor passes `kernel_manager_class=AsyncKernelManager` itself. One
    prefix per call (per grading process); the kernels of one process run one after another and jupyter_client
    picks the next free socket number under it."""
    config.AsyncKernelManager.transport = "ipc"
    config.AsyncKernelManager.ip = socket_prefix()


class IPCKernelManager(AsyncKernelManager):
    """nbclient's kernel manager with the `ipc` transport and socket paths of its own."""

    @default("transport")
    def _transport_default(self) -> str:
        return "ipc"

    @default("ip")
    def _ip_default(self) -> str:
        return socket_prefix()
