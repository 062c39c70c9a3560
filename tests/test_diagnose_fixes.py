"""`workshop diagnose`: each failure kind's one change, asserted by what it tells the student to change
(tests/test_diagnose.py holds that each kind is found; here, that its advice is the right advice)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.logs_fixtures import LOGS
from workshop.results.diagnose import Finding, diagnose, main
from workshop.results.logs import parse_text

FIXES = {
    "cuda_oom.log": ("cuda_oom", "lower batch_size to half and double grad_acc (same global batch), or switch to "
                     "full_shard / enable activation_checkpointing"),
    "nccl_watchdog.log": ("nccl_timeout", "find why the silent rank stopped (its node's own output; on a live hang "
                          "`py-spy dump --pid` shows where it waits) and fix that; if it recurs on one node, exclude "
                          "it (#SBATCH --exclude=NODE) and tell the cluster staff; if none stalled, run `workshop "
                          "bandwidth` on the same nodes to test the network"),
    "nccl_error.log": ("nccl_error", "rerun with NCCL_DEBUG=INFO and check NCCL_SOCKET_IFNAME / the InfiniBand "
                       "settings in the course's env file, then test with `workshop bandwidth`"),
    "rendezvous_failure.log": ("rendezvous", "set MASTER_ADDR to the first node of the job (`scontrol show hostnames "
                               "$SLURM_JOB_NODELIST | head -1`), a free MASTER_PORT, and --nnodes equal to the job's "
                               "node count"),
    "slurm_timeout.log": ("time_limit", "raise #SBATCH --time (or --max-steps / fewer epochs so it ends in time)"),
    "slurm_cancelled.log": ("cancelled", "nothing broke: resubmit when ready (check `workshop status` for who "
                            "cancelled it)"),
    "slurm_node_failure.log": ("node_failure", "resubmit, excluding the node (#SBATCH --exclude=NODE) and tell the "
                               "cluster staff"),
    "slurm_preempted.log": ("preempted", "resubmit (add #SBATCH --requeue to restart automatically)"),
    "slurm_oom_kill.log": ("host_oom", "ask for more memory (#SBATCH --mem=0 or --mem-per-gpu), or turn offload off "
                           "/ load the model on fewer ranks at once"),
    "hub_offline.log": ("hub_offline", "fill the shared HF_HOME once on a login node (`workshop prefetch --profile "
                        "<site>`: the model and SQuAD, then a read-only offline load), or use model=bloom-560m-random "
                        "/ tiny, which need no Hub"),
    "config_error.log": ("config_error", "at least 1; lower it (not to 0) when memory is short, and raise grad_acc"),
    "real_bandwidth_gate_failed_2proc.log": ("bandwidth_gate", "check that NCCL uses the fast network "
                                             "(NCCL_SOCKET_IFNAME / NCCL_IB_HCA in the env file); if it persists, "
                                             "report the node list to the cluster staff"),
}


@pytest.mark.parametrize("name", FIXES)
def test_each_kind_says_what_to_change(name: str) -> None:
    kind, fix = FIXES[name]
    (first, *_) = diagnose(LOGS / name)
    assert (first.kind, first.fix) == (kind, fix)


def test_each_kind_is_one_finding() -> None:
    """One cause, one change: the other ranks' consequences and Slurm's own step lines add no finding."""
    for name, (kind, _) in FIXES.items():
        assert [f.kind for f in diagnose(LOGS / name)] == [kind], name


def test_a_preempted_job() -> None:
    """A higher-priority job took the nodes: Slurm's own words (slurmstepd, `DUE TO PREEMPTION`)."""
    (f,) = diagnose(LOGS / "slurm_preempted.log")
    assert f.title == "The job was preempted by a higher-priority job"
    assert f.evidence == ["slurmstepd: error: *** JOB 4245 ON n1 CANCELLED AT 2026-11-22T12:14:31 DUE TO PREEMPTION ***"]
    assert "--requeue" in f.fix and "resubmit" in f.fix


