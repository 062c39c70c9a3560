"""A released notebook opens with no unsaved changes (issue 40, item 6). JupyterLab 4 writes the kernel's
kernel_info `language_info` into the notebook's metadata as soon as the kernel connects
(NotebookPanel._updateLanguage -> YNotebook.setMetadata, which marks the notebook dirty unless the value is
deep-equal to what is there). nbgrader's release kept only {"name": "python"}, so every notebook showed
unsaved changes right after it opened. The release now holds what a real kernel of this environment answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RELEASED = sorted((ROOT / "notebooks").glob("*/*.ipynb"))


@pytest.fixture(scope="module")
def kernel_language_info() -> dict:
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
    try:
        kc.kernel_info()
        reply = kc.get_shell_msg(timeout=60)
        while reply["msg_type"] != "kernel_info_reply":
            reply = kc.get_shell_msg(timeout=60)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return reply["content"]["language_info"]


@pytest.mark.parametrize("path", RELEASED, ids=[p.stem for p in RELEASED])
def test_the_released_language_info_is_the_kernels(path: Path, kernel_language_info: dict) -> None:
    assert len(RELEASED) == 5
    metadata = json.loads(path.read_text())["metadata"]
    assert metadata["language_info"] == kernel_language_info
