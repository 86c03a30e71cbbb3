"""
Is a tier worth draining now? The decision behind the tier-due sensor, without I/O or Airflow.

Given when the first pending record of each partition is due, the current time, an optional
reprocessing window and an optional deadline (how long the caller may wait), the answer is one of:

* ``due``: at least one partition's head is due, and the window (if any) is open: drain now;
* ``idle``: nothing is pending: skip, the tier costs one cheap look;
* ``wait``: look again at ``wake_ms`` (the earliest due time, or the window's opening);
* ``skip``: that wake-up would be after the deadline: leave it to the next scheduled run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.timing.windows import ReprocessWindow

DueAction = Literal["due", "idle", "wait", "skip"]

#: What names a partition: its number (one topic), or ``(topic, partition)`` (the event triggers' waves).
PartitionKey = TypeVar("PartitionKey", int, tuple[str, int])


def format_ms(at_ms: int) -> str:
    """Epoch milliseconds as an ISO-8601 UTC time, for messages."""
    return datetime.fromtimestamp(at_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class DueCheck(Generic[PartitionKey]):
    """
    The outcome of :func:`check_due`.

    :param action: ``due``, ``idle``, ``wait`` or ``skip``.
    :param now_ms: when the check was made.
    :param due_partitions: partitions whose head is due (``due`` only).
    :param earliest_due_ms: the earliest due time among the pending heads; None when idle.
    :param wake_ms: when to look again (``wait``), or when the caller would have had to (``skip``).
    :param reason: one line saying why, for the task log and the skip message.
    """

    action: DueAction
    now_ms: int
    due_partitions: tuple[PartitionKey, ...] = ()
    earliest_due_ms: int | None = None
    wake_ms: int | None = None
    reason: str = ""
    pending_partitions: tuple[PartitionKey, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "now_ms": self.now_ms,
            "due_partitions": list(self.due_partitions),
            "earliest_due_ms": self.earliest_due_ms,
            "wake_ms": self.wake_ms,
            "reason": self.reason,
            "pending_partitions": list(self.pending_partitions),
        }


def check_due(
    due_at: Mapping[PartitionKey, int],
    *,
    now_ms: int,
    window: ReprocessWindow | None = None,
    deadline_ms: int | None = None,
) -> DueCheck[PartitionKey]:
    """
    Decide what the due sensor does.

    :param due_at: partition -> when its first pending record is due (epoch ms); partitions with
        nothing pending are left out.
    :param now_ms: the current time.
    :param window: reprocessing is allowed only while this window is open.
    :param deadline_ms: a wait that would end after this becomes ``skip``.
    """
    if not due_at:
        return DueCheck("idle", now_ms, reason="nothing is pending")
    pending = tuple(sorted(due_at))
    earliest = min(due_at.values())
    if window is not None and not window.is_open(now_ms):
        opens = window.next_open_ms(now_ms)
        wake = max(opens, earliest)
        why = f"the reprocessing window {window} is closed; it opens at {format_ms(opens)}"
        if wake > opens:
            why += f" and the earliest record is due at {format_ms(earliest)}"
        return _wait_or_skip(now_ms, wake, earliest, pending, deadline_ms, why)
    due = tuple(p for p in pending if due_at[p] <= now_ms)
    if due:
        return DueCheck(
            "due",
            now_ms,
            due_partitions=due,
            earliest_due_ms=earliest,
            pending_partitions=pending,
            reason=f"{len(due)} of {len(pending)} pending partition(s) have a due record",
        )
    return _wait_or_skip(
        now_ms,
        earliest,
        earliest,
        pending,
        deadline_ms,
        f"records are pending but not due yet; the earliest is due at {format_ms(earliest)}",
    )


def _wait_or_skip(
    now_ms: int,
    wake_ms: int,
    earliest: int,
    pending: tuple[PartitionKey, ...],
    deadline_ms: int | None,
    why: str,
) -> DueCheck[PartitionKey]:
    if deadline_ms is not None and wake_ms > deadline_ms:
        return DueCheck(
            "skip",
            now_ms,
            earliest_due_ms=earliest,
            wake_ms=wake_ms,
            pending_partitions=pending,
            reason=f"{why}, after the wait limit ({format_ms(deadline_ms)}): "
            "the next scheduled run will see them",
        )
    return DueCheck(
        "wait",
        now_ms,
        earliest_due_ms=earliest,
        wake_ms=wake_ms,
        pending_partitions=pending,
        reason=f"{why}; waiting until {format_ms(wake_ms)}",
    )
