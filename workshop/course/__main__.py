"""`python -m workshop.course`: run the whole course headless (workshop/course/run_all.py)."""

import sys

from workshop.course.run_all import main

sys.exit(main())