def test_titles_carry_the_logs_own_figures() -> None:
    (oom,) = diagnose(LOGS / "cuda_oom.log")
    assert oom.title == ("CUDA out of memory on rank 0 during step 3 (step 2 finished): tried 3.83 GiB, total "
                         "79.19 GiB, allocated 73.52 GiB, free 2.01 GiB")
    (wd,) = diagnose(LOGS / "nccl_watchdog.log")
    assert wd.title == ("A collective timed out after 600 s in _ALLGATHER_BASE at step 13: rank 1 waited for a rank "
                        "that never joined")
    (rdzv,) = diagnose(LOGS / "rendezvous_failure.log")
    assert rdzv.title == "Rendezvous failed: the processes could not meet at MASTER_ADDR (n1:29500)"
    (limit,) = diagnose(LOGS / "slurm_timeout.log")
    assert limit.title == "Slurm stopped the job at its time limit at step 118/400"
    (cfg,) = diagnose(LOGS / "config_error.log")
    assert cfg.title == "Config error in field 'batch_size': must be >= 1, got 0"


def test_an_oom_before_the_first_step_and_with_a_known_batch() -> None:
    text = ("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 1 has a total "
            "capacity of 31.74 GiB of which 100.00 MiB is free.\n--batch-size 6\n")
    (f,) = diagnose(parse_text(text))
    assert f.title == ("CUDA out of memory on rank 1 before the first optimizer step: tried 0.5 GiB, total 31.74 GiB, "
                       "free 0.1 GiB")
    assert f.fix.startswith("lower batch_size to 3 and double grad_acc")
    assert diagnose(parse_text(text.replace("6", "1")))[0].fix.startswith("lower batch_size to 1 and")


def test_a_task_exit_without_a_cause_points_at_stderr() -> None:
    (f,) = diagnose(parse_text("srun: error: n3: task 2: Exited with exit code 1\n"))
    assert f.kind == "task_exit" and f.fix == "look at the job's stderr file (#SBATCH --error) for the traceback"
    (g,) = diagnose(parse_text("[workshop] step 1/10 | loss 5.0\n"))
    assert g.kind == "unfinished" and g.fix == ("check whether the job is still running (`workshop status`); if not, "
                                                "read the end of its stderr file")


def test_a_bandwidth_test_that_returned_wrong_values() -> None:
    line = "# FAILED: all_reduce returned wrong values on 2 rank(s)"
    (f,) = diagnose(parse_text(line + "\n"))
    assert (f.kind, f.title, f.evidence) == ("bandwidth_gate", "all_reduce returned wrong values: the collective "
                                             "itself is broken", ["all_reduce returned wrong values on 2 rank(s)"])
    assert f.fix == "rerun on other nodes (#SBATCH --exclude) and send the log and node list to the cluster staff"


def test_more_titles_and_facts() -> None:
    (node,) = diagnose(LOGS / "slurm_node_failure.log")
    assert node.title == "A node failed (hardware or network): Slurm ended the job"
    (task,) = diagnose(parse_text("srun: error: n3: task 2: Exited with exit code 1\n"))
    assert task.title == "A task exited with an error and the log says no more about why"
    (limit,) = diagnose(parse_text("slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2026-11-22T10:59:31 DUE TO "
                                   "TIME LIMIT ***\n"))
    assert limit.title == "Slurm stopped the job at its time limit"           # no step line: no step named
    text = ("Traceback (most recent call last):\n  File \"b.py\", line 9, in f\n    1 / 0\n"
            "ZeroDivisionError: division by zero\n")
    (tb,) = diagnose(parse_text(text))
    assert tb.facts == {"exception": "ZeroDivisionError", "message": "division by zero"}
    (hub,) = diagnose(parse_text("huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files\n"))
    assert hub.kind == "hub_offline"
    rdzv = "[c10d] The client socket has failed to connect to [n1]:29500 (errno: 111 - Connection refused)."
    (three,) = diagnose(parse_text("\n".join([rdzv.replace("n1", f"n{i}") for i in (1, 2, 3)]) + "\n"))
    assert len(three.evidence) == 3 and "[n3]" in three.evidence[-1]      # the first two and the last


def with_world_size(name: str, world_size: int) -> str:
    """A fixture log with the run's config record (WORKSHOP_RUN_ARGS) naming its world size."""
    return (LOGS / name).read_text() + f'WORKSHOP_RUN_ARGS {{"config": {{"world_size": {world_size}}}}}\n'


