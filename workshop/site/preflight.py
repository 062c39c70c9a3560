"""`workshop preflight --profile <site>`: the admin's check of a site profile, from a login node, the week
before the class.

    workshop preflight --profile <site> [--jobs-dir preflight-jobs] [--timeout 900]

First what Slurm says of the profile (sinfo, sacctmgr, scontrol): every partition exists and is up, has
the GPUs, cores, memory and time limit the profile counts on; the account is the user's; the QOS and the
reservation exist (and the reservation is not over); the user's association and QOS limits against each
notebook's largest cell (workshop.site.limits). Then one short 1-GPU job per GPU partition
(`workshop.slurm.node_check`, rendered from the course's own batch script, so the site's setup, caches
and NCCL variables are the jobs' own): torch and CUDA versions, the wheel's CUDA architectures against the
GPU's compute capability (does it carry sm_70 for a V100?), bf16 against the precision the profile asks
there, a NCCL init, an offline load of the model and the data from `hf_home`, and the free disk where jobs
write. One table, one line per check: ok, the fix, or "no GPU on this partition" where a partition's GPUs
are Slurm's bookkeeping only (the repo's test cluster): that is not ok, and not a fix either. Then one
2-node job per multi-node partition: the students' bandwidth gate itself (every GPU of 2 nodes, the course's
rendezvous, slurm/templates/rendezvous.sh, its sizes up to [bandwidth] max_bytes): its line is ok with the
bus bandwidth against [bandwidth] min_busbw_GBps, or names the failure (the rendezvous port, NCCL's
interface, a fallback to sockets, a figure under the threshold) and the profile field that fixes it.
A job on the session partition runs `sbatch --wait` of another (workshop.site.submit_check): a
session that cannot submit is found here, not in class. Exit 1 when a line needs a fix.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import re
import sys
from pathlib import Path
from typing import Any

from workshop.site.checklist import FIX, INFO, NO_GPU, NO_GPU_TEXT, OK, Line, exit_code, table
from workshop.site.limits import limit_lines
from workshop.site.submit_check import submit_from_job_line
from workshop.site.prefetch import report_lines
from workshop.training.config import ConfigError
from workshop.slurm.profiles import Partition, Profile, ProfileError, load_profile, mem_mb, time_seconds

PREFLIGHT_TIME_S = 600          # the job's time limit: imports, one model load, a NCCL init
MIN_FREE_GB = 10.0
_GRES = re.compile(r"gpu(?::([A-Za-z0-9_.-]+))?:(\d+)")


# ------------------------------------------------------------------------------ what Slurm says

def slurm(cmd: list[str]) -> str:
    from workshop.slurm.slurm_backend import run
    return run(cmd)


def sinfo_partitions(text: str) -> dict[str, dict[str, Any]]:
    """`sinfo -h -a -o '%R|%a|%l|%c|%m|%G|%D'`, one line per group of like nodes, as one record per partition:
    up (any group), time limit, the fewest cores and memory (MB) of a node, the most GPUs and their types."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 7:
            continue
        name, avail, limit, cpus, mem, gres, nodes = parts[:7]
        rec = out.setdefault(name, {"up": False, "time": limit, "cpus": None, "mem_mb": None, "gpus": 0,
                                    "gpu_types": set(), "nodes": 0})
        rec["up"] = rec["up"] or avail == "up"
        for key, value in (("cpus", cpus), ("mem_mb", mem)):
            number = int(re.sub(r"\D", "", value) or 0)
            rec[key] = number if rec[key] is None else min(rec[key], number)
        for gpu_type, count in _GRES.findall(gres):
            rec["gpus"] = max(rec["gpus"], int(count))
            if gpu_type:
                rec["gpu_types"].add(gpu_type)
        rec["nodes"] += int(nodes) if nodes.isdigit() else 0
    return out


def limit_seconds(limit: str) -> float:
    return float("inf") if limit.lower() in ("infinite", "unlimited", "") else time_seconds(limit)


