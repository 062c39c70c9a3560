"""All-reduce bandwidth self-test, printed in nccl-tests' `all_reduce_perf` table shape.

Run it over every rank of a job before training (`torchrun ... -m workshop.comm.bandwidth`): it proves
that all nodes joined, that the collective gives right answers, and how fast it is, in the table
cluster staff already read at a glance. It exits 1 when a node is missing, a value is wrong, or the
bus bandwidth at the largest message is below `--min-busbw` GB/s (gigabytes per second), so a batch
script can stop before wasting GPU hours.

The gate reads the largest message, not nccl-tests' "Avg bus bandwidth" (kept in the table for the
eye): the average over 8 B .. 256 MB is pulled down by the small, latency-bound sizes, so a healthy
fabric would fail it, while training's gradient buckets and FSDP's all-gathers are large messages.
Run it with one rank per GPU on whole nodes (the course's bandwidth step does), so every GPU of a
node sends at once as in training. NCCL's own choice of transport (NCCL_DEBUG=INFO's "via P2P/...",
"via NET/IB/...") is in the job's log; `workshop.results.logs` reads it into a transport note.

busbw = algbw * 2(n-1)/n (nccl-tests' all_reduce factor); algbw = bytes / time.
Out-of-place = copy the send buffer into a receive buffer, then all_reduce it (torch has no
out-of-place all_reduce); in-place = all_reduce the buffer itself.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, MutableMapping

from workshop.training.gc_pause import cyclic_gc_paused
from workshop.training.run_record import node_name

# nccl-tests' (2.13+) header formats, so the table lines up with the ones cluster staff know
HEADER_TOP = "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
HEADER = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
ROW = "%12d  %12d  %8s  %6s  %6d"
PLACE = "  %7s  %6.2f  %6.2f  %5d"

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """`8`, `64K`, `1M`, `2G` (nccl-tests' -b/-e spelling) as bytes."""
    m = re.fullmatch(r"(\d+)([KMG]?)B?", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; write e.g. 8, 64K, 1M")
    return int(m.group(1)) * _UNITS[m.group(2)]


def bus_factor(world: int, collective: str = "all_reduce") -> float:
    """busbw / algbw, nccl-tests' convention: the bytes each rank of a ring sends per byte of the message
    (for an all-gather or a reduce-scatter, the message is the whole, gathered tensor)."""
    share = (world - 1) / world
    if collective == "all_reduce":
        return 2 * share
    if collective in ("all_gather", "reduce_scatter"):
        return share
    raise ValueError(f"unknown collective {collective!r}: use all_reduce, all_gather or reduce_scatter")


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    out, size = [], max(min_bytes, 4)
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return out


def _time_str(us: float) -> str:
    if us >= 10000:
        return f"{us:7.0f}"
    return f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="workshop bandwidth", description=__doc__.split("\n\n")[0])
    p.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("8"))
    p.add_argument("-e", "--maxbytes", type=parse_size, default=None,
                   help="largest message (default 1M on CPU/gloo, 256M on CUDA/NCCL)")
    p.add_argument("-f", "--stepfactor", type=int, default=None, help="size multiplier (default 4 on CPU, 2 on CUDA)")
    p.add_argument("-w", "--warmup_iters", type=int, default=None)
    p.add_argument("-n", "--iters", type=int, default=None)
    p.add_argument("--expect-nodes", type=int, default=None,
                   help="fail unless the ranks run on this many hosts (default: $SLURM_NNODES when set)")
    p.add_argument("--min-busbw", type=float, default=0.0,
                   help="fail when the bus bandwidth at the largest message (GB/s) is lower")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--one-process", action="store_true",
                   help="started without a launcher as a world of one (a one-process job's batch script)")
    return p.parse_args(argv)