def test_the_ranks_that_never_reported_the_timeout_are_the_stalled_ones() -> None:
    """With the world size known, every rank that did not report the timeout is named as stalled, one or many."""
    (two,) = diagnose(parse_text(with_world_size("nccl_watchdog.log", 2)))
    assert two.title.endswith(": rank 1 waited for a rank that never joined; rank 0 never reported it: it stalled "
                              "(hung, stopped, or stuck in I/O)")
    (three,) = diagnose(parse_text(with_world_size("nccl_watchdog.log", 3)))
    assert three.title.endswith("; ranks 0, 2 never reported it: they stalled (hung, stopped, or stuck in I/O)")
    assert three.facts == {"timeout_s": 600.0, "op": "_ALLGATHER_BASE", "waiting_ranks": [1], "silent_ranks": [0, 2],
                           "last_step": 12}


def test_several_waiting_ranks_are_named_and_two_of_their_lines_quoted() -> None:
    """Ranks 0 and 2 both report NCCL's timeout (rank 1 stalled): both are named as waiting, and the evidence quotes
    the first two watchdog lines, not every rank's."""
    line = next(ln for ln in (LOGS / "nccl_watchdog.log").read_text().splitlines() if "Watchdog caught" in ln)
    lines = [line.replace("1: [rank1]", f"{r}: [rank{r}]").replace("[Rank 1]", f"[Rank {r}]") for r in (0, 2, 0)]
    (f,) = diagnose(parse_text("\n".join(lines) + "\n"))
    assert f.title.endswith(": ranks 0, 2 waited for a rank that never joined")
    assert f.evidence == [ln.split("]:", 1)[1] for ln in lines[:2]]          # without the srun and torch prefixes


def test_the_waiting_rank_is_read_from_nccls_own_rank_tag() -> None:
    """NCCL's `[Rank N]` names the waiting rank even where the line has no srun label or torch rank prefix."""
    line = next(ln for ln in (LOGS / "nccl_watchdog.log").read_text().splitlines() if "Watchdog caught" in ln)
    bare = line.split("]:", 1)[1].replace("[Rank 1]", "[Rank 3]")       # `[E1122 ...] [Rank 3] Watchdog caught ...`
    (f,) = diagnose(parse_text(bare + "\n"))
    assert f.facts["waiting_ranks"] == [3] and f.title.endswith(": rank 3 waited for a rank that never joined")


def test_a_log_in_its_run_folder_gets_the_runs_batch_size(tmp_path: Path) -> None:
    """A job log saved beside its run_args.json: the OOM advice halves that run's batch size; an unreadable
    run_args.json is ignored."""
    shutil.copy(LOGS / "cuda_oom.log", tmp_path / "job.out")
    (tmp_path / "run_args.json").write_text(json.dumps({"config": {"batch_size": 8}}))
    (f,) = diagnose(tmp_path / "job.out")
    assert f.fix.startswith("lower batch_size to 4 and double grad_acc")
    (tmp_path / "run_args.json").write_text("{not json")
    (g,) = diagnose(tmp_path / "job.out")
    assert g.fix.startswith("lower batch_size to half and double grad_acc")


def test_more_exact_titles_and_evidence() -> None:
    """The wording a student reads for a cancelled job, a rendezvous without an address, a missing node, and at
    most two quoted task exits."""
    (cancelled,) = diagnose(LOGS / "slurm_cancelled.log")
    assert cancelled.title == "The job was cancelled (scancel by you or an admin)"
    (rdzv,) = diagnose(parse_text("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"))
    assert rdzv.title == "Rendezvous failed: the processes could not meet at MASTER_ADDR"
    (node,) = diagnose(parse_text("# FAILED: expected 2 node(s), but the ranks ran on 1 host(s) (n1)\n"))
    assert (node.title, node.fix) == ("Not every node joined the bandwidth test", "launch one torchrun per node "
                                      "(srun --ntasks-per-node=1) with --nnodes equal to #SBATCH --nodes")
    exits = "".join(f"srun: error: n{i}: task {i}: Exited with exit code 1\n" for i in (1, 2, 3))
    (task,) = diagnose(parse_text(exits))
    assert task.evidence == exits.splitlines()[:2]


def test_a_missing_log_is_named_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    """`workshop diagnose` on a path that does not exist: exit 2 and what to give instead."""
    assert main(["/nonexistent/job.out"]) == 2
    assert capsys.readouterr() == ("", "workshop diagnose: /nonexistent/job.out does not exist; give the job's .out "
                                       "file or its run folder\n")


GLOO_TIMEOUT = LOGS / "real_gloo_timeout_stopped_rank_2proc.log"