def partition_lines(profile: Profile, found: dict[str, dict[str, Any]]) -> list[Line]:
    """Each named partition of the profile against sinfo's record of it."""
    from workshop.slurm.steps import STEPS

    lines = []
    names = [p.name for p in profile.partitions.values()]
    for part in profile.partitions.values():
        label = f"partition {part.name or part.key}" + (f" [{part.key}]" if names.count(part.name) > 1 else "")
        if not part.name:
            lines.append(Line(label, INFO, "no Slurm name: jobs go to the cluster's default partition"))
            continue
        rec = found.get(part.name)
        if rec is None:
            lines.append(Line(label, FIX, f"sinfo knows no partition {part.name!r}. Fix: set [slurm.partitions.{part.key}] "
                              f"name to one of {', '.join(sorted(found)) or '(none)'}"))
            continue
        problems = []
        if not rec["up"]:
            problems.append("it is not up (sinfo: down/drain/inactive)")
        if part.gpus_per_node > rec["gpus"]:
            problems.append(f"the profile counts {part.gpus_per_node} GPUs a node, Slurm offers {rec['gpus']} (gres)")
        if part.nodes and rec["nodes"] and part.nodes != rec["nodes"]:
            problems.append(f"the profile counts {part.nodes} nodes (nodes, the schedule's), Slurm has {rec['nodes']}")
        if part.gpu_type and rec["gpu_types"] and part.gpu_type not in rec["gpu_types"]:
            problems.append(f"gpu_type {part.gpu_type!r} is not one of its GPU types ({', '.join(sorted(rec['gpu_types']))})")
        cores = max(1, part.gpus_per_node) * part.cpus_per_proc
        if rec["cpus"] is not None and cores > rec["cpus"]:
            problems.append(f"a full node's job asks {cores} cores, its nodes have {rec['cpus']}")
        if part.mem_per_node and rec["mem_mb"] and mem_mb(part.mem_per_node) > rec["mem_mb"]:
            problems.append(f"mem_per_node {part.mem_per_node} is more than its nodes' {rec['mem_mb']} MB")
        limit = limit_seconds(rec["time"])
        steps = [s for s in STEPS if profile.partition_for(s).key == part.key]
        longest = max([time_seconds(profile.time_for(s)) for s in steps] or [0])
        if longest > limit:
            problems.append(f"a step asks {longest // 60} min, its time limit is {rec['time']}")
        if part.max_time and time_seconds(part.max_time) > limit:
            problems.append(f"max_time {part.max_time} is longer than its limit {rec['time']}")
        found_text = (f"up, {rec['nodes']} nodes, {rec['gpus']} GPUs, {rec['cpus']} cores and {rec['mem_mb']} MB a node, "
                      f"limit {rec['time']}")
        lines.append(Line(label, FIX, "; ".join(problems) + f" ({found_text}). Fix: correct the profile or ask your "
                          "admins") if problems else Line(label, OK, found_text))
    return lines


def account_line(profile: Profile, user: str) -> Line:
    if not profile.account:
        try:
            mine = sorted(set(slurm(["sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={user}",
                                     "format=Account"]).split()))
        except RuntimeError as e:
            return Line("account", FIX, f"accounting does not answer ({str(e)[:160]}): the watch and `workshop verify` "
                        "read sacct. Fix: ask your admins whether slurmdbd runs")
        return Line("account", INFO, f"none set: jobs go to {user}'s default account ({user}'s accounts: {', '.join(mine) or 'none'})")
    try:
        rows = slurm(["sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={user}", f"account={profile.account}",
                      "format=Account,Partition,QOS"]).split()
    except RuntimeError as e:
        return Line("account", FIX, f"accounting does not answer ({str(e)[:160]}). Fix: ask your admins whether slurmdbd runs")
    if not rows:
        return Line("account", FIX, f"{user} has no association with account {profile.account!r} (sacctmgr show assoc). "
                    f"Fix: set [slurm] account to one of yours (`sacctmgr show assoc user={user}`)")
    return Line("account", OK, f"{profile.account}: {user} may submit to it")


