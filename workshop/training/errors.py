"""`ConfigError`: a config value that cannot run, naming the field and the fix.

A module of its own so that the modules config.py reads (hf_fsdp) raise it without importing config.py
back; `workshop.training.config.ConfigError` is the same class.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value that cannot run; the message names the field and the fix."""

    def __init__(self, field_name: str, problem: str, fix: str) -> None:
        self.field = field_name
        self.problem = problem
        self.fix = fix
        super().__init__(f"config field '{field_name}': {problem}. Fix: {fix}")
