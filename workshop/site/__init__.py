"""The site admin's room: a site profile checked on its cluster (`preflight`, `limits`, `submit_check`,
`checklist`), the class's GPU-hours and day (`budget`, `schedule`, `replay`), the shared cache (`prefetch`),
the students' course folders (`student_folder`) and the Open OnDemand app (`ood`). May import every room below it but grading.
"""

import workshop.results  # noqa: F401  (a failed job's line in the watch is diagnose's title)