def qos_line(profile: Profile) -> Line | None:
    if not profile.qos:
        return None
    try:
        names = slurm(["sacctmgr", "-n", "-P", "show", "qos", profile.qos, "format=Name"]).split()
    except RuntimeError as e:
        return Line("qos", FIX, f"accounting does not answer ({str(e)[:160]})")
    return (Line("qos", OK, profile.qos) if profile.qos in names else
            Line("qos", FIX, f"no QOS {profile.qos!r} (sacctmgr show qos). Fix: set [slurm] qos to one your account has"))


def reservation_line(profile: Profile, user: str) -> Line:
    name = profile.reservation
    if not name:
        return Line("reservation", INFO, "none: on class days put the class's reservation in [slurm] reservation")
    try:
        text = slurm(["scontrol", "show", "reservation", name])
    except RuntimeError as e:
        return Line("reservation", FIX, f"{name!r}: {str(e)[:200]}. Fix: ask your admins for the reservation, or "
                    "leave [slurm] reservation empty until it exists")
    fields = dict(re.findall(r"(\w+)=(\S*)", text))
    from datetime import datetime
    try:
        ended = datetime.fromisoformat(fields.get("EndTime", "")) < datetime.now()
    except ValueError:
        ended = False
    users = [u for u in fields.get("Users", "(null)").split(",") if u not in ("(null)", "")]
    accounts = [a for a in fields.get("Accounts", "(null)").split(",") if a not in ("(null)", "")]
    if ended:
        return Line("reservation", FIX, f"{name} ended at {fields['EndTime']}. Fix: ask for the class's dates")
    if users and user not in users and not (profile.account and profile.account in accounts):
        return Line("reservation", FIX, f"{name} is for users {','.join(users)} / accounts {','.join(accounts) or '-'}, "
                    f"not {user} or account {profile.account or '(default)'}. Fix: ask your admins to add the class")
    return Line("reservation", OK, f"{name}: {fields.get('StartTime')} to {fields.get('EndTime')}, nodes {fields.get('Nodes')}")


def session_line(profile: Profile, found: dict[str, dict[str, Any]]) -> Line:
    if not profile.session_partition:
        return Line("JupyterLab sessions", INFO, "no [ood] partition: Open OnDemand's app needs a CPU or interactive "
                    "partition named there")
    part = profile.partitions[profile.session_partition]
    rec = found.get(part.name)
    if rec is None or not rec["up"]:
        return Line("JupyterLab sessions", FIX, f"partition {part.name!r} ({'not up' if rec else 'unknown to sinfo'}). "
                    "Fix: name a CPU or interactive partition that exists in [slurm.partitions.*] and [ood]")
    return Line("JupyterLab sessions", OK, f"{part.name}: {profile.session_cpus} cores and {profile.session_mem} a "
                "session, no GPU")


def gate_session_line(profile: Profile) -> Line | None:
    """Whether notebook 05's whole-node gate can start while sessions run: it needs GATE_NODES nodes of its
    partition that no session can hold. The profile loader refuses a shared partition; sinfo also knows
    partitions of other names over the same nodes. None when the gate does not ask for whole nodes."""
    from workshop.slurm.profiles import GATE_NODES, gate_is_exclusive, session_blocks_gate

    if profile.backend != "slurm" or not profile.session_partition or not gate_is_exclusive(profile):
        return None
    gate = profile.partition_for("bandwidth")
    session = profile.partitions[profile.session_partition]
    try:
        sessions_on = (reservation_nodes(profile.session_reservation) if profile.session_reservation
                       else partition_nodes(session.name))
        free = partition_nodes(gate.name) - sessions_on
    except RuntimeError as e:
        return Line("sessions and the gate", INFO, f"node lists not compared ({str(e)[:160]})")
    found = session_blocks_gate(profile, free_nodes=len(free))
    if found:
        return Line("sessions and the gate", FIX, f"{found[0]}. Fix: {found[1]}")
    return Line("sessions and the gate", OK, f"{len(free)} node(s) of {gate.name} hold no session: the gate's "
                f"{GATE_NODES} whole nodes never wait on one")