def one_process_env(env: MutableMapping[str, str]) -> None:
    """A one-process job starts with plain python (render.py), as a one-process training job does: torchrun's own
    interpreter and torch import cost ~2-4 s of CPU for nothing to coordinate. This process is then rank 0 of a
    world of one, with the environment workshop.training.train gives itself then; its store listens on port 0,
    which the kernel assigns (no other rank has to find it)."""
    from workshop.training.train import ONE_PROCESS_ENV

    if "RANK" not in env:
        env.update(ONE_PROCESS_ENV)


@dataclass
class Plan:
    """One self-test's settings on this rank: where it runs, which sizes, how many iterations."""
    use_cuda: bool
    device: Any
    rank: int
    world: int
    max_bytes: int
    factor: int
    warmup: int
    iters: int


def measure(plan: Plan, nbytes: int, in_place: bool) -> tuple[float, int]:
    """One all_reduce of `nbytes`: the slowest rank's mean time and the wrong elements summed over the ranks."""
    import torch
    import torch.distributed as dist

    count, device, rank, world = nbytes // 4, plan.device, plan.rank, plan.world
    # integers small enough that float32 sums are exact: every rank can check every element
    base = (torch.arange(count, dtype=torch.float32, device=device) % 7) + rank
    send = base.clone()
    recv = torch.empty_like(send)
    expected = (torch.arange(count, dtype=torch.float32, device=device) % 7) * world + world * (world - 1) / 2

    def once() -> torch.Tensor:
        if in_place:
            dist.all_reduce(send)
            return send
        recv.copy_(send)
        dist.all_reduce(recv)
        return recv

    def sync() -> None:
        if plan.use_cuda:
            torch.cuda.synchronize(device)

    for _ in range(plan.warmup):
        if in_place:
            send.copy_(base)
        once()
    total = 0.0
    for _ in range(plan.iters):
        if in_place:
            send.copy_(base)     # reset outside the timed region, so in-place sums stay checkable
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        out = once()
        sync()
        total += time.perf_counter() - t0
    wrong = int((out != expected).sum().item())
    t = torch.tensor([total / plan.iters], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)       # the slowest rank's time is the collective's
    w = torch.tensor([wrong], dtype=torch.int64, device=device)
    dist.all_reduce(w)
    return float(t.item()), int(w.item())


def start(args: argparse.Namespace) -> Plan:
    """The process group on this rank's device, and the sizes and iterations for it (GPU defaults are larger)."""
    with cyclic_gc_paused():    # ~0.4 s of each rank's start-up (workshop.training.gc_pause)
        import torch
        import torch.distributed as dist

    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(minutes=5))
    return Plan(use_cuda=use_cuda, device=device, rank=dist.get_rank(), world=dist.get_world_size(),
                max_bytes=args.maxbytes or parse_size("256M" if use_cuda else "1M"),
                factor=args.stepfactor or (2 if use_cuda else 4),
                warmup=args.warmup_iters if args.warmup_iters is not None else (5 if use_cuda else 2),
                iters=args.iters if args.iters is not None else (20 if use_cuda else 5))


def device_line(plan: Plan) -> str:
    """This rank's device as nccl-tests' "Using devices" line names it."""
    import torch

    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if not plan.use_cuda:
        return f"device {local_rank:2d} [cpu] gloo"
    props = torch.cuda.get_device_properties(plan.device)
    return (f"device {local_rank:2d} [{getattr(props, 'pci_domain_id', 0):04x}:"
            f"{getattr(props, 'pci_bus_id', 0):02x}:{getattr(props, 'pci_device_id', 0):02x}] {props.name}")


