"""The grading room: the instructor's release (`release`), the headless course run (`run_all`,
`ipc_kernel`), autograde (`grade`), the independent review (`integrity`, `scan`), the answer key
(`answer_key`), the references only hidden tests compare against (`fsdp_rules`, `traffic`, `consistency`)
and the class view (`classview`); for the instructor's grading environment only.

Its modules are left out of the course package a student installs (pyproject.toml excludes
`workshop.grading`, so `pip install <checkout>` builds a wheel without them), while the instructor's editable
install of the checkout (`pip install -e`, what `make venv` and docs/instructor.md's grading environment do)
reads them from the checkout. tests/test_student_install.py builds that wheel and imports from it.
"""

import workshop.results  # noqa: F401,E402  (a failed job's line in the watch is diagnose's title)
