"""Imported by Python at the start of every process with this folder on PYTHONPATH (the ``site`` module): the
fault tests put it there so that the ranks normlab's launcher starts get the fault that ``NORMLAB_TEST_FAULT``
names (tests/faulty.py). Without the variable it does nothing, and imports nothing."""

import os

if os.environ.get("NORMLAB_TEST_FAULT"):
    from tests.faulty import inject_from_environment

    inject_from_environment()
