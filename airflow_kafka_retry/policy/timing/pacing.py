"""
A replay's move rate: ``--rate N/s`` parsed, the chunk size it allows, and the pacing that holds it.

Pacing is per chunk, against the clock of the run: the chunk that starts with the run's ``n``-th move may
begin ``n / rate`` seconds after the run's first move, never earlier. A run that fell behind (a slow chunk, a
broker that stalled for seconds) catches up by at most a quarter of a second's worth of moves: the rest of the
lag is forgiven, so a stall is never followed by a burst at full speed. A chunk holds at most a quarter of a
second's worth of moves (:func:`paced_chunk`; never more than a second's, whatever the rate), so the rate over
any window of a few seconds is the rate asked, give or take one small chunk. Waiting is done in slices, each
preceded by ``check()`` (a stop at once ends the wait), and never goes past the run's deadline: a wait that
would end after it raises :class:`PastDeadline` at once instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from airflow_kafka_retry.policy.errors import ReplayError

#: The longest single sleep of a wait: how soon a stop at once is seen while pacing.
SLICE_S = 0.2


class PastDeadline(Exception):
    """Holding the rate would wait past the run's deadline."""


def parse_rate(value: object, option: str = "--rate") -> float | None:
    """
    A rate in moves per second from ``N/s``, ``N`` (per second) or a number; None when not given.

    Zero, a negative number, or anything but a number raises :class:`ReplayError` naming ``option``.
    """
    if value is None or value == "" or value == "None":
        return None
    if isinstance(value, bool):
        raise ReplayError(f"{option} {value!r}: give a number of records per second, such as 200/s")
    text = str(value).strip()
    number = text[: -len("/s")].strip() if text.endswith("/s") else text
    try:
        rate = float(number)
    except ValueError:
        raise ReplayError(
            f"{option} {value!r} is not a rate: give records per second, such as 200/s or 200"
        ) from None
    if not math.isfinite(rate) or rate <= 0:
        raise ReplayError(f"{option} {value!r}: the rate must be a number of records per second above 0")
    return rate


#: The share of a second's moves one chunk may hold.
CHUNK_SECONDS = 0.25


def paced_chunk(chunk_size: int, rate: float | None) -> int:
    """Records per transaction at ``rate``: at most ``chunk_size``, a quarter second's worth (>= 1)."""
    if rate is None:
        return chunk_size
    return max(1, min(chunk_size, math.floor(rate * CHUNK_SECONDS)))


def measured_rate(moved: int, elapsed_s: float) -> float | None:
    """Moves per second over ``elapsed_s`` (None before a second's tenth has passed)."""
    return round(moved / elapsed_s, 1) if elapsed_s >= 0.1 else None


@dataclass
class Pacer:
    """
    Holds ``rate`` moves per second, chunk by chunk (see the module's docstring).

    :param rate: moves per second; None: no pacing (:meth:`wait` returns at once).
    :param deadline: the run's deadline (``clock`` seconds); None: none.
    :param clock: monotonic seconds; ``sleep``: waits (a test injects both).
    """

    rate: float | None
    deadline: float | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    started: float | None = field(default=None, init=False)
    #: the schedule's origin: ``started``, moved on by the lag forgiven after each stall
    _origin: float | None = field(default=None, init=False, repr=False)

    def due(self, moved: int) -> float:
        """When the chunk starting with this run's ``moved``-th move may begin."""
        if self._origin is None:
            self.started = self._origin = self.clock()
        return self._origin if self.rate is None else self._origin + moved / self.rate

    def wait(self, moved: int, check: Callable[[], None] = lambda: None) -> float:
        """Wait until the chunk after ``moved`` moves may begin; the seconds waited."""
        due, begun = self.due(moved), self.clock()
        if self.rate is not None and self._origin is not None and begun - due > CHUNK_SECONDS:
            # behind by more than a quarter second's worth: forgive the rest, no burst to catch up
            self._origin += begun - due - CHUNK_SECONDS
            due = begun - CHUNK_SECONDS
        if self.deadline is not None and due > self.deadline:
            raise PastDeadline(
                f"holding {self.rate:g}/s, the next chunk could start only {due - self.deadline:.1f}s "
                "after the run's deadline"
            )
        while (left := due - self.clock()) > 0:
            check()
            self.sleep(min(left, SLICE_S))
        return self.clock() - begun

    def elapsed(self) -> float:
        """Seconds since the first move of the run."""
        return 0.0 if self.started is None else self.clock() - self.started
