"""
A compacted log topic of one partition: the base of the replay log and the redelivery log.

Creation: :mod:`~airflow_kafka_retry.engine.logs.log_topic`. Entries: a key (bytes), a JSON value
(:func:`encode_entry`); a tombstone (None) deletes its key, as compaction does. Reading
(:class:`CompactedLogView`): a process's :class:`LogState` of a log is kept across the runs it executes,
so each refresh reads only what was appended since, to the log's end, under the caller's deadlines.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
from airflow_kafka_retry.engine.kafka.messages import offset_of
from airflow_kafka_retry.engine.kafka.reading import reader_config
from airflow_kafka_retry.engine.kafka.scan import ReadError, Scan

log = logging.getLogger(__name__)


def encode_entry(data: Mapping[str, Any]) -> bytes:
    """An entry's value: compact JSON, keys sorted."""
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_entry(value: bytes | None) -> Any:
    """An entry's value from the log; None for a tombstone. A ValueError says it is not JSON."""
    return json.loads(value) if value else None


@dataclass
class LogState:
    """
    What this process knows of one log: its live entries (undecoded), where it read to.

    :param entries: key -> (the entry's value, its log timestamp), in log order; deleted ones are not here.
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

    def expire(self, now_ms: int, retention_ms: int) -> int:
        """Drop the entries older than ``retention_ms``, as the broker does (oldest first); how many."""
        cutoff = now_ms - retention_ms
        old = list(itertools.takewhile(lambda key: self.entries[key][1] < cutoff, self.entries))
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


class CompactedLogView:
    """
    A log's entries as this process last read them; a subclass names its log, its error and retention.

    Opens its consumer on first use; :meth:`close` closes it.

    :param deadlines: the partition run's deadlines; each broker call is made under them.
    :param timeout_s: the timeout handed to a call (and the longest wait for another thread's refresh).
    :param idle_timeout_s: the longest time the broker may send neither records nor the log's end.
    """

    #: the log, in messages; the error raised naming it (``transient`` set when a retry may help)
    what: str = "the log"
    error: type[Exception] = RuntimeError
    log: logging.Logger = log
    #: entries older than this (by the clock) are dropped, as the broker drops them (None: never)
    retention_ms: int | None = None
    poll_s = 1.0  #: the longest wait for a record, or for another thread's read to end

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        topic: str,
        *,
        deadlines: CallDeadlines | None = None,
        timeout_s: float = 10.0,
        idle_timeout_s: float = 60.0,
    ) -> None:
        self.kafka_config, self.topic, self.where = kafka_config, topic, f"{topic}[0]"
        self.deadlines = deadlines or CallDeadlines(self.where)
        self.timeout_s, self.idle_timeout_s = timeout_s, idle_timeout_s
        self.state = log_state(kafka_config, topic)
        self._consumer: Consumer | None = None

    def _failure(self, message: str, transient: bool | None = None) -> Exception:
        failed = self.error(message)
        failed.transient = transient  # type: ignore[attr-defined]
        return failed

    def refresh(self) -> int:
        """Read what was committed to the log since this process last read it; the records read."""
        state, timeout = self.state, self.deadlines.timeout(self.timeout_s)
        self._acquire(state, timeout)
        try:
            before, start = state.read, state.position
            self._read_new(state, timeout)
            retention, now = self.retention_ms, int(time.time() * 1000)
            expired = 0 if retention is None else state.expire(now, retention)
            read = state.read - before
            if read or expired:
                facts = (self.where, read, self.what, start, expired, len(state.entries))
                self.log.info(
                    "%s: read %s record(s) of %s from offset %s, %s expired; %s entries live", *facts
                )
            return read
        finally:
            state.lock.release()

    def _acquire(self, state: LogState, timeout: float) -> None:
        """
        Hold the state; another partition of this process may be reading the log into it.

        Waited for as long as that read goes on (a new process's first read of a big log takes seconds),
        never ``timeout`` seconds past its last record; a stopped attempt stops waiting.
        """
        last, since = state.position, time.monotonic()
        while not state.lock.acquire(timeout=min(self.poll_s, timeout)):
            self.deadlines.check()
            if state.position != last:
                last, since = state.position, time.monotonic()
            elif time.monotonic() - since > timeout:
                raise self._failure(
                    f"{self.where}: another partition run of this process has read nothing of {self.what} "
                    f"for {timeout:g}s, and still holds it",
                    True,
                )

    def _read_new(self, state: LogState, timeout: float) -> None:
        if self._consumer is None:
            self._consumer = Consumer(reader_config(self.kafka_config))
        consumer, waits_for = self._consumer, f"the leader of {self.where}"
        try:
            with self.deadlines.call("get_watermark_offsets", timeout, waits_for):
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, 0), timeout=timeout, cached=False
                )
        except KafkaException as exc:
            if exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                state.forget()  # nothing logged yet (or the log was deleted)
                return
            message = f"{self.where}: cannot read {self.what}'s end: {exc.args[0].str()}"
            raise self._failure(message) from exc
        if high < state.position:  # the log was recreated: what this process knew is gone
            self.log.warning(
                "%s: %s ends before offset %s; read again", self.where, self.what, state.position
            )
            state.forget()
        if high <= state.position:
            return
        key = (self.topic, 0)
        scan = Scan(
            consumer,
            {key: max(state.position, low)},
            ends={key: high},
            idle_timeout_s=self.idle_timeout_s,
            poll_s=self.poll_s,
            skip_before_start=True,  # never an entry twice
            deadlines=self.deadlines,
            waits_for=waits_for,
        )
        try:
            for record in scan.records():
                state.add(record)
        except ReadError as exc:  # a timeout is transient, a read failure when Kafka says it is retriable
            transient = exc.transient or (exc.error is not None and exc.error.retriable()) or None
            raise self._failure(f"{exc}: {self.what}, after offset {state.position}", transient) from None
        finally:
            scan.close()

    def close(self) -> None:
        if self._consumer is not None:  # no group to leave: returns at once
            self._consumer.close()
            self._consumer = None