def test_a_gloo_timeout_names_the_collective_the_waiting_rank_was_in() -> None:
    """A real CPU run whose rank 1 was stopped: the timeout, the collective from rank 0's own c10d frame, the step,
    the waiting and the stalled rank."""
    (f,) = diagnose(GLOO_TIMEOUT)
    assert f.kind == "collective_timeout"
    assert f.title == ("A collective timed out after 10 s in all_gather_single at step 3: rank 0 waited for a rank "
                       "that never joined; rank 1 never reported it: it stalled (hung, stopped, or stuck in I/O)")
    assert f.facts == {"timeout_s": 10.0, "op": "all_gather_single", "waiting_ranks": [0], "silent_ranks": [1],
                       "last_step": 2}


def test_another_ranks_interleaved_frame_is_not_the_waiting_ranks_collective() -> None:
    """Ranks print their tracebacks into one log: a frame of rank 1's just before rank 0's timeout names rank 1's
    call, not the collective rank 0 timed out in."""
    lines = GLOO_TIMEOUT.read_text().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if "Timed out waiting" in ln)
    other = '[rank1]:   File "/x/torch/distributed/distributed_c10d.py", line 2806, in broadcast\n'
    (f,) = diagnose(parse_text("".join(lines[:at] + [other] + lines[at:])))
    assert f.facts["op"] == "all_gather_single"


OOM_LINE = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
STEP_LINE = "[workshop] step {n}/10 | loss 6.5 | 8 samples/s | 1802 tok/s | mem n/a | mfu n/a"


@pytest.mark.parametrize(("text", "last"), [
    (STEP_LINE.format(n=1) + "\n" + STEP_LINE.format(n=2) + "\n" + OOM_LINE, 2),      # the course's step lines
    ('WORKSHOP_METRICS {"kind": "train", "step": 4, "loss": 6.5}\n' + OOM_LINE, 4),     # its metrics records
    ("{'loss': 6.9, 'epoch': 0.17}\n{'loss': 6.8, 'epoch': 0.33}\n" + OOM_LINE, 2),     # Trainer's dicts, counted
    (STEP_LINE.format(n=1) + "\n" + STEP_LINE.format(n=2) + OOM_LINE, 2),             # another rank spliced in
    ('WORKSHOP_METRICS {"kind": "train", "step": 3, "loss": 6.5}' + OOM_LINE, 3),
    (OOM_LINE + 'WORKSHOP_METRICS {"kind": "train", "step": 5, "loss": 6.5}\n' + STEP_LINE.format(n=6) + "\n", None),
])
def test_the_step_an_oom_happened_in_is_the_last_one_reported_before_it(text: str, last: int | None) -> None:
    """The last step the log reported on or before the OOM's line (a step line, a metrics record, or the count of
    Trainer's dicts); what ranks reported after it does not count."""
    (f,) = diagnose(parse_text(text))
    assert f.facts["last_step"] == last
    assert ("before the first optimizer step" in f.title) == (last is None)


def test_a_timeout_line_without_its_details_still_names_the_waiting_rank() -> None:
    """A gloo timeout with no c10d frame before it (a log cut short) and NCCL's heartbeat monitor, whose watchdog line
    names no work: the finding names what it knows, no collective and no time it does not."""
    error = next(ln for ln in GLOO_TIMEOUT.read_text().splitlines() if "Timed out waiting" in ln)
    (gloo,) = diagnose(parse_text(error + "\n"))
    assert gloo.title == "A collective timed out after 10 s: rank 0 waited for a rank that never joined"
    # ProcessGroupNCCL's heartbeat monitor line (torch 2.x; its middle sentences left out), as users' logs quote it
    heartbeat = ("[rank0]:[E1122 10:40:01.000000000 ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
                 "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
                 "collectives. If you suspect the watchdog is not actually stuck and a longer timeout would help, you "
                 "can either increase the timeout (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) to a larger value or disable the "
                 "heartbeat monitor (TORCH_NCCL_ENABLE_MONITORING=0).\n")
    (nccl,) = diagnose(parse_text(heartbeat))
    assert nccl.title == "A collective timed out: rank 0 waited for a rank that never joined"
    assert (nccl.facts["timeout_s"], nccl.facts["op"]) == (None, None)


