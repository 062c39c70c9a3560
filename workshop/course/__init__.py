"""The course: what the notebooks call, and how they are released, run and graded.

The notebooks' API is `from workshop.course.lab import Lab, check` (`lab`, `checks`, `kernel`,
`explorer`, `challenge`); the instructor's tools are `release`, `run_all` (every notebook, headless),
`grade`, `integrity`, `scan`, `budget`, `classview` and `ood` (the Open OnDemand app).

May import every layer below (training, slurm, results); nothing below imports it.
"""

import workshop.results  # noqa: F401  (a failed job's line in the watch is diagnose's title)
