"""A small real FSDP2 job for the collective recorder's tests (run under torchrun, 2 ranks, gloo).

Two Linear units sharded with fully_shard, six optimizer steps of a plain loop that calls the course's
CommRecorder the way the Trainer does (on_train_begin, on_step_begin, on_step_end):
- `ok/`: a recorder on step 3, as a run has one;
- `blocked/`: a recorder on step 4, inside which the job starts a profiler of its own (as a student
  profiling their run would): PyTorch's profilers do not nest, the inner one takes the events, and the
  recorder's trace of the step is empty (the "trace cannot be taken" case); the loop trains on to step 6;
- `raw/`: that inner profiler's trace of step 4, exported, and the flight recorder's entries, per rank,
  for the parser's tests (workshop.training.comm_trace), as PyTorch wrote them;
- `off/`: a recorder switched off (`comm_record=false`), which records and leaves out nothing.
Each rank writes `done-<rank>.json` with the steps it trained and both recorders' `comm`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import TrainerState

from workshop.training.comm_recorder import CommRecorder, enable_flight_recorder, flight_entries
from workshop.training.metrics import StepCounter

STEPS = 6


def main(out: Path) -> None:
    enable_flight_recorder()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    from torch.distributed.fsdp import fully_shard

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters())
    hosts = ["probe-node"] * dist.get_world_size()
    for name in ("ok", "blocked", "raw"):
        (out / name).mkdir(parents=True, exist_ok=True)
    ok = CommRecorder(out / "ok", torch.device("cpu"), StepCounter(), hosts, rank, rank == 0, avoid_step=2)
    blocked = CommRecorder(out / "blocked", torch.device("cpu"), StepCounter(), hosts, rank, rank == 0, record_step=4)
    off_counter = StepCounter()
    off = CommRecorder(out / "off", torch.device("cpu"), off_counter, hosts, rank, rank == 0, enabled=False)
    recorders = (ok, blocked, off)
    state = TrainerState()
    state.max_steps, state.global_step = STEPS, 0
    for recorder in recorders:
        recorder.on_train_begin(None, state, None)
    trained = 0
    for step in range(1, STEPS + 1):
        for recorder in recorders:
            recorder.on_step_begin(None, state, None)
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) \
            if step == 4 else None
        if profiler is not None:
            profiler.__enter__()
        loss = model(torch.randn(4, 64)).sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        if profiler is not None:
            profiler.__exit__(None, None, None)
            profiler.export_chrome_trace(str(out / "raw" / f"trace-{rank}.json"))
            (out / "raw" / f"flight-{rank}.json").write_text(json.dumps(flight_entries()))
        state.global_step += 1
        trained += 1
        for recorder in reversed(recorders):
            recorder.on_step_end(None, state, None)
    done = {"rank": rank, "trained": trained, "ok": ok.summary(1.0), "blocked": blocked.summary(1.0),
            "off": off.summary(1.0), "off_left_out_steps": off_counter.left_out_steps}
    (out / f"done-{rank}.json").write_text(json.dumps(done))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    sys.stdout.flush()
    os._exit(0)  # gloo's threads can abort a finished process in interpreter shutdown (train.exit_after_run)