def test_the_command_prints_each_finding_or_that_all_is_well(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`workshop diagnose LOG`: a count and each finding rendered (exit 1), or one line saying the log shows success
    (exit 0); an unknown option's usage error names the command."""
    assert main([str(LOGS / "slurm_cancelled.log")]) == 1
    (f,) = diagnose(LOGS / "slurm_cancelled.log")
    assert capsys.readouterr().out == f"{LOGS / 'slurm_cancelled.log'}: 1 finding(s)\n{f.render()}\n"
    assert main([str(LOGS / "real_tiny_full_shard_2proc.log")]) == 0
    assert capsys.readouterr().out == f"{LOGS / 'real_tiny_full_shard_2proc.log'}: the log shows success; nothing to fix.\n"
    with pytest.raises(SystemExit):
        main(["--no-such-option"])
    assert capsys.readouterr().err.startswith("usage: workshop diagnose [-h] log\n")



def test_slurm_and_rendezvous_evidence_quotes_the_jobs_own_lines() -> None:
    """One line for the job's time limit or cancellation (not its step's too), two of a node failure's; a rendezvous
    failure quotes its first two lines and, when there are more, the last."""
    (limit,) = diagnose(LOGS / "slurm_timeout.log")
    assert len(limit.evidence) == 1 and "*** JOB 4242 ON n1" in limit.evidence[0]
    (cancelled,) = diagnose(LOGS / "slurm_cancelled.log")
    assert len(cancelled.evidence) == 1 and "*** JOB 4243 ON n1" in cancelled.evidence[0]
    (node,) = diagnose(parse_text((LOGS / "slurm_node_failure.log").read_text() + "srun: error: Node failure on n3\n"))
    assert node.evidence == ["srun: error: Node failure on n2", node.evidence[1]] and "n3" not in node.evidence[1]
    two = ["[c10d] The client socket has failed to connect to [n1]:29500 (errno: 111 - Connection refused).",
           "RuntimeError: Timed out after 901 seconds waiting for clients. 1/2 clients joined."]
    (rdzv,) = diagnose(parse_text("\n".join(two) + "\n"))
    assert rdzv.evidence == two
    (older,) = diagnose(parse_text(two[1] + "\n"))             # torch's store timeout on its own
    assert older.kind == "rendezvous" and older.title == "Rendezvous failed: the processes could not meet at MASTER_ADDR"


def test_a_slow_bandwidth_test_is_named_once_per_gate_line() -> None:
    """Each gate failure line of an older bandwidth test (at most two) is one finding: below the threshold, not
    broken."""
    gate = [f"FAIL: bus bandwidth {v} GB/s is below the 20 GB/s gate" for v in (11.03, 12.5, 13.0)]
    found = diagnose(parse_text("\n".join(gate) + "\n"))
    assert [f.evidence for f in found] == [[gate[0]], [gate[1]]]
    assert found[0].title == "The bandwidth self-test is below its threshold: training would run, but slowly"


def test_a_gloo_timeout_is_not_sent_to_the_flight_recorder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gloo's dumps lack the group names torchfrtrace needs (torch 2.13): a CPU run keeps the log's diagnosis even with
    dumps beside its log."""
    import workshop.results.diagnose as diagnose_module

    (tmp_path / "flight_recorder").mkdir()
    (tmp_path / "flight_recorder" / "rank_0").write_bytes(b"")
    shutil.copy(GLOO_TIMEOUT, tmp_path / "job.out")
    monkeypatch.setattr(diagnose_module, "analyse_flight_recorder", lambda folder: pytest.fail("analyser run on gloo"))
    (f,) = diagnose(tmp_path / "job.out")
    assert f.kind == "collective_timeout" and "flight_recorder" not in f.facts


def test_a_run_that_did_not_finish_quotes_the_logs_last_lines() -> None:
    """No summary, no final record and no error: the finding says so and quotes the last three lines (or that the log
    is empty)."""
    lines = [STEP_LINE.format(n=n) for n in (1, 2, 3, 4)]
    (f,) = diagnose(parse_text("\n".join(lines) + "\n"))
    assert (f.kind, f.title) == ("unfinished", "The run did not finish: no summary and no final Trainer record")
    assert f.evidence == lines[-3:]
    (empty,) = diagnose(parse_text(""))
    assert empty.evidence == ["(empty log)"]


def test_the_logs_own_config_record_wins_over_a_file_beside_it(tmp_path: Path) -> None:
    """A log that printed its run's config (WORKSHOP_RUN_ARGS) is advised from it, not from another run_args.json that
    happens to lie beside it."""
    text = (LOGS / "cuda_oom.log").read_text() + 'WORKSHOP_RUN_ARGS {"config": {"batch_size": 16}}\n'
    (tmp_path / "job.out").write_text(text)
    (tmp_path / "run_args.json").write_text(json.dumps({"config": {"batch_size": 8}}))
    (f,) = diagnose(tmp_path / "job.out")
    assert f.fix.startswith("lower batch_size to 8 and double grad_acc")


def test_a_legacy_oom_message_gives_every_figure() -> None:
    """torch 1.x's `(GPU 0; … total capacity; … already allocated; … free; …)` wording: each figure read, in GiB."""
    (f,) = diagnose(LOGS / "cuda_oom_legacy.log")
    assert f.facts == {"tried_gib": 1.91, "total_gib": 15.78, "allocated_gib": 13.2, "free_gib": 1.02, "last_step": 1}


def test_host_memory_and_offline_hub_titles() -> None:
    """The words a student reads for Slurm's cgroup OOM kill and for a Hub that cannot be reached."""
    (host,) = diagnose(LOGS / "slurm_oom_kill.log")
    assert host.title == "Host memory exhausted: Slurm's cgroup killed a process (CPU RAM, not GPU memory)"
    (hub,) = diagnose(LOGS / "hub_offline.log")
    assert hub.title == ("The model or tokenizer was not on disk and the Hub cannot be reached (compute nodes are "
                         "offline)")


def test_a_python_error_is_named_by_its_class_and_its_message_cut_at_200() -> None:
    """A traceback after the run's own lines: a dotted exception is named by its class alone, a long message cut at
    200 characters in the title."""
    message = "Expecting value: " + "x" * 250
    text = (STEP_LINE.format(n=1) + '\nTraceback (most recent call last):\n  File "r.py", line 4, in <module>\n'
            f"    json.loads(s)\njson.decoder.JSONDecodeError: {message}\n")
    (f,) = diagnose(parse_text(text))
    assert f.title == f"Python error JSONDecodeError: {message[:200]}"
    assert f.facts == {"exception": "json.decoder.JSONDecodeError", "message": message}



def test_the_rendered_finding_a_student_reads() -> None:
    """`* title`, the evidence lines indented and cut at 300 characters, then the change to make."""
    f = Finding("A title", ["  first line  ", "y" * 400], "do this", "kind")
    assert f.render() == f"* A title\n  evidence:\n    first line\n    {'y' * 300}\n  change: do this"


@pytest.mark.parametrize(("message", "title", "facts"), [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 100.00 MiB. GPU 0 has a total capacity of 79.19 "
     "GiB of which 45.06 MiB is free. Of the allocated memory 700.00 MiB is allocated by PyTorch, and 1.50 GiB is "
     "reserved by PyTorch but unallocated.",
     "CUDA out of memory before the first optimizer step: tried 0.1 GiB, total 79.19 GiB, allocated 0.68 GiB, free "
     "0.04 GiB", {"tried_gib": 0.1, "total_gib": 79.19, "allocated_gib": 0.68, "free_gib": 0.04, "last_step": None}),
    ("torch.OutOfMemoryError: CUDA out of memory.", "CUDA out of memory before the first optimizer step",
     {"last_step": None}),
])
def test_an_oom_in_mib_or_without_figures(message: str, title: str, facts: dict[str, object]) -> None:
    """Figures in MiB are given in GiB to two decimals; a message with no figures (and no rank prefix) gets a title
    with none."""
    (f,) = diagnose(parse_text(message + "\n"))
    assert (f.title, f.facts) == (title, facts)