def reservation_nodes(name: str) -> set[str]:
    """The node names a reservation holds (`scontrol show reservation`'s Nodes=)."""
    found = re.search(r"\bNodes=(\S+)", slurm(["scontrol", "show", "reservation", name]))
    return set(slurm(["scontrol", "show", "hostnames", found.group(1)]).split()) if found else set()


def partition_nodes(partition: str) -> set[str]:
    """The node names of a Slurm partition (sinfo's node list, expanded by scontrol)."""
    names: set[str] = set()
    for nodelist in slurm(["sinfo", "-h", "-a", "-p", partition, "-o", "%N"]).split():
        names |= set(slurm(["scontrol", "show", "hostnames", nodelist]).split())
    return names


# ------------------------------------------------------------------------------ what the node says

def arch_covers(arch_list: list[str], capability: tuple[int, int]) -> bool:
    """Whether a torch wheel built for `arch_list` runs kernels on a GPU of `capability`: a cubin for
    sm_XY runs on X.Z with Z >= Y (same major); PTX (compute_XY) is compiled for any later GPU."""
    major, minor = capability
    for arch in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+?)(\d)a?", arch)
        if not m:
            continue
        a_major, a_minor = int(m.group(2)), int(m.group(3))
        if m.group(1) == "sm" and a_major == major and a_minor <= minor:
            return True
        if m.group(1) == "compute" and (a_major, a_minor) <= (major, minor):
            return True
    return False


def bf16_steps(profile: Profile, part: Partition) -> list[str]:
    """The training steps on `part` that the profile runs in bf16."""
    from workshop.slurm.steps import STEPS, step_config

    return [s for s, info in STEPS.items() if info.program == "train" and profile.partition_for(s).key == part.key
            and step_config(s, profile).precision == "bf16"]