def print_table(plan: Plan, args: argparse.Namespace, everyone: list[dict], rows: list) -> tuple[int, int, float]:
    """nccl-tests' table, on rank 0: returns the wrong values, and the gate's size and bus bandwidth."""
    p = print
    p(f"# nThread 1 nGpus 1 minBytes {args.minbytes} maxBytes {plan.max_bytes} step: {plan.factor}(factor) "
      f"warmup iters: {plan.warmup} iters: {plan.iters} agg iters: 1 validation: 1 graph: 0")
    p("#")
    p("# Using devices")
    for r, e in enumerate(everyone):
        p(f"#  Rank {r:2d} Group  0 Pid {e['pid']:6d} on {e['host']:>10s} {e['dev']}")
    p("#")
    p(HEADER_TOP % ("", "", "", "", ""))
    p(HEADER % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                "time", "algbw", "busbw", "#wrong"))
    p(HEADER % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""))
    busbws, wrong_total, row_busbw = [], 0, []
    for nbytes, *places in rows:
        line = ROW % (nbytes, nbytes // 4, "float", "sum", -1)
        for secs, wrong in places:
            algbw = nbytes / secs / 1e9
            busbw = algbw * bus_factor(plan.world)
            busbws.append(busbw)
            wrong_total += wrong
            line += PLACE % (_time_str(secs * 1e6), algbw, busbw, wrong)
        row_busbw.append((nbytes, max(bus for bus in busbws[-2:])))
        p(line)
    gate_bytes, gate = row_busbw[-1]
    p(f"# Out of bounds values : {wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}")
    p(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.3f} ")
    p(f"# Large-message busbw  : {gate:.3f} GB/s at {gate_bytes} B (the gate's figure)")
    p("#")
    return wrong_total, gate_bytes, gate


def verdict(args: argparse.Namespace, hosts: list[str], wrong_total: int, gate_bytes: int, gate: float) -> list[str]:
    """Why the self-test fails (empty: it passes): wrong sums, a node missing, a bandwidth under the site's gate."""
    expect = args.expect_nodes if args.expect_nodes is not None else (
        int(os.environ["SLURM_NNODES"]) if os.environ.get("SLURM_NNODES", "").isdigit() else None)
    problems = []
    if wrong_total:
        problems.append(f"{wrong_total} wrong values after all_reduce: the collective is broken")
    if expect is not None and len(hosts) != expect:
        problems.append(f"expected {expect} node(s), but the ranks ran on {len(hosts)} host(s) "
                        f"({', '.join(hosts)}): a node did not join, or several ranks share a host")
    if args.min_busbw > 0 and gate < args.min_busbw:
        problems.append(f"bus bandwidth at {gate_bytes} B is {gate:.3f} GB/s, below the site's minimum "
                        f"{args.min_busbw:g} GB/s: report the node list ({', '.join(hosts)}) and NCCL's "
                        "transport lines above to the admins")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one_process:
        one_process_env(os.environ)
    if "RANK" not in os.environ:
        print("workshop bandwidth runs on every rank of a job: launch it with torchrun, e.g.\n"
              "  torchrun --standalone --nproc-per-node=2 -m workshop.comm.bandwidth", file=sys.stderr)
        return 2
    plan = start(args)
    import torch
    import torch.distributed as dist

    me = {"host": node_name(), "pid": os.getpid(), "dev": device_line(plan)}
    everyone: list[dict] = [None] * plan.world  # type: ignore[list-item]
    dist.all_gather_object(everyone, me)
    rows = [(nbytes, measure(plan, nbytes, False), measure(plan, nbytes, True))
            for nbytes in sizes(args.minbytes, plan.max_bytes, plan.factor)]
    hosts = sorted({e["host"] for e in everyone})
    status = 0
    if plan.rank == 0:
        wrong_total, gate_bytes, gate = print_table(plan, args, everyone, rows)
        print(f"# Hosts                : {len(hosts)} ({', '.join(hosts)}), {plan.world} ranks, "
              f"backend {'nccl' if plan.use_cuda else 'gloo'}")
        problems = verdict(args, hosts, wrong_total, gate_bytes, gate)
        for msg in problems:
            print(f"# FAILED: {msg}")
        if not problems:
            print("# PASSED")
        sys.stdout.flush()
        status = 1 if problems else 0
    result = torch.tensor([status], dtype=torch.int64, device=plan.device)
    dist.broadcast(result, 0)
    dist.destroy_process_group()
    return int(result.item())

if __name__ == "__main__":
    sys.exit(main())
