"""A pytest plugin (`-p tests.split_listing`) for tests/test_suite_split.py: one collection of the local suite, each
local part's selection of it (tests/suite_split.py's `keep`), and what tests/conftest.py's hook itself kept for the
part WORKSHOP_TEST_PART names, written as JSON to WORKSHOP_SPLIT_LISTING.

The listing test collected the suite once per part, four pytest processes side by side (76 CPU-s of a CI run on
2026-11-29) for four lists that differ only in the part chosen after collection; one collection gives them all,
and the hook's own choice for one part shows that the hook selects as `keep` does."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Generator

import pytest

from tests import suite_split

LOCAL = (*suite_split.COURSES, *suite_split.RESTS)


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Generator[None, None, None]:
    """Around every other implementation: the whole collection before them, the hook's part after them."""
    collected = list(items)
    yield
    listing = {"collected": [item.nodeid for item in collected],
               "part": os.environ.get("WORKSHOP_TEST_PART", ""), "hook": [item.nodeid for item in items],
               "parts": {part: [item.nodeid for item in suite_split.keep(part, collected)] for part in LOCAL}}
    Path(os.environ["WORKSHOP_SPLIT_LISTING"]).write_text(json.dumps(listing))
