"""
Reprocessing windows: the daily wall-clock hours in which a tier may be drained (``01:00-05:00``).

Pure: no I/O, no Airflow. Times are local wall-clock times in an IANA time zone (UTC by default);
a window whose end is not after its start crosses midnight (``22:00-04:00``). Around a daylight
saving change the opening and closing are the wall-clock times as written, resolved with
``fold=0`` (a time skipped by the change maps to the instant an hour later).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_SPEC = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")


def _clock(hours: str, minutes: str, spec: str, *, end: bool) -> time:
    """``HH:MM`` as a time; ``24:00`` (only as the end) is midnight of the next day, ``00:00``."""
    h, m = int(hours), int(minutes)
    if end and (h, m) == (24, 0):
        return time(0, 0)
    if h > 23 or m > 59:
        raise ValueError(
            f"window {spec!r}: {hours}:{minutes} is not a time of day (00:00 to 23:59"
            f"{', or 24:00 as the end' if end else ''})"
        )
    return time(h, m)


@dataclass(frozen=True)
class ReprocessWindow:
    """
    The daily hours ``[start, end)`` in ``timezone`` in which reprocessing may run.

    :param start: local opening time.
    :param end: local closing time; at or before ``start`` means the window closes the next day.
    :param timezone: IANA time zone name, e.g. ``Europe/Berlin``.
    """

    start: time
    end: time
    timezone: str = "UTC"

    @classmethod
    def parse(cls, spec: str, timezone: str | None = None) -> ReprocessWindow:
        """``"HH:MM-HH:MM"`` (``24:00`` allowed as the end) in ``timezone`` (default UTC)."""
        if not isinstance(spec, str):
            raise ValueError(f"window must be a string like '01:00-05:00', got {spec!r}")
        match = _SPEC.match(spec)
        if not match:
            raise ValueError(f"window {spec!r} is not of the form 'HH:MM-HH:MM' (e.g. '01:00-05:00')")
        start = _clock(match[1], match[2], spec, end=False)
        end = _clock(match[3], match[4], spec, end=True)
        if start == end and (match[3], match[4]) != ("24", "00"):
            raise ValueError(
                f"window {spec!r} opens and closes at the same time; leave the window out to "
                "reprocess at any hour"
            )
        tz = timezone or "UTC"
        try:
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"window {spec!r}: unknown time zone {tz!r} (use an IANA name such as "
                "'Europe/Berlin' or 'UTC')"
            ) from None
        return cls(start=start, end=end, timezone=tz)

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def __str__(self) -> str:
        return f"{self.start:%H:%M}-{self.end:%H:%M} {self.timezone}"

    def _occurrence(self, day: date) -> tuple[int, int]:
        """Opening and closing (epoch ms) of the window that opens on local ``day``."""
        opens = datetime.combine(day, self.start, tzinfo=self.zone)
        close_day = day if self.end > self.start else day + timedelta(days=1)
        closes = datetime.combine(close_day, self.end, tzinfo=self.zone)
        return int(opens.timestamp() * 1000), int(closes.timestamp() * 1000)

    def _local_day(self, at_ms: int) -> date:
        return datetime.fromtimestamp(at_ms / 1000, tz=UTC).astimezone(self.zone).date()

    def _occurrences(self, at_ms: int) -> list[tuple[int, int]]:
        day = self._local_day(at_ms)
        return [self._occurrence(day + timedelta(days=d)) for d in (-1, 0, 1, 2)]

    def closes_at_ms(self, at_ms: int) -> int | None:
        """When the window that is open at ``at_ms`` closes; ``None`` when it is closed at ``at_ms``."""
        for opens, closes in self._occurrences(at_ms):
            if opens <= at_ms < closes:
                return closes
        return None

    def is_open(self, at_ms: int) -> bool:
        return self.closes_at_ms(at_ms) is not None

    def next_open_ms(self, at_ms: int) -> int:
        """``at_ms`` itself when the window is open then, else its next opening."""
        if self.is_open(at_ms):
            return at_ms
        return min(opens for opens, _ in self._occurrences(at_ms) if opens > at_ms)
