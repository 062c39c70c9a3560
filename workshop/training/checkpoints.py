"""What a run leaves for later: its checkpoints, and the digest that seals its numbers.

Training writes both; `workshop verify` (grading) and the job API (resubmitting with resume) read them,
so they live here, beside the training script, rather than in either reader: training imports
nothing from grading.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from pathlib import Path
from typing import Any

from workshop.training import log_records

KEY_ENV = "WORKSHOP_DIGEST_KEY"

CHECKPOINT = re.compile(r"checkpoint-(\d+)")


def latest_checkpoint(out: Path) -> tuple[Path, int] | None:
    """The newest complete checkpoint in `out`: the highest checkpoint-N that has its trainer_state.json
    (written after the model and optimizer shards, so a job killed mid-save leaves no half checkpoint
    to resume from)."""
    found = []
    for path in out.glob("checkpoint-*"):
        m = CHECKPOINT.fullmatch(path.name)
        if m and (path / "trainer_state.json").is_file():
            found.append((int(m.group(1)), path))
    if not found:
        return None
    step, path = max(found)
    return path, step


def records_until(path: Path, step: int) -> list[dict[str, Any]]:
    """metrics.jsonl's records up to the checkpoint's step: the steps trained after it are done again
    by the resumed run, and must not be counted twice."""
    if not path.is_file():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if r.get("step", 0) <= step]


def canonical(job_id: str, summary: dict[str, Any], metrics: list[dict[str, Any]]) -> bytes:
    """The bytes the digest covers: parsed values, so formatting changes nothing and a number does."""
    return json.dumps({"job_id": str(job_id), "summary": summary, "metrics": metrics},
                      sort_keys=True, separators=(",", ":")).encode()


def digest(job_id: str, summary: dict[str, Any], metrics: list[dict[str, Any]], key: str | None = None) -> dict[str, Any]:
    """digest.json's content: HMAC-SHA256 with the site key when there is one, else plain SHA-256."""
    data = canonical(job_id, summary, metrics)
    if key:
        value, algorithm = hmac.new(key.encode(), data, hashlib.sha256).hexdigest(), "hmac-sha256"
    else:
        value, algorithm = hashlib.sha256(data).hexdigest(), "sha256"
    return {"job_id": str(job_id), "algorithm": algorithm, "keyed": bool(key), "digest": value,
            "covers": ["job id", "summary.json", "metrics.jsonl"]}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def seal(out: Path) -> dict[str, Any]:
    """Write run/digest.json over this job's id, summary.json and metrics.jsonl, and print it as the
    WORKSHOP_DIGEST line, so `workshop verify` can tell these numbers from edited ones. With the
    site's secret WORKSHOP_DIGEST_KEY it is an HMAC a student cannot recompute; without, a plain
    SHA-256 that only catches careless edits (`workshop verify` checks it)."""
    summary = json.loads((out / "summary.json").read_text())
    sealed = digest(os.environ.get("SLURM_JOB_ID", ""), summary, read_metrics(out / "metrics.jsonl"),
                    os.environ.get(KEY_ENV) or None)
    (out / "digest.json").write_text(json.dumps(sealed, indent=1) + "\n")
    log_records.write(log_records.DIGEST, sealed)
    return sealed
