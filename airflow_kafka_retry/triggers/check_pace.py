"""
A watched lane's pace of committed-offset checks: when the next one is due, and what the last one saw.

Both event triggers keep one per lane (``tier_events.py`` one, ``topology_events.py`` one per lane): each
check reads the lane's group's committed offsets and its partitions (``HeadWatch.sync_committed``). The
cadence is the pure ``policy/timing/idle_checks.py``'s (busy, right before a head falls due, or an idle
interval that backs off while nothing changes); this keeps what it compares from one check to the next.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_kafka_retry.policy.timing.idle_checks import check_at_ms, idle_interval_ms

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.heads.head_watch import HeadWatch
    from airflow_kafka_retry.policy.timing.waves import Wave

Key = tuple[str, int]

#: How often a lane looks for a topic it watches once it exists (another framework's DLQ, which the broker
#: or the connector creates at its first dead letter), instead of every idle interval.
AWAITED_TOPIC_CHECK_MS = 5_000
#: Each idle interval is cut by up to this share, at random: lanes opened together (a triggerer's start,
#: 4,000 lanes of 1,000 topologies) back off apart instead of all checking in the same second.
IDLE_SPREAD = 0.2


def random_spread() -> float:
    """The share of its idle interval a lane waits this time: from ``1 - IDLE_SPREAD`` to 1."""
    return 1.0 - random.random() * IDLE_SPREAD  # timers spread, not a secret


def first_fire_ms(watch: HeadWatch, now: int, fire_ahead_ms: int) -> int | None:
    """The earliest time a head of the watch may fire (a head without due time: now); None: no head."""
    if not watch.heads:
        return None
    if not watch.read_due:
        return now
    return min(h.due_at(now) for h in watch.heads.values()) - fire_ahead_ms


def heads_seen(watch: HeadWatch) -> frozenset[tuple[Key, int]]:
    """The watch's heads (partition and offset): what a check compares with the last one's."""
    return frozenset((key, head.offset) for key, head in watch.heads.items())


@dataclass
class CheckPace:
    """
    When a lane next reads its group's committed offsets, from its trigger's timing (milliseconds).

    :param busy_ms: ``commit_check``; :param idle_ms: ``idle_check``; :param idle_max_ms:
        ``idle_check_max``; :param fire_ahead_ms: ``fire_ahead``; :param refire_after_ms: ``refire_after``.
    """

    busy_ms: int
    idle_ms: int
    idle_max_ms: int
    fire_ahead_ms: int
    refire_after_ms: int
    interval_ms: int = 0  # the idle interval now (0: none yet, the next is idle_ms)
    next_ms: int = 0  # when the next check is due (epoch ms; 0: at once)
    committed: dict[Key, int] = field(default_factory=dict)  # what the last check read
    seen: frozenset[tuple[Key, int]] = frozenset()  # the heads at the last check
    spread: Callable[[], float] = random_spread  # the share of an idle interval waited each time

    @classmethod
    def of(cls, seconds: Mapping[str, float]) -> CheckPace:
        """From a trigger's settings in seconds (``commit_check``, ``idle_check``, ``idle_check_max`` ...)."""

        def ms(name: str) -> int:
            return int(seconds[name] * 1000)

        return cls(
            ms("commit_check"), ms("idle_check"), ms("idle_check_max"), ms("fire_ahead"), ms("refire_after")
        )

    def due(self, now: int) -> bool:
        return now >= self.next_ms

    def restart(self) -> None:
        """A watch (re)opened: check at once, the idle interval from ``idle_ms`` again."""
        self.next_ms = self.interval_ms = 0

    def saw(self, watch: HeadWatch, committed: dict[Key, int], *, wave_pending: bool) -> bool:
        """
        Note what a check read; True when the committed offsets moved since the last check.

        Any change (offsets or partitions, heads, a wave pending before the check) brings the idle interval
        back to ``idle_ms``; none doubles it, up to ``idle_max_ms``.
        """
        seen = heads_seen(watch)
        moved = bool(self.committed) and committed != self.committed
        changed = committed != self.committed or seen != self.seen or wave_pending
        self.committed, self.seen = committed, seen
        self.interval_ms = idle_interval_ms(
            self.interval_ms, changed=changed, base_ms=self.idle_ms, max_ms=self.idle_max_ms
        )
        return moved

    def plan(self, watch: HeadWatch, now: int, wave: Wave | None) -> None:
        """After a check: when the next is due (``wave``: the one still pending, looked at as it expires)."""
        self.next_ms = self._at(watch, now, wave_pending=wave is not None)
        if wave is not None:
            self.next_ms = min(self.next_ms, wave.expires_ms(self.refire_after_ms))

    def heads_between(self, watch: HeadWatch, now: int) -> None:
        """Heads fetched since the last check (no wave pending): check again before the first may fire."""
        self.next_ms = min(self.next_ms, self._at(watch, now, wave_pending=False))

    def fired(self, now: int) -> None:
        """A wave was fired: check at the busy cadence."""
        self.next_ms = min(self.next_ms, now + self.busy_ms)

    def _at(self, watch: HeadWatch, now: int, *, wave_pending: bool) -> int:
        at = check_at_ms(
            now,
            busy_ms=self.busy_ms,
            idle_ms=round((self.interval_ms or self.idle_ms) * self.spread()),
            first_fire_ms=first_fire_ms(watch, now, self.fire_ahead_ms),
            wave_pending=wave_pending,
        )
        return min(at, now + AWAITED_TOPIC_CHECK_MS) if watch.awaited else at
