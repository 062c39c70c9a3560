"""One table of checks, one line each, for an admin: `workshop preflight` and `workshop prefetch` print it.

A line is ok, needs a fix (and says which), or is a fact that is neither: "no GPU on this partition"
on a test cluster whose GPUs are only Slurm's bookkeeping is not ok, and not a fix either. A command
that prints the table exits 1 when any line needs a fix.
"""

from __future__ import annotations

from dataclasses import dataclass

OK, FIX, NO_GPU, INFO = "ok", "FIX", "no GPU", "-"
NO_GPU_TEXT = "no GPU on this partition"


@dataclass(frozen=True)
class Line:
    check: str        # what was checked, e.g. "partition gpu_v100"
    status: str       # OK, FIX, NO_GPU or INFO
    text: str         # what was found; for FIX, what to do

    @property
    def needs_fix(self) -> bool:
        return self.status == FIX


def table(lines: list[Line], title: str = "") -> str:
    """Fixed columns a terminal shows at a glance: check, status, what was found or the fix."""
    width = max([len("check"), *(len(x.check) for x in lines)])
    out = [title] if title else []
    out.append(f"{'check':<{width}}  {'status':<6}  result")
    out.append(f"{'-' * width}  ------  {'-' * 40}")
    out += [f"{x.check:<{width}}  {x.status:<6}  {x.text}" for x in lines]
    fixes = sum(x.needs_fix for x in lines)
    out.append(f"{len(lines)} checks: {fixes} need a fix" if fixes else f"{len(lines)} checks: nothing to fix")
    return "\n".join(out)


def exit_code(lines: list[Line]) -> int:
    return 1 if any(x.needs_fix for x in lines) else 0
