"""
What one process knows of a redelivery log (``logs/redelivery_log.py``): its live entries, where it read to.

One :class:`LogState` per cluster and log topic in a process, kept across the attempts and runs of the
partitions it executes, so that each look at the log reads only what was appended since. Entries are kept
in log order, undecoded; a tombstone drops its entry, and :meth:`LogState.expire` drops those past the log's
retention, as the broker does: what is held is bounded by the entries in flight, not by the log's history.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.engine.kafka.messages import offset_of

if TYPE_CHECKING:
    from confluent_kafka import Message

RETENTION_MS = 7 * 24 * 3600 * 1000


@dataclass
class LogState:
    """
    What this process knows of one redelivery log.

    :param entries: key -> (the entry's value, its log timestamp), in log order; deleted entries are not
        here.
    :param position: the next offset to read.
    :param read: the log records this process read (entries and tombstones).
    """

    topic: str
    entries: dict[bytes, tuple[bytes, int]] = field(default_factory=dict)
    position: int = 0
    read: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def forget(self) -> None:
        """Start again from offset 0 (the log was deleted or recreated)."""
        self.entries, self.position = {}, 0

    def add(self, message: Message) -> None:
        """One record of the log, read in order: an entry, or a tombstone deleting one."""
        self.position = offset_of(message) + 1
        self.read += 1
        key, value = message.key(), message.value()
        if key is None:
            return
        if value is None:
            self.entries.pop(key, None)
        else:
            self.entries[key] = (value, message.timestamp()[1])

    def expire(self, now_ms: int) -> int:
        """Drop the entries older than :data:`RETENTION_MS` (the oldest come first); how many."""
        cutoff = now_ms - RETENTION_MS
        old = []
        for key, (_, timestamp) in self.entries.items():
            if timestamp >= cutoff:
                break
            old.append(key)
        for key in old:
            del self.entries[key]
        return len(old)


_STATES: dict[tuple[str, str], LogState] = {}
_STATES_LOCK = threading.Lock()


def log_state(kafka_config: Mapping[str, Any], topic: str) -> LogState:
    """This process's :class:`LogState` of ``topic`` on the cluster of ``kafka_config``."""
    where = (str(kafka_config.get("bootstrap.servers", "")), topic)
    with _STATES_LOCK:
        state = _STATES.get(where)
        if state is None:
            state = _STATES[where] = LogState(topic)
        return state
