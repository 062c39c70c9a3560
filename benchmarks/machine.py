"""What every CPU benchmark file records about the run that made it: when, on what machine (and how busy
it was before), with which versions. A figure without these cannot be re-made or compared."""

from __future__ import annotations

import datetime as dt
import os
import platform
from importlib.metadata import version


def record(what: str, load_before: float, packages: tuple[str, ...] = ("torch", "transformers", "accelerate")) -> dict:
    return {
        "what": what,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "load_1min_before": round(load_before, 2),
                    "python": platform.python_version(), "platform": platform.platform()},
        "versions": {name: version(name) for name in packages},
    }