def test_the_batch_size_an_env_line_names() -> None:
    """A batch script's `BATCH_SIZE=16` echo is the batch size the OOM advice halves."""
    (f,) = diagnose(parse_text((LOGS / "cuda_oom_legacy.log").read_text() + "BATCH_SIZE=16\n"))
    assert f.fix.startswith("lower batch_size to 8 and double grad_acc")


def test_a_host_oom_quotes_two_of_its_kill_events() -> None:
    """One cgroup OOM event per job step: the first two are quoted."""
    events = [f"slurmstepd: error: Detected 1 oom_kill event in StepId=4245.{n}. Some of your processes may have been "
              "killed by the cgroup out-of-memory handler." for n in (0, 1, 2)]
    (f,) = diagnose(parse_text("\n".join(events) + "\n"))
    assert f.kind == "host_oom" and f.evidence == events[:2]


WATCHDOG_EXCEPTION = ("[rank1]: torch.distributed.DistBackendError: [Rank 1] Watchdog caught collective operation timeout: "
                      "WorkNCCL(SeqNum=1841, OpType=_ALLGATHER_BASE, NumelIn=17476608, NumelOut=34953216, "
                      "Timeout(ms)=600000) ran for 600031 milliseconds before timing out.")


@pytest.mark.parametrize(("lines", "kinds"), [
    ([WATCHDOG_EXCEPTION], ["nccl_timeout"]),                      # the timeout raised in Python: not also an error
    ([WATCHDOG_EXCEPTION, "n1:1234:1290 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2 with error 12"],
     ["nccl_timeout", "nccl_error"]),                               # a network error beside the timeout is its own
    (["terminate called after throwing an instance of 'c10::DistBackendError'"], ["nccl_error"]),
    (["RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled cuda error, NCCL version 2.14.3"],
     ["nccl_error"]),
])
def test_an_nccl_error_is_told_apart_from_the_watchdogs_timeout(lines: list[str], kinds: list[str]) -> None:
    """The watchdog's own exception is the timeout, not a second cause; any other NCCL error line is one."""
    assert [f.kind for f in diagnose(parse_text("\n".join(lines) + "\n"))] == kinds


