"""notebooks/ is exactly what nbgrader generates from solutions/, and a clean student release."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workshop.grading.release import REPO, assignments, differences, generate

NOTEBOOKS = sorted((REPO / "notebooks").glob("*/*.ipynb"))


def test_notebooks_match_a_fresh_generation(tmp_path: Path) -> None:
    generate(tmp_path / "release")
    assert differences(tmp_path / "release", REPO / "notebooks") == []


def test_the_course_has_five_numbered_steps() -> None:
    assert assignments() == ["01_baseline", "02_fsdp_single_gpu", "03_sharding_strategies", "04_multi_gpu",
                             "05_multi_node"]
    assert [p.parent.name for p in NOTEBOOKS] == assignments()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.parent.name for p in NOTEBOOKS])
def test_release_is_clean(path: Path) -> None:
    text = path.read_text()
    nb = json.loads(text)
    assert all(not c.get("outputs") and not c.get("execution_count") for c in nb["cells"] if c["cell_type"] == "code")
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS"):
        assert marker not in text
    assert "raise NotImplementedError()" in text and "YOUR ANSWER HERE" in text
    ids = [c["id"] for c in nb["cells"]]
    assert len(set(ids)) == len(ids) and all(i.startswith(f"nb{path.parent.name[:2]}-") for i in ids)
    assert any("parameters" in c["metadata"].get("tags", []) for c in nb["cells"])
    # it opens with the course kernel the student guide promises, not "Python 3 (ipykernel)"
    assert nb["metadata"]["kernelspec"] == {"display_name": "FSDP workshop (bloom_env)", "language": "python",
                                            "name": "fsdp-workshop"}
    assert "FSDP workshop (bloom_env)" in (REPO / "docs/student.md").read_text()
