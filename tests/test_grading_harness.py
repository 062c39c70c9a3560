"""The throwaway nbgrader course of the autograde tests (tests/grading.py) creates its gradebooks as nbgrader does."""

from __future__ import annotations

import os
import subprocess
import tempfile

from tests.grading import alembic_head


def test_the_in_process_revision_is_what_alembic_heads_prints() -> None:
    """nbgrader stamps a new gradebook with the first word `alembic heads` prints (nbgrader.api.get_alembic_version);
    tests/grading.py reads the same head in-process: a nbgrader upgrade that moves it fails here."""
    from nbgrader.dbutil import write_alembic_ini

    with tempfile.TemporaryDirectory() as tmp:
        ini = os.path.join(tmp, "alembic.ini")
        write_alembic_ini(ini, "sqlite:////tmp/gradebook.db")
        printed = subprocess.run(["alembic", "-c", ini, "heads"], capture_output=True, text=True, check=True).stdout
    assert printed.split("\n")[0].split(" ")[0] == alembic_head() and len(alembic_head()) >= 12
