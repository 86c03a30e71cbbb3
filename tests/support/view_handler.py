"""A handler that accepts every record (the UI view test needs a tier run with a real summary)."""

from __future__ import annotations


def accept(records: list) -> None:
    """Every record succeeds."""
