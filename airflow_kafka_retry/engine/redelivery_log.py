"""
The redelivery log: a compacted ``<topic>-redelivery-log`` topic, the round of each redelivered record.

A share-group topology redelivers due records to their source topic (``policy/share_redelivery.py``).

Key: the redelivered record's own coordinates, ``<source topic>/<partition>/<offset>`` (from its delivery
report); value: the :class:`~airflow_kafka_retry.policy.share_redelivery.Redelivery` as JSON (round, the
first source record's coordinates, first failure and due time). A tier run writes an entry in the same
Kafka transaction as the redelivered record and its offset commit, so a record the share consumer can read
(``share.isolation.level=read_committed``) always has its entry; the input lane reads the log to its end,
``read_committed``, after each piece of dead letters it reads, so the entry of every dead letter in the
piece is there.

One partition, ``cleanup.policy=compact,delete`` with :data:`RETENTION_MS` (7 days): an entry is needed
only until its record is dead-lettered again and read; a dead letter read later than that is round 1 again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from airflow_kafka_retry.engine.clients import KafkaConfigError
from airflow_kafka_retry.engine.reading import ReadError, TopicReader
from airflow_kafka_retry.engine.topics import ensure_log_topic
from airflow_kafka_retry.policy.client_names import REDELIVERY_LOG_SUFFIX
from airflow_kafka_retry.policy.share_redelivery import Redelivery

log = logging.getLogger(__name__)

LOG_SUFFIX = REDELIVERY_LOG_SUFFIX
RETENTION_MS = 7 * 24 * 3600 * 1000
_MAX_TOPIC = 249


def redelivery_log_topic(topic: str) -> str:
    """The redelivery log of the topology whose ``topic`` is ``topic``."""
    name = f"{topic}{LOG_SUFFIX}"
    if len(name) > _MAX_TOPIC:
        raise KafkaConfigError(
            f"the redelivery log of topology topic {topic!r} would be named {name!r}, longer than Kafka's "
            f"{_MAX_TOPIC} characters; shorten the topology's topic"
        )
    return name


def ensure_redelivery_log(kafka_config: Mapping[str, Any], topic: str, *, timeout: float = 30.0) -> bool:
    """Create the log topic (one partition, compacted, 7 days) if it is missing; True when it was created."""
    config = {"cleanup.policy": "compact,delete", "retention.ms": str(RETENTION_MS)}
    return ensure_log_topic(kafka_config, topic, what="the redelivery log", config=config, timeout=timeout)


class RedeliveryLogView:
    """
    What the log says, kept up to date by :meth:`refresh`: only entries appended since are read.

    Opens its reader on first use; :meth:`close` closes it. An entry that cannot be read is logged and
    skipped (its dead letter then counts as round 1), never fatal.
    """

    def __init__(self, kafka_config: Mapping[str, Any], topic: str, *, timeout_s: float = 10.0) -> None:
        self.kafka_config = kafka_config
        self.topic = topic
        self.timeout_s = timeout_s
        self.entries: dict[bytes, Redelivery] = {}
        self.position = 0  # the next offset to read
        self.skipped = 0
        self._reader: TopicReader | None = None

    def get(self, key: bytes) -> Redelivery | None:
        return self.entries.get(key)

    def refresh(self) -> None:
        """Read what was committed to the log since the last refresh (nothing when there is no log yet)."""
        reader = self._open()
        try:
            end = reader.consumer.get_watermark_offsets(
                TopicPartition(self.topic, 0), timeout=self.timeout_s
            )[1]
        except KafkaException as exc:
            if exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                return  # no redelivery yet
            raise ReadError(
                f"{self.topic}[0]: cannot read the redelivery log's end: {exc.args[0].str()}"
            ) from exc
        if end <= self.position:
            return
        for message in reader.read(self.topic, 0, start=self.position):
            offset = message.offset() or 0
            self.position = offset + 1
            key, value = message.key(), message.value()
            if key is None:
                continue
            if value is None:
                self.entries.pop(key, None)
                continue
            try:
                self.entries[key] = Redelivery.decode(value)
            except (ValueError, UnicodeDecodeError) as exc:
                self.skipped += 1
                log.warning("%s[0]@%s: not a redelivery log entry (%s); skipped", self.topic, offset, exc)

    def _open(self) -> TopicReader:
        if self._reader is None:
            self._reader = TopicReader(self.kafka_config)
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.__exit__()
            self._reader = None
