"""Notebook 05 must not wait on its own session (issue 40, item 1): a profile whose JupyterLab sessions share
the nodes of the whole-node bandwidth gate is refused by the loader, naming the field and the fixes; the
test cluster's profile lets its gate share nodes; `workshop preflight` compares the partitions' nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from workshop.slurm.jobs import prepare
from workshop.slurm.profiles import PROFILES_DIR, ProfileError, load_profile, session_blocks_gate


def ci_variant(tmp_path: Path, old: str, new: str) -> Path:
    path = tmp_path / "site.toml"
    text = (PROFILES_DIR / "ci.toml").read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return path


def test_a_session_on_the_gates_whole_nodes_is_refused_naming_the_fix(tmp_path: Path) -> None:
    shared = ci_variant(tmp_path, "exclusive = false\n", "")           # ci as it was: sessions on 'debug'
    with pytest.raises(ProfileError, match=r"field 'ood.partition'.*Resources.*\[ood\] partition.*"
                                           r"\[ood\] reservation.*\[bandwidth\] exclusive = false") as e:
        load_profile(shared)
    assert e.value.field == "ood.partition"


def test_the_ci_gate_shares_its_nodes_and_a_site_with_its_own_session_nodes_keeps_whole_nodes(tmp_path: Path) -> None:
    ci = load_profile("ci")
    assert not ci.bandwidth_exclusive and session_blocks_gate(ci) is None
    script = prepare("bandwidth", profile=ci, overrides={"nodes": 2}, jobs_dir=tmp_path / "jobs").script
    assert "--nodes=2" in script and "--exclusive" not in script
    site = load_profile("example-hpc")          # sessions on 'interactive', the gate on a GPU partition
    assert site.bandwidth_exclusive and session_blocks_gate(site) is None
    # preflight's count of the gate partition's nodes that hold no session, from sinfo
    assert session_blocks_gate(site, free_nodes=1) is not None and session_blocks_gate(site, free_nodes=2) is None
    reserved = ci_variant(tmp_path, "exclusive = false\n", "")
    reserved.write_text(reserved.read_text().replace('mem = "2G"\n', 'mem = "2G"\nreservation = "sessions"\n'))
    assert load_profile(reserved).session_reservation == "sessions"     # sessions on nodes of their own
