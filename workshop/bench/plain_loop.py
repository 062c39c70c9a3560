"""The bench's peer: a plain PyTorch training loop on the course's model shapes, batch and lengths.

Why it exists: an absolute samples/s means little across GPUs, but "the course's baseline runs at R x what
a plain loop gets on the same card" carries to any card. So `workshop bench` runs this loop in the same run,
on the same device, and gives every course configuration's throughput as a ratio to it.

It deliberately uses none of the course's code: no Trainer, no FSDP, no workshop.training. What it shares
with the course is only what defines the work: the BLOOM shapes (`model_config`), the per-example token
counts of the fixture in order (`lengths`), the micro-batch, bf16 autocast over fp32 weights, AdamW and
gradient clipping at 1.0. Each batch is padded to its longest example, as the course's dynamic padding
does, and the padding is masked out of the loss (labels -100). Token ids are random: speed and memory do
not depend on which tokens they are.

    python -m workshop.bench.plain_loop --spec SPEC.json      # what `workshop bench` runs

SPEC.json holds: model_config (a transformers BloomConfig dict), lengths, batch_size, steps, device
("cuda"/"cpu"), precision ("bf16"/"fp32"), seed, output_dir, and peak_tflops for MFU (None: no MFU). It
writes `metrics.jsonl` (one record per step, the course's field names, so the bench reads it with the same
code) and `summary.json` into output_dir.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import Any

import torch

IGNORE_INDEX = -100


def batches(lengths: list[int], batch_size: int, vocab: int, pad_id: int, steps: int,
            generator: torch.Generator) -> list[dict[str, torch.Tensor]]:
    """`steps` batches of consecutive examples (cycling through `lengths`), each padded to its longest."""
    out, i = [], 0
    for _ in range(steps):
        rows = [lengths[(i + k) % len(lengths)] for k in range(batch_size)]
        i += batch_size
        width = max(rows)
        ids = torch.full((batch_size, width), pad_id, dtype=torch.long)
        mask = torch.zeros((batch_size, width), dtype=torch.long)
        for r, n in enumerate(rows):
            ids[r, :n] = torch.randint(0, vocab, (n,), generator=generator)
            mask[r, :n] = 1
        labels = ids.masked_fill(mask == 0, IGNORE_INDEX)
        out.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return out


def adamw(params: Any) -> tuple[torch.optim.Optimizer, bool]:
    """Fused AdamW where this torch has it for the device (CUDA always; CPU in recent torch), else foreach."""
    params = list(params)
    try:
        return torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0, fused=True), True
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0), False


def train(spec: dict[str, Any]) -> dict[str, Any]:
    from transformers import BloomConfig, BloomForCausalLM

    out = Path(spec["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(spec["device"])
    torch.manual_seed(spec.get("seed", 42))
    config = BloomConfig(**spec["model_config"])
    model = BloomForCausalLM(config).to(device)
    model.train()
    # the course's FLOP count per token (6N + 12·L·h·s), from this model: tied embeddings counted once
    n_params = sum(p.numel() for p in model.parameters())
    optimizer, fused = adamw(model.parameters())
    gen = torch.Generator().manual_seed(spec.get("seed", 42))
    data = batches(spec["lengths"], spec["batch_size"], config.vocab_size, config.pad_token_id or 0, spec["steps"], gen)
    bf16 = spec["precision"] == "bf16"
    cuda = device.type == "cuda"
    peak = spec.get("peak_tflops")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    records: list[dict[str, Any]] = []
    (out / "metrics.jsonl").write_text("")
    for step, batch in enumerate(data, start=1):
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        sync()
        started = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        seconds = time.perf_counter() - started
        samples = int(batch["input_ids"].shape[0])
        tokens = int(batch["attention_mask"].sum())
        seq = tokens / samples
        tflops = tokens / seconds * (6.0 * n_params + 12.0 * config.n_layer * config.hidden_size * seq) / 1e12
        if cuda:
            used, reserved, kind = (torch.cuda.max_memory_allocated(device) / 2**20,
                                    torch.cuda.max_memory_reserved(device) / 2**20, "cuda_allocated")
        else:
            used, reserved, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, None, "rss"
        record = {"kind": "train", "step": step, "loss": round(float(loss), 6), "step_time_s": round(seconds, 4),
                  "samples_per_s": round(samples / seconds, 3), "tokens_per_s": round(tokens / seconds, 1),
                  "tflops": round(tflops, 6), "mfu": round(tflops / peak, 4) if peak else None,
                  "peak_mem_mb": round(used, 1), "peak_reserved_mb": round(reserved, 1) if reserved else None,
                  "mem_kind": kind, "counted": True}
        records.append(record)
        with (out / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"[plain loop] step {step}/{spec['steps']} | loss {record['loss']:.4f} | "
              f"{record['samples_per_s']} samples/s", flush=True)
    summary = {
        "status": "completed", "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "precision": spec["precision"], "steps": len(records), "wrapper": None,
        "sharding_applied": "none (a plain loop: no Trainer, no FSDP)", "fused_adamw": fused,
        "peak_mem_mb": max(r["peak_mem_mb"] for r in records), "mem_kind": records[-1]["mem_kind"],
        "peak_reserved_mb": records[-1]["peak_reserved_mb"],
        "train_loss": round(sum(r["loss"] for r in records) / len(records), 6),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workshop.bench.plain_loop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", type=Path, required=True, help="the JSON the bench writes (see above)")
    args = parser.parse_args(argv)
    train(json.loads(args.spec.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
