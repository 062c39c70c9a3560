"""`workshop preflight`'s 2-node job: each multi-node partition gets the students' gate itself (every GPU of 2 nodes,
the course's rendezvous, the profile's sizes and threshold); its line is ok with the bus bandwidth against the
threshold, or names what failed (the rendezvous port, NCCL's interface, a fallback to sockets, a figure under the
threshold) and the profile field that fixes it. Read from real logs (tests/fixtures/logs);
the end-to-end run on the test cluster is tests/slurm/test_preflight_on_cluster.py's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from workshop.site.checklist import FIX, OK
from workshop.site.preflight import multi_node_partitions, two_node_profile, two_node_verdict
from workshop.slurm.profiles import load_profile

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
PASSED = (LOGS / "preflight_2nodes_local.out").read_text()
SITE = load_profile("example-hpc")
A100 = SITE.partitions["a100"]


def test_a_two_node_run_is_ok_with_its_bus_bandwidth() -> None:
    """The real local run: ranks on local-node1 and local-node2, the gate line's 0.905 GB/s at 8388608 B."""
    status, text = two_node_verdict(PASSED, "COMPLETED", load_profile("local").partitions["cpu"])
    assert status == OK and text == ("2 ranks on local-node1, local-node2, bus bandwidth 0.91 GB/s at 8 MB, no threshold "
                                     "here ([bandwidth] min_busbw_GBps holds the gate's partition only, where set)")
    status, text = two_node_verdict(PASSED, "COMPLETED", load_profile("local").partitions["cpu"], 0.9)
    assert status == OK and text.endswith("0.91 GB/s at 8 MB, at least the gate's 0.9 GB/s ([bandwidth] min_busbw_GBps)")


def test_a_gate_under_the_profiles_threshold_names_the_fabric_and_the_field() -> None:
    """The same log against the example site's 40 GB/s (its gate job, failing, is judged the same): 0.91 < 40."""
    for state in ("COMPLETED", "FAILED"):
        status, text = two_node_verdict(PASSED, state, A100, SITE.min_busbw_GBps)
        assert status == FIX and "0.91 GB/s at 8 MB, below the gate's 40 GB/s ([bandwidth] min_busbw_GBps)" in text
        assert "[nccl] ib_hca" in text


def test_a_completed_run_whose_shutdown_warns_of_the_rendezvous_is_ok() -> None:
    """The real cluster run: its table PASSED (0.462 GB/s at 8388608 B) and the job COMPLETED; the rendezvous
    error after it is the launchers' shutdown (a CI run first read it as a rendezvous that never met)."""
    log = (LOGS / "preflight_2nodes_cluster_shutdown_warning.out").read_text()
    assert "RendezvousConnectionError" in log and "# PASSED" in log
    status, text = two_node_verdict(log, "COMPLETED", load_profile("ci").partitions["debug"])
    assert status == OK and text.startswith("2 ranks on n1, n2, bus bandwidth 0.46 GB/s at 8 MB")
    status, _ = two_node_verdict(log, "FAILED", load_profile("ci").partitions["debug"])
    assert status == FIX                                 # the same log from a job Slurm calls failed is not ok


def test_a_rendezvous_that_never_met_names_the_port_and_the_field() -> None:
    status, text = two_node_verdict((LOGS / "rendezvous_failure.log").read_text(), "FAILED", A100)
    assert status == FIX and "rendezvous" in text and "port" in text and "[run] rdzv_endpoint" in text


def test_nccl_without_an_interface_names_socket_ifname_for_the_partition() -> None:
    log = "[job] start\nn1:12:12 [0] NCCL INFO Bootstrap : no socket interface found\nsrun: error: n1: task 0: Exited with exit code 1\n"
    status, text = two_node_verdict(log, "FAILED", A100)
    assert status == FIX and "[nccl] socket_ifname" in text and "[nccl.partitions.a100]" in text


def test_a_fallback_to_sockets_on_a_gpu_partition_names_ib_hca() -> None:
    """The same run's table, with NCCL saying it used its socket transport (NCCL_DEBUG=INFO's `Using network Socket`):
    the figure is there, and so is the fix, since a GPU partition's 2 nodes should talk over the fabric."""
    log = PASSED.replace("# Using devices", "n1:7:7 [0] NCCL INFO Using network Socket\n# Using devices", 1)
    status, text = two_node_verdict(log, "COMPLETED", A100)
    assert status == FIX and "NET/Socket" in text and "[nccl] ib_hca" in text and "0.91 GB/s" in text


def test_one_job_per_multi_node_partition_the_students_gate_itself() -> None:
    assert [p.key for p in multi_node_partitions(SITE)] == ["v100", "a100"]
    single = dataclasses.replace(A100, max_nodes=1)
    assert multi_node_partitions(dataclasses.replace(SITE, partitions={"a100": single, "v100": SITE.partitions["v100"]})) \
        == [SITE.partitions["v100"]]
    job_site = two_node_profile(SITE, A100)
    assert job_site.partition_for("bandwidth").key == "a100" and job_site.min_busbw_GBps == 40.0
    assert job_site.bandwidth_max_bytes == "256M" and job_site.env["NCCL_DEBUG"] == "INFO"
    from workshop.slurm.steps import step_config

    gate = step_config("bandwidth", job_site, {"nodes": 2})         # what two_node_lines submits
    assert (gate.nodes, gate.procs_per_node) == (2, 8)
    v100 = two_node_profile(SITE, SITE.partitions["v100"])   # not the students' gate's partition: not held to 40 GB/s
    assert v100.partition_for("bandwidth").key == "v100" and v100.min_busbw_GBps == 0.0


def test_nccl_settings_can_differ_per_partition(tmp_path: Path) -> None:
    """[nccl.partitions.v100] replaces [nccl]'s fields for jobs on the V100 nodes only; the A100 jobs keep the
    site's. The rendered batch scripts export each partition's own; a table for no partition is refused."""
    from workshop.slurm.jobs import prepare
    from workshop.slurm.profiles import PROFILES_DIR, ProfileError
    import pytest

    text = (PROFILES_DIR / "example-hpc.toml").read_text().replace(
        'instructor_jobs = "/shared/fsdp-workshop/instructor-jobs"', 'instructor_jobs = ""')
    site = tmp_path / "site.toml"
    site.write_text(text.replace("[nccl.variables]", '[nccl.partitions.v100]\nsocket_ifname = "eth0"\n'
                                 'variables = { NCCL_IB_DISABLE = "1" }\n\n[nccl.variables]'))
    v100 = prepare("baseline", profile=site, jobs_dir=tmp_path / "jobs").script
    a100 = prepare("multi_gpu", profile=site, jobs_dir=tmp_path / "jobs").script
    assert "export NCCL_SOCKET_IFNAME=eth0\n" in v100 and "export NCCL_IB_DISABLE=1\n" in v100
    assert "export NCCL_IB_HCA=mlx5\n" in v100                         # not replaced: the site's
    assert "export NCCL_SOCKET_IFNAME=ib0\n" in a100 and "NCCL_IB_DISABLE" not in a100
    site.write_text(text.replace("[nccl.variables]", '[nccl.partitions.h100]\nsocket_ifname = "eth0"\n\n[nccl.variables]'))
    with pytest.raises(ProfileError, match=r"nccl.partitions.h100.*one of v100, a100"):
        load_profile(site)
