"""Python's cyclic garbage collector paused over a span that makes many objects and frees few of them.

Why: importing torch and transformers creates a few hundred thousand objects, and the collections they trigger
cost a process ~0.4-2 CPU-s of its start-up (a training rank's ~5 s, a bandwidth rank's, the suite's warm parent's;
measured on the 2-core machines); a dry run's fake-tensor dispatch makes hundreds of thousands of short-lived
containers, whose collections cost a fifth of its CPU. Each frees its tensors by reference count, so nothing a
figure counts waits for the collector. One definition, for every place that pauses it.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def cyclic_gc_paused(freeze: bool = False) -> Iterator[None]:
    """The collector off for the `with` body and back as it was after; with `freeze`, what the body made is
    moved out of the collector's reach as it comes back on (gc.freeze): the later collections of a long run,
    and of a forked child (whose pages they would copy), skip the start-up's objects."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if was:
            gc.enable()
