"""`python -m workshop` is the `workshop` console script."""

import sys

from workshop.cli import main

sys.exit(main())
