"""The course's headless kernels talk to papermill over Unix sockets (ZeroMQ `ipc`), not TCP.

ipykernel warns "Kernel is running over TCP without encryption" whenever its transport is TCP; `make course`
printed it once per notebook and a newcomer read it as a security problem. The kernel and papermill are on
the same machine, so the transport can be Unix sockets: the warning does not arise, no port is picked (no
race with another kernel for a free port) and nothing listens on the network. papermill passes
`kernel_manager_class` through to nbclient (run_all.run_notebook).

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


class IPCKernelManager(AsyncKernelManager):
    """nbclient's kernel manager with the `ipc` transport and socket paths of its own."""

    @default("transport")
    def _transport_default(self) -> str:
        return "ipc"

    @default("ip")
    def _ip_default(self) -> str:
        # each socket is "<ip>-<n>"; a fresh prefix per kernel, so that two kernels never pick the same file
        return os.path.join(tempfile.gettempdir(), f"workshop-kernel-{uuid.uuid4().hex[:12]}")