def node_lines(label: str, report: dict[str, Any], profile: Profile, part: Partition,
               min_free_gb: float) -> list[Line]:
    """One GPU partition's job report as lines: torch and CUDA, the architectures, bf16, NCCL, the offline
    load, free disk."""
    lines: list[Line] = []
    gpu_checks = ("torch, CUDA", "GPU architecture", "bf16", "NCCL")
    hardware = report.get("nvidia_gpus", [])
    if "torch_error" in report:
        lines.append(Line(f"{label}: torch, CUDA", FIX, f"{report['torch_error']}. Fix: the profile's [env] setup must "
                          "activate the course environment (bloom_env) on the nodes"))
        lines += [Line(f"{label}: {c}", INFO, "not checked (torch did not load)") for c in gpu_checks[1:]]
    elif not report.get("cuda_available"):
        torch_text = f"torch {report['torch']}" + (f" (CUDA {report['torch_cuda']})" if report.get("torch_cuda") else " (CPU build)")
        if not hardware:
            why = (f"{NO_GPU_TEXT}: the node has no NVIDIA device (Slurm's CUDA_VISIBLE_DEVICES="
                   f"{report.get('visible_devices')} names a GPU slot only); {torch_text}")
            lines.append(Line(f"{label}: torch, CUDA", NO_GPU, why))
            lines += [Line(f"{label}: {c}", NO_GPU, NO_GPU_TEXT) for c in gpu_checks[1:]]
        else:
            fix = ("install the CUDA build (bloom_env.yml: torch from the download.pytorch.org/whl/cu126 index)"
                   if not report.get("torch_cuda") else
                   f"the node's driver may be older than CUDA {report['torch_cuda']} needs: load no CUDA module, keep "
                   "the driver's cuda-compat folder on LD_LIBRARY_PATH (the batch script keeps it), or use a torch "
                   "build for an older CUDA")
            lines.append(Line(f"{label}: torch, CUDA", FIX, f"the node has {len(hardware)} x {hardware[0]} but {torch_text} "
                              f"sees no GPU. Fix: {fix}"))
            lines += [Line(f"{label}: {c}", INFO, "not checked (torch sees no GPU)") for c in gpu_checks[1:]]
    else:
        cap = tuple(report["capability"])
        sm = f"sm_{cap[0]}{cap[1]}"
        lines.append(Line(f"{label}: torch, CUDA", OK, f"torch {report['torch']} (CUDA {report['torch_cuda']}), driver "
                          f"{report.get('driver') or 'unknown'}, {report['device_count']} x {report['name']} "
                          f"({report['memory_gb']} GB)"))
        archs = report.get("arch_list", [])
        lines.append(Line(f"{label}: GPU architecture", OK, f"{sm} ({report['name']}) is covered by the wheel's "
                          f"{' '.join(archs)}") if arch_covers(archs, cap) else
                     Line(f"{label}: GPU architecture", FIX, f"the wheel carries no kernels for {sm} ({report['name']}): "
                          f"it has {' '.join(archs) or 'none'}. Fix: install torch from a CUDA index that still builds "
                          f"{sm} (cu126 builds sm_50..sm_90, V100's sm_70 included; cu128 and later dropped Volta)"))
        wanted = bf16_steps(profile, part)
        if report.get("bf16"):
            lines.append(Line(f"{label}: bf16", OK, f"supported{' (the profile uses it for ' + ', '.join(wanted) + ')' if wanted else ''}"))
        elif wanted:
            lines.append(Line(f"{label}: bf16", FIX, f"{report['name']} has no bf16, but the profile runs {', '.join(wanted)} "
                              f"in bf16 on this partition. Fix: precision = \"fp16\" in [run.<step>] for those steps "
                              "(or move them to a partition with bf16)"))
        else:
            lines.append(Line(f"{label}: bf16", OK, f"not supported by {report['name']}; the profile uses none here"))
        nccl = report.get("nccl", {})
        variables = ", ".join(f"{k}={v}" for k, v in sorted(nccl.get("env", {}).items())) or "no NCCL_* variables"
        lines.append(Line(f"{label}: NCCL", OK, f"NCCL {nccl['version']}: init and all_reduce on one GPU in "
                          f"{nccl['seconds']} s ({variables})") if nccl.get("ok") else
                     Line(f"{label}: NCCL", FIX, f"{nccl.get('error', 'all_reduce gave a wrong sum')}. Fix: check [nccl] "
                          "in the profile (socket_ifname, ib_hca, the plugin) against `ip -br link` and `ibv_devinfo -l` "
                          "on a compute node"))
    lines += report_lines(report.get("offline", {}), f"{label}: offline load")
    for name, disk in report.get("disk", {}).items():
        if "error" in disk:
            lines.append(Line(f"{label}: disk {name}", FIX, f"{disk['path']}: {disk['error']}"))
        elif disk["free_gb"] < min_free_gb:
            lines.append(Line(f"{label}: disk {name}", FIX, f"{disk['path']}: {disk['free_gb']} GB free, less than "
                              f"{min_free_gb:g} GB. Fix: free space there, or point the jobs elsewhere"))
        else:
            lines.append(Line(f"{label}: disk {name}", OK, f"{disk['path']}: {disk['free_gb']} GB free, seen from the node"))
    return lines


def preflight_profile(profile: Profile, part: Partition) -> Profile:
    """The profile with the preflight step on `part`, for at most PREFLIGHT_TIME_S (the partition's limit)."""
    limit = min(PREFLIGHT_TIME_S, time_seconds(part.max_time) if part.max_time else PREFLIGHT_TIME_S)
    steps = {**profile.step_slurm, "preflight": {"partition": part.key,
                                                  "time": f"{limit // 3600:02d}:{limit % 3600 // 60:02d}:{limit % 60:02d}"}}
    return dataclasses.replace(profile, step_slurm=steps)


