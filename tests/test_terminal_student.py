"""The terminal student (tests/terminal_student.py) computes in the student's real install, not the instructor's:
the answer key's routes stop where a student's would. What the other routes earn, tests/test_course.py grades
(issue 48, item 6)."""

from __future__ import annotations

import pytest

from tests.terminal_student import TERMINAL, terminal_values
from tests.test_student_install import MOVED_REFERENCES


@pytest.mark.slow                # builds the student's wheel and runs Python in it
def test_the_answer_keys_routes_stop_at_the_students_install() -> None:
    """The instructor's editable install imports `workshop.grading` from the checkout; the terminal student's
    Python must not (else the copier would type the key's own values and measure nothing of the student's
    install): every route through the key stops at ModuleNotFoundError."""
    for assignment, routes in TERMINAL.items():
        ran = terminal_values(assignment)
        assert set(ran) == set(routes)
        for grade_id, source in routes.items():
            if "workshop.grading" in source:
                assert ran[grade_id] == {"error": "ModuleNotFoundError: No module named 'workshop.grading'"}, grade_id
            for old in MOVED_REFERENCES:     # the grader's rules at the paths the reader imported them from
                if f"import {old} " in source:
                    assert ran[grade_id] == {"error": f"ModuleNotFoundError: No module named '{old}'"}, grade_id


def test_the_routes_through_the_graders_rules_are_still_tried() -> None:
    """The reader's routes to notebook 03's held fractions and notebook 05's crossing collectives stay in the
    terminal student, at the paths the issue's reader typed: the check above then has something to stop."""
    sources = "\n".join(s for routes in TERMINAL.values() for s in routes.values())
    assert "import workshop.training.fsdp_rules " in sources and "import workshop.comm.traffic " in sources

