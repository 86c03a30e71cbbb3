"""A module with an import side effect: it writes ``$AKR_IMPORT_MARKER`` (when set) as it is imported.

Tests name it where a replay must not import anything (a transform not on the DAG's list, an
exception filter) and check the marker was never written.
"""

from __future__ import annotations

import os

_marker = os.environ.get("AKR_IMPORT_MARKER")
if _marker:
    with open(_marker, "a", encoding="utf-8") as fh:
        fh.write("imported\n")


class MarkerError(Exception):
    """A class a filter may name."""


def transform(record):
    return record
