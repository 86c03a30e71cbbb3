"""Durations as written in topologies: ``500ms``, ``30s``, ``5m``, ``2h``, ``1d`` or plain milliseconds."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration_ms(value: object) -> int:
    """
    Return ``value`` in whole milliseconds.

    Integers are milliseconds. Strings are a number and an optional unit (``ms``, ``s``, ``m``,
    ``h``, ``d``; no unit means milliseconds). Fractions are allowed when the result is a whole
    number of milliseconds (``1.5s``). Raises ``ValueError`` naming the accepted forms.
    """
    if isinstance(value, bool):
        raise ValueError(
            f"expected a duration like '500ms', '30s', '5m', '2h' or milliseconds, got {value!r}"
        )
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a duration cannot be negative, got {value}")
        return value
    if isinstance(value, float):
        if value < 0 or not value.is_integer():
            raise ValueError(f"milliseconds must be a whole, non-negative number, got {value}")
        return int(value)
    if isinstance(value, str):
        match = _PATTERN.match(value)
        if match:
            number, unit = match.groups()
            ms = Decimal(number) * _UNITS_MS[unit or "ms"]  # exact: 1.001s is 1001 ms
            if ms == ms.to_integral_value():
                return int(ms)
            raise ValueError(f"{value!r} is not a whole number of milliseconds")
    raise ValueError(f"expected a duration like '500ms', '30s', '5m', '2h' or milliseconds, got {value!r}")


def duration_ms(value: object) -> int:
    """:func:`parse_duration_ms`, also taking a ``timedelta`` (whole milliseconds, sign kept)."""
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    return parse_duration_ms(value)


def format_duration_ms(ms: int) -> str:
    """The shortest exact spelling of ``ms`` in the largest unit that divides it (``90000`` -> ``90s``)."""
    for unit in ("d", "h", "m", "s"):
        size = _UNITS_MS[unit]
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
