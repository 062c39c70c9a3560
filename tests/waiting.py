"""Wait for a condition, not for a time: a test that sleeps a fixed while and then looks passes on a quiet
machine and fails on a busy one. `until` polls `probe` until it returns something true and returns that;
its timeout only bounds a condition that never comes (a lost event, a hung process), so it is generous,
and a test never asserts how long the wait took."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def until(probe: Callable[[], T], what: str, timeout: float = 120.0, interval: float = 0.1) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {value!r})")
        time.sleep(interval)
