"""
When an event-driven tier fires, and when a fired wave counts as taken: decisions without I/O or Airflow.

A *wave* is one event of a tier's event trigger: the heads (first pending records) of the partitions
that are due, by their coordinates. The trigger fires a wave ``fire_ahead_ms`` before its records
are due (the tier run starting meanwhile waits until ``not_before_ms``), so Airflow's own start-up
(the event reaching the scheduler, a DAG run, a task process) does not add to a record's lateness.
It fires nothing else until the wave is taken -- the group's committed offset moved past the head
of one of its partitions -- or ``refire_after_ms`` (45 s by default) passed since it became runnable
(``not_before_ms``): then no run took it -- the event was lost with a crashed triggerer, or the run
failed, was lost, or never started -- and it fires again. That bounds the lateness any such fault
adds to ``refire_after`` plus a run's start-up after the restart (or the failure): within 60 s. A
duplicate event costs one short run that finds nothing due (a tier DAG runs one run at a time).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal

from airflow_kafka_retry.policy.timing.due_check import PartitionKey, check_due

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.timing.windows import ReprocessWindow

Key = tuple[str, int]


@dataclass(frozen=True)
class WavePlan(Generic[PartitionKey]):
    """
    What the trigger does next.

    :param action: ``fire`` (an event now), ``wait`` (look again at ``wake_ms``) or ``idle`` (nothing
        pending).
    :param not_before_ms: ``fire``: the run drains from this time on (when the wave's first record is due).
    :param keys: ``fire``: the partitions whose heads are due by ``not_before_ms``.
    :param wake_ms: ``wait``: when the wave would fire.
    :param reason: one line for the triggerer's log.
    """

    action: Literal["fire", "wait", "idle"]
    not_before_ms: int | None = None
    keys: tuple[PartitionKey, ...] = ()
    wake_ms: int | None = None
    reason: str = ""


def plan_wave(
    due_at: Mapping[PartitionKey, int],
    *,
    now_ms: int,
    window: ReprocessWindow | None = None,
    fire_ahead_ms: int = 0,
) -> WavePlan[PartitionKey]:
    """Fire, wait or stay idle, given when each partition's head is due (partitions without one left out)."""
    if fire_ahead_ms < 0:
        raise ValueError(f"fire_ahead_ms cannot be negative, got {fire_ahead_ms}")
    check = check_due(due_at, now_ms=now_ms, window=window)
    if check.action == "idle":
        return WavePlan("idle", reason=check.reason)
    if check.action == "due":
        return WavePlan("fire", now_ms, tuple(check.due_partitions), reason=check.reason)
    wake = check.wake_ms if check.wake_ms is not None else now_ms
    if wake - now_ms <= fire_ahead_ms:
        keys = tuple(sorted(k for k, due in due_at.items() if due <= wake))
        return WavePlan("fire", wake, keys, reason=f"{check.reason} (firing {wake - now_ms} ms ahead)")
    return WavePlan("wait", wake_ms=wake - fire_ahead_ms, reason=check.reason)


@dataclass(frozen=True)
class Wave:
    """A fired wave: the head offset of each of its partitions, when it fired and from when it may run."""

    positions: tuple[tuple[str, int, int], ...]  # (topic, partition, head offset)
    fired_ms: int
    not_before_ms: int

    def taken(self, committed: Mapping[Key, int]) -> bool:
        """The group committed past the head of one of the wave's partitions (or the partition is gone)."""
        return any(committed.get((t, p), offset + 1) > offset for t, p, offset in self.positions)

    def expires_ms(self, refire_after_ms: int) -> int:
        """When the wave fires again if no run takes it: ``refire_after_ms`` after it became runnable."""
        return max(self.fired_ms, self.not_before_ms) + refire_after_ms

    def expired(self, now_ms: int, refire_after_ms: int) -> bool:
        """No run took the wave within ``refire_after_ms`` of it becoming runnable."""
        return now_ms >= self.expires_ms(refire_after_ms)

    def to_state(self) -> dict[str, Any]:
        return {
            "positions": [list(p) for p in self.positions],
            "fired_ms": self.fired_ms,
            "not_before_ms": self.not_before_ms,
        }

    @classmethod
    def from_state(cls, state: Any) -> Wave | None:
        """A wave saved with :meth:`to_state`; None for anything else (no state, or a foreign shape)."""
        if not isinstance(state, Mapping):
            return None
        try:
            positions = tuple((str(t), int(p), int(o)) for t, p, o in state["positions"])
            return cls(positions, int(state["fired_ms"]), int(state["not_before_ms"]))
        except (KeyError, TypeError, ValueError):
            return None
