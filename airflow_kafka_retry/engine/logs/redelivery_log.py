"""
The redelivery log: a compacted ``<topic>-redelivery-log`` topic, the round of each redelivered record.

A share-group topology redelivers due records to their source topic (``policy/routing/share_redelivery.py``).

Key: the redelivered record's own coordinates, ``<source topic>/<partition>/<offset>`` (from its delivery
report); value: the :class:`~airflow_kafka_retry.policy.routing.share_redelivery.Redelivery` as JSON (round,
the first source record's coordinates, first failure and due time). A tier run writes an entry in the same
Kafka transaction as the redelivered record and its offset commit, so a record the share consumer can read
(``share.isolation.level=read_committed``) always has its entry. The input lane reads the log,
``read_committed``, after each piece of dead letters it reads, so the entry of every dead letter in the
piece is there (a record is redelivered, and its entry committed, before the share group rejects it); once
it routes a dead letter whose round came from the log, it writes a tombstone for that key in the same
transaction as the routed record and its offset commit, and compaction removes the entry.

What a process holds (``engine/logs/redelivery_log_state.py``, one state per cluster and log, kept across the
attempts and runs of the process): the position it read to and the entries not yet deleted, in log order.
Each refresh reads only what was appended since; a tombstone drops its entry; an entry older than
:data:`RETENTION_MS` is dropped as the broker drops it. So memory is bounded by the entries in flight
(redelivered records not yet dead-lettered again, or accepted by the share consumer less than
:data:`RETENTION_MS` ago), not by the log's history. A fresh process reads the compacted log: the live
entries, tombstones younger than :data:`CLEAN_MS` and the segments not yet cleaned (rolled every
:data:`CLEAN_MS`).

Every broker call is made under the partition run's deadlines (``engine/kafka/deadlines.py``); a timeout, or a
broker that does not answer, fails the attempt as transient (:class:`RedeliveryLogError` names the log):
the run is retried.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError, admin_config
from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
from airflow_kafka_retry.engine.kafka.reading import reader_config
from airflow_kafka_retry.engine.kafka.scan import ReadError, Scan
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_log_topic
from airflow_kafka_retry.engine.logs.redelivery_log_state import RETENTION_MS, LogState, log_state
from airflow_kafka_retry.policy.client_names import REDELIVERY_LOG_SUFFIX
from airflow_kafka_retry.policy.routing.share_redelivery import Redelivery

log = logging.getLogger(__name__)

LOG_SUFFIX = REDELIVERY_LOG_SUFFIX
#: How often the log's active segment rolls (so that compaction reaches it) and how long a tombstone stays.
CLEAN_MS = 3600 * 1000
LOG_CONFIG = {
    "cleanup.policy": "compact,delete",
    "retention.ms": str(RETENTION_MS),
    "segment.ms": str(CLEAN_MS),
    "delete.retention.ms": str(CLEAN_MS),
}
_MAX_TOPIC = 249


class RedeliveryLogError(RuntimeError):
    """
    The redelivery log could not be created or read; the message names it.

    ``transient``: the broker did not answer in time (None: the cause's Kafka error says).
    """

    transient: bool | None = None


def _transient(message: str) -> RedeliveryLogError:
    error = RedeliveryLogError(message)
    error.transient = True
    return error


def redelivery_log_topic(topic: str) -> str:
    """The redelivery log of the topology whose ``topic`` is ``topic``."""
    name = f"{topic}{LOG_SUFFIX}"
    if len(name) > _MAX_TOPIC:
        raise KafkaConfigError(
            f"the redelivery log of topology topic {topic!r} would be named {name!r}, longer than Kafka's "
            f"{_MAX_TOPIC} characters; shorten the topology's topic"
        )
    return name


def ensure_redelivery_log(
    kafka_config: Mapping[str, Any],
    topic: str,
    *,
    timeout: float = 30.0,
    deadlines: CallDeadlines | None = None,
) -> bool:
    """
    Create the log topic (one partition, :data:`LOG_CONFIG`) if it is missing; True when it was created.

    An existing log gets the configs of :data:`LOG_CONFIG` it lacks (:func:`complete_configs`).

    Under ``deadlines``: the lookup, the creation and the wait for the created topic are each given
    ``timeout``. A timeout is a transient :class:`RedeliveryLogError`.
    """
    deadlines = deadlines or CallDeadlines(topic)
    limit = deadlines.timeout(timeout)
    try:
        # a metadata request, the creation, then metadata requests until the topic shows (up to `limit`)
        with deadlines.call("create the redelivery log", 4 * limit, f"the controller (creating {topic})"):
            created = ensure_log_topic(
                kafka_config, topic, what="the redelivery log", config=LOG_CONFIG, timeout=limit
            )
    except TimeoutError as exc:
        raise _transient(f"creating the redelivery log {topic} timed out after {limit:g}s") from exc
    except KafkaException as exc:  # transient or not, as its Kafka error says
        raise RedeliveryLogError(f"cannot look up the redelivery log {topic}: {exc.args[0].str()}") from exc
    except KafkaConfigError as exc:
        error = RedeliveryLogError(str(exc))
        if exc.__cause__ is None:  # created, but not in the metadata in time: a slow cluster
            error.transient = True
        raise error from exc
    if not created:
        with deadlines.call(
            "complete the redelivery log's configs", 2 * limit, f"the brokers ({topic}'s configs)"
        ):
            complete_configs(kafka_config, topic, limit)
    return created


def complete_configs(kafka_config: Mapping[str, Any], topic: str, timeout: float) -> list[str]:
    """
    Set those of :data:`LOG_CONFIG` a log has not set itself (one made by an earlier version); their names.

    Without ``segment.ms`` the active segment (7 days by default) is never compacted, and a new process reads
    a week of the log. A config the topic sets is left as it is. Never fails the run: a log whose configs
    cannot be read or set (no ``ALTER_CONFIGS`` permission, a timeout) is named in a warning.
    """
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient(admin_config(kafka_config))
    try:
        described = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout)
        missing = [
            name
            for name in ("segment.ms", "delete.retention.ms")
            if name not in described or _source(described[name]) != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        ]
        if missing:
            entries = [
                ConfigEntry(name, LOG_CONFIG[name], incremental_operation=AlterConfigOpType.SET)
                for name in missing
            ]
            change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
            admin.incremental_alter_configs([change], request_timeout=timeout)[change].result(timeout)
            log.info(
                "set %s of the redelivery log %s", ", ".join(f"{n}={LOG_CONFIG[n]}" for n in missing), topic
            )
        return missing
    except (KafkaException, TimeoutError) as exc:
        log.warning(
            "cannot complete the configs of the redelivery log %s (%s): set segment.ms=%s and "
            "delete.retention.ms=%s on it, or compaction never reaches its newest week",
            topic,
            exc,
            CLEAN_MS,
            CLEAN_MS,
        )
        return []


def _source(entry: ConfigEntry) -> int:
    """Where a described config comes from (the client gives the enum's value or the enum)."""
    source: Any = entry.source
    return int(getattr(source, "value", source))


class RedeliveryLogView:
    """
    The log's entries as this process last read them; :meth:`refresh` reads what was appended since.

    Opens its consumer on first use; :meth:`close` closes it. An entry that cannot be decoded is logged and
    skipped (its dead letter then counts as round 1), never fatal.

    :param deadlines: the partition run's deadlines; each broker call is made under them.
    :param timeout_s: the timeout handed to a call (and the longest wait for another thread's refresh).
    :param idle_timeout_s: the longest time the broker may send neither records nor the log's end.
    :param clock: epoch milliseconds of the wall clock, as the broker's retention sees it (entries older than
        :data:`RETENTION_MS` are dropped).
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        topic: str,
        *,
        deadlines: CallDeadlines | None = None,
        timeout_s: float = 10.0,
        idle_timeout_s: float = 60.0,
        poll_s: float = 1.0,
        clock: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.kafka_config = kafka_config
        self.topic = topic
        self.where = f"{topic}[0]"
        self.deadlines = deadlines or CallDeadlines(self.where)
        self.timeout_s, self.idle_timeout_s, self.poll_s = timeout_s, idle_timeout_s, poll_s
        self.clock = clock
        self.state = log_state(kafka_config, topic)
        self.skipped = 0
        self._consumer: Consumer | None = None

    def get(self, key: bytes) -> Redelivery | None:
        found = self.state.entries.get(key)
        if found is None:
            return None
        try:
            return Redelivery.decode(found[0])
        except (ValueError, UnicodeDecodeError) as exc:
            self.skipped += 1
            log.warning(
                "%s: the entry of %r is not a redelivery log entry (%s); skipped", self.where, key, exc
            )
            return None

    def refresh(self) -> int:
        """Read what was committed to the log since this process last read it; the records read."""
        state, timeout = self.state, self.deadlines.timeout(self.timeout_s)
        self._acquire(state, timeout)
        try:
            before, start = state.read, state.position
            self._read_new(state, timeout)
            expired = state.expire(self.clock())
            read = state.read - before
            if read or expired:
                log.info(
                    "%s: read %s record(s) of the redelivery log from offset %s, %s expired; %s entries live",
                    self.where,
                    read,
                    start,
                    expired,
                    len(state.entries),
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
                raise _transient(
                    f"{self.where}: another partition run of this process has read nothing of the "
                    f"redelivery log for {timeout:g}s, and still holds it"
                )

    def _read_new(self, state: LogState, timeout: float) -> None:
        consumer = self._open()
        waits_for = f"the leader of {self.where}"
        try:
            with self.deadlines.call("get_watermark_offsets", timeout, waits_for):
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, 0), timeout=timeout, cached=False
                )
        except KafkaException as exc:
            if exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                state.forget()  # no redelivery yet (or the log was deleted)
                return
            raise RedeliveryLogError(
                f"{self.where}: cannot read the redelivery log's end: {exc.args[0].str()}"
            ) from exc
        if high < state.position:  # the log was recreated: what this process knew is gone
            log.warning(
                "%s: the redelivery log ends before offset %s; read again", self.where, state.position
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
            for message in scan.records():
                state.add(message)
        except ReadError as exc:  # a timeout is transient, a read failure when Kafka says it is retriable
            failed = RedeliveryLogError(f"{exc}: the redelivery log, after offset {state.position}")
            failed.transient = exc.transient or (exc.error is not None and exc.error.retriable()) or None
            raise failed from None
        finally:
            scan.close()

    def _open(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(reader_config(self.kafka_config))
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:  # no group to leave: returns at once
            self._consumer.close()
            self._consumer = None