def test_an_nccl_error_quotes_three_lines() -> None:
    """Ranks repeat the same NCCL warning: three lines are quoted, under the error's own title."""
    lines = [f"n1:1234:1290 [{i}] NCCL WARN NET/IB : Got completion from peer 10.0.0.2 with error 12" for i in range(4)]
    (f,) = diagnose(parse_text("\n".join(lines) + "\n"))
    assert f.title == "NCCL communication error" and f.evidence == lines[:3]


@pytest.mark.parametrize("line", [
    "OSError: Cannot find the requested files in the disk cache and outgoing traffic has been disabled. To enable hf.co "
    "look-ups and downloads online, set 'local_files_only' to False.",
    "OSError: We couldn't connect to 'https://hf-mirror.com' to load this file, couldn't find it in the cached files.",
    "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded "
    "with url: /bigscience/bloom-560m/resolve/main/config.json",
])
def test_each_way_the_hub_says_it_cannot_be_reached(line: str) -> None:
    """huggingface_hub's offline cache miss, transformers' message for a mirror endpoint, requests' connection error."""
    (f,) = diagnose(parse_text(line + "\n"))
    assert f.kind == "hub_offline"


def test_an_offline_hub_quotes_two_lines() -> None:
    """Every rank fails to load the model: two of their lines are quoted."""
    lines = [f"huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files ({n})" for n in range(3)]
    (f,) = diagnose(parse_text("\n".join(lines) + "\n"))
    assert f.evidence == lines[:2]


def test_a_python_error_says_where_to_fix_it() -> None:
    """The change names the traceback's last frame (none when the traceback has no frame)."""
    text = ('Traceback (most recent call last):\n  File "b.py", line 9, in f\n    1 / 0\n'
            "ZeroDivisionError: division by zero\n")
    (tb,) = diagnose(parse_text(text))
    assert tb.fix == ('fix what the message says at File "b.py", line 9, in f; the other ranks\' errors are '
                      "consequences of this first one")
    (bare,) = diagnose(parse_text("Traceback (most recent call last):\nKeyError: 'model'\n"))
    assert bare.fix == "fix what the message says; the other ranks' errors are consequences of this first one"


def test_a_config_error_without_its_fix_says_to_fix_the_field() -> None:
    """A config error line without `. Fix: …`: the change is to fix the field it names."""
    (f,) = diagnose(parse_text("error: config field 'epochs': must be > 0, got -1\n"))
    assert (f.title, f.fix) == ("Config error in field 'epochs': must be > 0, got -1", "fix the value of epochs")


@pytest.mark.parametrize(("error", "kind"), [
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled system error", "nccl_error"),
    (WATCHDOG_EXCEPTION.removeprefix("[rank1]: "), "nccl_timeout"),
])
def test_an_nccl_failures_traceback_is_not_a_second_cause(error: str, kind: str) -> None:
    """The Python traceback that carries an NCCL error or timeout up is that failure, not another one."""
    text = f'Traceback (most recent call last):\n  File "t.py", line 5, in step\n    dist.all_reduce(x)\n{error}\n'
    assert [f.kind for f in diagnose(parse_text(text))] == [kind]