def job_lines(profile: Profile, jobs_dir: Path, timeout: float, min_free_gb: float) -> list[Line]:
    """One 1-GPU job per GPU partition (the default partition where the profile has none), submitted
    together, watched together, each job's report turned into lines."""
    from workshop.slurm.jobs import submit
    from workshop.slurm.node_check import MARK
    from workshop.slurm.watch import wait_all

    parts = [p for p in profile.partitions.values() if p.gpus_per_node] or [profile.partitions[profile.partition]]
    jobs, lines = {}, []
    for part in parts:
        label = part.name or part.key
        try:
            jobs[part.key] = submit("preflight", profile=preflight_profile(profile, part), jobs_dir=jobs_dir,
                                    name=f"workshop-preflight-{part.key}", resubmit=True)
        except (ConfigError, RuntimeError, OSError) as e:
            lines.append(Line(f"{label}: job", FIX, f"not submitted: {e}"))
    if jobs:
        names = ", ".join(f"{j.job_id} ({k})" for k, j in jobs.items())
        print(f"[preflight] jobs {names} submitted; waiting for them (at most {timeout:.0f} s)", flush=True)
        wait_all(jobs, timeout=timeout, quiet=True)
    for key, job in jobs.items():
        part = profile.partitions[key]
        label = part.name or part.key
        state = job.state()
        report_line = next((ln for ln in job.tail(400).splitlines() if ln.startswith(MARK + " ")), None)
        if not state.finished:
            job.cancel()
            lines.append(Line(f"{label}: job", FIX, f"job {job.job_id} was still {state.value} after {timeout:.0f} s "
                              f"({job.reason or 'no reason given'}); cancelled. Fix: run preflight when the partition "
                              "has room (or with --timeout), and check the request fits (`squeue -j ID -o %r`)"))
            continue
        if report_line is None:
            lines.append(Line(f"{label}: job", FIX, f"job {job.job_id} {state.value} without a report "
                              f"({job.reason or 'see its log'}): {job.log_path}. Fix: read the log's end "
                              f"(`workshop logs {job.job_id} --jobs-dir {jobs_dir}`)"))
            continue
        report = json.loads(report_line.split(" ", 1)[1])
        lines.append(Line(f"{label}: job", OK, f"job {job.job_id} on {report['host']}: {state.value}"
                          + (f" in {job.elapsed():.0f} s" if job.elapsed() is not None else "")))
        lines += node_lines(label, report, profile, part, min_free_gb)
    return lines


# ------------------------------------------------------------------------------ two nodes, as a student's gate

def multi_node_partitions(profile: Profile) -> list[Partition]:
    """The partitions a 2-node job may run on: GPU partitions (the default one on a CPU profile) whose jobs may
    span 2 nodes (max_nodes 0 = no limit known) and that have 2 (nodes 0 = not counted)."""
    parts = [p for p in profile.partitions.values() if p.gpus_per_node] or [profile.partitions[profile.partition]]
    return [p for p in parts if p.max_nodes != 1 and p.nodes != 1]


def two_node_profile(profile: Profile, part: Partition) -> Profile:
    """The students' gate itself on `part` (the bandwidth step: every GPU of 2 nodes, the profile's sizes up to
    `[bandwidth] max_bytes`), within the preflight's time, with NCCL's transport lines; its threshold only on the
    partition the students' gate runs on (`gate_threshold`): another fabric is not held to it."""
    limit = min(PREFLIGHT_TIME_S, time_seconds(part.max_time) if part.max_time else PREFLIGHT_TIME_S)
    steps = {**profile.step_slurm, "bandwidth": {"partition": part.key,
                                                  "time": f"{limit // 3600:02d}:{limit % 3600 // 60:02d}:{limit % 60:02d}"}}
    env = {**profile.env, "NCCL_DEBUG": "INFO"}          # the transport lines: IB or a fallback to sockets
    return dataclasses.replace(profile, step_slurm=steps, env=env, min_busbw_GBps=gate_threshold(profile, part))


def gate_threshold(profile: Profile, part: Partition) -> float:
    """`[bandwidth] min_busbw_GBps` where the students' gate runs (the bandwidth step's partition), else 0."""
    return profile.min_busbw_GBps if profile.partition_for("bandwidth").key == part.key else 0.0


