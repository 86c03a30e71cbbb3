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

A process reads the log incrementally (``engine/logs/compacted_log.py``); an entry older than
:data:`RETENTION_MS` is dropped as the broker drops it. So memory is bounded by the entries in flight
(redelivered records not yet dead-lettered again, or accepted by the share consumer less than
:data:`RETENTION_MS` ago), not by the log's history. A fresh process reads the live entries, tombstones
younger than :data:`CLEAN_MS` and the segments not yet cleaned (rolled every :data:`CLEAN_MS`). Every
broker call is made under the partition run's deadlines; a timeout, or a broker that does not answer,
fails the attempt as transient (:class:`RedeliveryLogError` names the log): the run is retried.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException

from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
from airflow_kafka_retry.engine.logs.compacted_log import CompactedLogView
from airflow_kafka_retry.engine.logs.log_topic import ensure_compacted_log, log_topic_name
from airflow_kafka_retry.policy.client_names import REDELIVERY_LOG_SUFFIX
from airflow_kafka_retry.policy.routing.share_redelivery import Redelivery

log = logging.getLogger(__name__)

LOG_SUFFIX = REDELIVERY_LOG_SUFFIX
RETENTION_MS = 7 * 24 * 3600 * 1000
#: How often the log's active segment rolls (so that compaction reaches it) and how long a tombstone stays.
CLEAN_MS = 3600 * 1000
LOG_CONFIG = {
    "cleanup.policy": "compact,delete",
    "retention.ms": str(RETENTION_MS),
    "segment.ms": str(CLEAN_MS),
    "delete.retention.ms": str(CLEAN_MS),
}
#: The configs an existing log gets if it lacks them (a log made by an earlier version): without
#: ``segment.ms`` the active segment (7 days by default) is never compacted, and a new process reads a week.
COMPLETED = ("segment.ms", "delete.retention.ms")
_WHAT = "the redelivery log"


class RedeliveryLogError(RuntimeError):
    """
    The redelivery log could not be created or read; the message names it.

    ``transient``: the broker did not answer in time (None: the cause's Kafka error says).
    """

    transient: bool | None = None


def redelivery_log_topic(topic: str) -> str:
    """The redelivery log of the topology whose ``topic`` is ``topic``."""
    return log_topic_name(
        topic,
        LOG_SUFFIX,
        what=f"the redelivery log of topology topic {topic!r}",
        fix="shorten the topology's topic",
        error=KafkaConfigError,
    )


def ensure_redelivery_log(
    kafka_config: Mapping[str, Any],
    topic: str,
    *,
    timeout: float = 30.0,
    deadlines: CallDeadlines | None = None,
) -> bool:
    """
    Create the log topic (:data:`LOG_CONFIG`) if it is missing, else complete its configs; True if created.

    Under ``deadlines``; a timeout is a transient :class:`RedeliveryLogError`.
    """
    deadlines = deadlines or CallDeadlines(topic)
    limit = deadlines.timeout(timeout)
    try:
        return ensure_compacted_log(
            kafka_config,
            topic,
            what=_WHAT,
            config=LOG_CONFIG,
            complete=COMPLETED,
            timeout=limit,
            deadlines=deadlines,
        )
    except TimeoutError as exc:
        error = RedeliveryLogError(f"creating the redelivery log {topic} timed out after {limit:g}s")
        error.transient = True
        raise error from exc
    except KafkaException as exc:  # transient or not, as its Kafka error says
        raise RedeliveryLogError(f"cannot look up the redelivery log {topic}: {exc.args[0].str()}") from exc
    except KafkaConfigError as exc:
        error = RedeliveryLogError(str(exc))
        if exc.__cause__ is None:  # created, but not in the metadata in time: a slow cluster
            error.transient = True
        raise error from exc


class RedeliveryLogView(CompactedLogView):
    """
    The log's entries as this process last read them (:class:`CompactedLogView`), decoded on lookup.

    An entry that cannot be decoded is logged and skipped (its dead letter then counts as round 1).
    """

    what, error, log, retention_ms = _WHAT, RedeliveryLogError, log, RETENTION_MS
    skipped = 0  #: entries that could not be decoded

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
