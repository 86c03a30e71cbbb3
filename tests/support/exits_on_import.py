"""A script-like module that ends the process as it is imported (``SystemExit``, as some ``__main__`` modules
do)."""

from __future__ import annotations

import sys

sys.exit(3)


def transform(record):  # never reached
    return record