def two_node_verdict(log_text: str, state: str, part: Partition, threshold: float = 0.0) -> tuple[str, str]:
    """(status, text) of one 2-node gate's log: ok with its bus bandwidth against the gate's `threshold` (GB/s),
    or the failure and the field that fixes it."""
    from workshop.results.diagnose import diagnose
    from workshop.results.logs import load

    parsed = load(log_text)
    bw = parsed.bandwidth
    kinds = {f.kind: f for f in diagnose(parsed)}
    # a job whose all_reduce table passed and that COMPLETED met at the rendezvous: the launchers' shutdown of the
    # c10d store often logs a RendezvousConnectionError warning after the table (the node that left last finds
    # the store gone), which is not a failure
    completed = state == "COMPLETED" and bw is not None and bool(bw.rows) and not bw.failures
    if "rendezvous" in kinds and not completed:
        return FIX, (f"the two nodes' launchers did not meet at the rendezvous (slurm/templates/rendezvous.sh: the "
                     f"head node's NodeAddr, a port 20000 + job id mod the room below the ephemeral range): "
                     f"{kinds['rendezvous'].evidence[0].strip()[:160]}. Fix: open that port range between the compute "
                     "nodes, or set [run] rdzv_endpoint to a HOST:PORT every node reaches")
    if re.search(r"Bootstrap : no socket interface found|no socket interface|SOCKET_IFNAME", log_text) or (
            "nccl_error" in kinds and re.search(r"socket|ifname|interface", log_text, re.I)):
        return FIX, (f"NCCL found no usable interface between the nodes. Fix: [nccl] socket_ifname (per partition: "
                     f"[nccl.partitions.{part.key}]) to the interface `ip -br link` shows on both nodes")
    if threshold and bw is not None and bw.rows and bw.gate_line_GBps is not None and bw.gate_line_GBps < threshold:
        return FIX, (f"{_gate_figure(bw)}, below the gate's {threshold:g} GB/s ([bandwidth] min_busbw_GBps): every "
                     "student's gate would fail here. Fix: the fabric first ([nccl] ib_hca, socket_ifname, the network "
                     "plugin; `workshop diagnose` on the log), or a threshold this fabric's line rate supports")
    if bw is None or not bw.rows or state != "COMPLETED" or bw.failures:
        why = "; ".join(f.title for f in kinds.values()) or f"the job ended {state} without the all_reduce table"
        return FIX, f"{why}. Fix: read the log (`workshop diagnose`), then [nccl] and the rendezvous as above"
    hosts = sorted(set(bw.hosts))
    if (bw.n_nodes or len(hosts)) < 2:
        return FIX, f"the all_reduce ran on {', '.join(hosts) or 'one node'} only. Fix: the job must span 2 nodes"
    figure = _gate_figure(bw)
    if part.gpus_per_node and bw.network and bw.network.lower().startswith("socket"):
        return FIX, (f"{figure}, over NCCL's socket transport (NET/Socket), not the fabric. Fix: [nccl] ib_hca (per "
                     f"partition: [nccl.partitions.{part.key}]) to the HCAs `ibv_devinfo -l` lists, or the network plugin")
    against = (f", at least the gate's {threshold:g} GB/s ([bandwidth] min_busbw_GBps)" if threshold else
               ", no threshold here ([bandwidth] min_busbw_GBps holds the gate's partition only, where set)")
    return OK, figure + (f", network {bw.network}" if bw.network else "") + against


def _gate_figure(bw: Any) -> str:
    """Ranks, hosts and the bus bandwidth at the largest message (the gate line's figure where the log has it)."""
    largest = max(bw.rows, key=lambda r: r.size_bytes)
    busbw = bw.gate_line_GBps if bw.gate_line_GBps is not None else largest.busbw_GBps
    return (f"{bw.n_ranks or 2} ranks on {', '.join(sorted(set(bw.hosts)))}, bus bandwidth {busbw:.2f} GB/s at "
            f"{largest.size_bytes / 2**20:g} MB")


