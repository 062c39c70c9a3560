"""The student's room: what the notebooks and the student's kernel import.

The notebooks' API is `from workshop.student.lab import Lab, check` (`lab`, `checks`, `cell_label`,
`explorer`, `challenge`, `kernel`). May import training, slurm, results, comm and bench; never the site's
or the grader's rooms (tests/test_layout.py).
"""

import workshop.results  # noqa: F401  (a failed job's line in the watch is diagnose's title)
