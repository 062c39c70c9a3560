"""The terminal student (tests/terminal_student.py) computes in the student's real install, not the instructor's:
the answer key's routes stop where a student's would. What the other routes earn, tests/test_course.py grades
(issue 48, item 6)."""

from __future__ import annotations

import pytest

from tests.terminal_student import TERMINAL, terminal_values


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