def two_node_lines(profile: Profile, jobs_dir: Path, timeout: float) -> list[Line]:
    """One 2-node gate per multi-node partition, as a student's notebook 05 submits it (every GPU of both nodes,
    the course's batch script and rendezvous, its sizes and threshold): checked the week before."""
    from workshop.slurm.jobs import submit
    from workshop.slurm.watch import wait_all

    jobs, lines = {}, []
    for part in multi_node_partitions(profile):
        label = f"{part.name or part.key}: 2 nodes"
        try:
            jobs[part.key] = submit("bandwidth", profile=two_node_profile(profile, part), jobs_dir=jobs_dir,
                                    overrides={"nodes": 2},
                                    name=f"workshop-preflight-2nodes-{part.key}", resubmit=True)
        except (ConfigError, RuntimeError, OSError) as e:
            lines.append(Line(label, FIX, f"not submitted: {e}"))
    if jobs:
        print(f"[preflight] 2-node jobs {', '.join(f'{j.job_id} ({k})' for k, j in jobs.items())} submitted", flush=True)
        wait_all(jobs, timeout=timeout, quiet=True)
    for key, job in jobs.items():
        part = profile.partitions[key]
        label = f"{part.name or part.key}: 2 nodes"
        state = job.state()
        if not state.finished:
            job.cancel()
            lines.append(Line(label, FIX, f"job {job.job_id} was still {state.value} after {timeout:.0f} s; cancelled. "
                              "Fix: run preflight when two nodes are free (or with --timeout)"))
            continue
        try:
            text = job.log_path.read_text(errors="replace")
        except OSError as e:
            lines.append(Line(label, FIX, f"job {job.job_id} {state.value}, no log ({e})"))
            continue
        status, verdict = two_node_verdict(text, state.value, part, gate_threshold(profile, part))
        lines.append(Line(label, status, f"job {job.job_id}: {verdict}"))
    return lines


def preflight(profile: Profile, jobs_dir: Path, timeout: float = 900, min_free_gb: float = MIN_FREE_GB) -> list[Line]:
    user = getpass.getuser()
    lines = [Line("profile", OK, f"{profile.source} ({profile.backend} backend)")]
    if profile.backend == "slurm":
        try:
            found = sinfo_partitions(slurm(["sinfo", "-h", "-a", "-o", "%R|%a|%l|%c|%m|%G|%D"]))
        except RuntimeError as e:
            return lines + [Line("slurm", FIX, f"{e}. Fix: run preflight on a login node of the cluster")]
        lines += partition_lines(profile, found)
        lines.append(account_line(profile, user))
        lines += [x for x in (qos_line(profile),) if x is not None]
        lines += limit_lines(profile, user, slurm)
        lines.append(reservation_line(profile, user))
        lines.append(session_line(profile, found))
        lines += [x for x in (gate_session_line(profile),) if x is not None]
    else:
        lines.append(Line("slurm", INFO, "backend local: no Slurm to check; the node job runs on this machine"))
    lines += job_lines(profile, jobs_dir, timeout, min_free_gb)
    if profile.backend == "slurm":
        lines.append(submit_from_job_line(profile, jobs_dir, timeout))
    return lines + two_node_lines(profile, jobs_dir, timeout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="workshop preflight", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default=None, help="site profile (name or .toml path)")
    ap.add_argument("--jobs-dir", type=Path, default=Path("preflight-jobs"),
                    help="where the check jobs' folders go (default ./preflight-jobs); its free disk is checked")
    ap.add_argument("--timeout", type=float, default=900, help="seconds to wait for the jobs (default 900)")
    ap.add_argument("--min-free-gb", type=float, default=MIN_FREE_GB, help="free disk a job folder needs (default 10)")
    args = ap.parse_args(argv)
    try:
        profile = load_profile(args.profile)
    except ProfileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    lines = preflight(profile, args.jobs_dir, args.timeout, args.min_free_gb)
    print(table(lines, f"workshop preflight: profile {profile.name}"))
    return exit_code(lines)


if __name__ == "__main__":
    sys.exit(main())
