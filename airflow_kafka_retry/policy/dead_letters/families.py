"""
Every framework's dead letters, read into one description: where the record came from and why it failed.

A dead letter's family is detected per record from its headers. Names and encodings are taken from the
sources that write them:

* ``spring-retry-topic`` / ``spring-dead-letter``: spring-kafka ``DeadLetterPublishingRecoverer``
  (``maybeAddOriginalHeaders``, ``addExceptionInfoHeaders``) with ``KafkaHeaders``' names: the
  ``kafka_original-*`` / ``kafka_exception-*`` spelling of non-blocking retries
  (``DeadLetterPublishingRecovererFactory``, which also writes ``retry_topic-attempts`` as the *next*
  attempt's number) and the ``kafka_dlt-*`` spelling of a plain recoverer. Partition ``putInt``, offset and
  timestamp ``putLong``, the rest UTF-8 (see :mod:`.headers.codec`). The record's own timestamp is when it was
  dead-lettered (the recoverer sets none: the producer's clock). This provider writes these families too.
* ``kafka-connect``: apache/kafka ``connect/runtime/.../errors/DeadLetterQueueReporter.java``: the source
  record's key, value, headers and *timestamp* are kept, and with ``errors.deadletterqueue.context.headers
  .enable=true`` it adds ``__connect.errors.topic``, ``.partition``, ``.offset`` (decimal text),
  ``.connector.name``, ``.task.id``, ``.stage``, ``.class.name``, ``.exception.class.name``,
  ``.exception.message``, ``.exception.stacktrace``. It never overwrites a header already present. No
  consumer group, no delivery count, and no time of failure (the record's timestamp is the source's).
* ``share-group``: apache/kafka ``server/src/main/java/org/apache/kafka/server/share/dlq/
  ShareGroupDLQStateManager.java`` (KIP-1191, Kafka 4.4): the broker writes ``__dlq.errors.topic``,
  ``.partition``, ``.offset`` (decimal text), ``.group``, ``.delivery.count`` (``Short.toString``, when
  known) and ``.message`` (``ShareGroupDLQManager``'s "Offset rejected by client." or "Offset delivery
  count exceeded the threshold."), the DLQ write time as the timestamp, and the source's key and value only
  with ``errors.deadletterqueue.copy.record.enable=true`` (never its headers). No exception class, no
  original timestamp. Without the copy, key and value are null: there is nothing to replay.
* ``airflow``: apache/airflow ``providers/apache/kafka/.../triggers/shared_stream.py``
  (``KafkaSharedStreamProducer._dead_letter``) produces key and value only: no header at all, so it cannot
  be told from any other headerless record; a caller names it (``assume``), else such records are
  ``unknown``. The timestamp is when it was dead-lettered.

**Precedence.** A record can carry several families (Connect keeps the headers of a Spring dead letter it
failed on; a Spring service keeps Connect's). The one used is the family whose recognised header comes
*last* in the record: every writer appends its headers after those it kept, so that is the latest writer,
and its coordinates are the topic the record was read from when it failed. The two Spring spellings are one
writer's: each Spring field is read from the used spelling, else the other. Headers of every family seen
that cannot be read are reported by name (:attr:`DeadLetter.unreadable`); nothing here raises on a record.

Pure: no I/O, no Airflow import.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from airflow_kafka_retry.policy.dead_letters.decoding import INT16, INT32, INT64, Header, HeaderReader
from airflow_kafka_retry.policy.headers.codec import (
    ATTEMPTS,
    DEAD_LETTER_NAMES,
    ORIGINAL_TIMESTAMP,
    RETRY_TOPIC_NAMES,
    HeaderNames,
)

Family = Literal[
    "spring-retry-topic", "spring-dead-letter", "kafka-connect", "share-group", "airflow", "unknown"
]
FAMILIES: tuple[Family, ...] = (
    "spring-retry-topic",
    "spring-dead-letter",
    "kafka-connect",
    "share-group",
    "airflow",
    "unknown",
)
#: The dead-letter families a topology can take as its input, or name a queue with (``unknown`` names none).
INPUT_FAMILIES: tuple[Family, ...] = (
    "share-group",
    "kafka-connect",
    "spring-retry-topic",
    "spring-dead-letter",
    "airflow",
)

CONNECT_PREFIX = "__connect.errors."
CONNECT_TOPIC = CONNECT_PREFIX + "topic"
CONNECT_PARTITION = CONNECT_PREFIX + "partition"
CONNECT_OFFSET = CONNECT_PREFIX + "offset"
CONNECT_CONNECTOR = CONNECT_PREFIX + "connector.name"
CONNECT_TASK = CONNECT_PREFIX + "task.id"
CONNECT_STAGE = CONNECT_PREFIX + "stage"
CONNECT_CLASS = CONNECT_PREFIX + "class.name"
CONNECT_EXCEPTION = CONNECT_PREFIX + "exception.class.name"
CONNECT_MESSAGE = CONNECT_PREFIX + "exception.message"
CONNECT_STACKTRACE = CONNECT_PREFIX + "exception.stacktrace"

SHARE_PREFIX = "__dlq.errors."
SHARE_TOPIC = SHARE_PREFIX + "topic"
SHARE_PARTITION = SHARE_PREFIX + "partition"
SHARE_OFFSET = SHARE_PREFIX + "offset"
SHARE_GROUP = SHARE_PREFIX + "group"
SHARE_DELIVERY_COUNT = SHARE_PREFIX + "delivery.count"
SHARE_MESSAGE = SHARE_PREFIX + "message"

#: The fields of a description, as :attr:`DeadLetter.missing` names them.
FIELDS = (
    "original_topic",
    "original_partition",
    "original_offset",
    "original_timestamp",
    "failed_at",
    "group_or_connector",
    "failure_class",
    "failure_message",
    "delivery_count",
)
_SHARED_SPRING = RETRY_TOPIC_NAMES.original_consumer_group  # both Spring spellings use this one name
_SPRING_NAMES: dict[Family, frozenset[str]] = {
    "spring-retry-topic": frozenset((*RETRY_TOPIC_NAMES.originals, *RETRY_TOPIC_NAMES.exceptions)),
    "spring-dead-letter": frozenset((*DEAD_LETTER_NAMES.originals, *DEAD_LETTER_NAMES.exceptions)),
}
_SPRING_SPELLING: dict[Family, HeaderNames] = {
    "spring-retry-topic": RETRY_TOPIC_NAMES,
    "spring-dead-letter": DEAD_LETTER_NAMES,
}


def family_of_header(name: str) -> Family | None:
    """The family a header name marks, or None (Spring's shared consumer-group name marks neither)."""
    if name.startswith(SHARE_PREFIX):
        return "share-group"
    if name.startswith(CONNECT_PREFIX):
        return "kafka-connect"
    if name == _SHARED_SPRING:
        return None
    for family, names in _SPRING_NAMES.items():
        if name in names:
            return family
    return None


def families_seen(headers: Iterable[Header]) -> list[Family]:
    """The families whose headers a record carries, ordered by their last header (the latest writer last)."""
    last: dict[Family, int] = {}
    for position, (name, _) in enumerate(headers):
        family = family_of_header(name)
        if family is not None:
            last[family] = position
    return sorted(last, key=last.__getitem__)


@dataclass(frozen=True)
class DeadLetter:
    """
    One dead letter, whatever wrote it: where it came from, why it failed, and what its family lacks.

    :param family: the family read (see the module's precedence); ``families`` every family seen.
    :param original_timestamp_ms: when the source record was produced (Connect: the record's own timestamp).
    :param failed_at_ms: when it was dead-lettered (None for Connect, which keeps the source's timestamp).
    :param group: the consumer or share group; ``connector`` and ``task`` for Connect.
    :param failure_class: exception class (Spring: the value's, else the key's; Connect's); ``failure_cause``
        Spring's root-cause class; ``failure_message`` the exception's (share group: the broker's reason).
    :param delivery_count: deliveries before it was dead-lettered (share group: the broker's count; Spring
        retry topics: ``retry_topic-attempts`` less one, as Spring writes the next attempt's number).
    :param record_copied: False for a share-group dead letter without key and value (the broker copied no
        record: ``errors.deadletterqueue.copy.record.enable=false``): nothing to replay.
    :param missing: the :data:`FIELDS` this record does not give.
    :param unreadable: header name -> why it could not be read, for headers present but unreadable.
    """

    family: Family
    families: tuple[Family, ...] = ()
    original_topic: str | None = None
    original_partition: int | None = None
    original_offset: int | None = None
    original_timestamp_ms: int | None = None
    original_timestamp_type: str | None = None
    failed_at_ms: int | None = None
    group: str | None = None
    connector: str | None = None
    task: int | None = None
    stage: str | None = None
    executing_class: str | None = None
    failure_class: str | None = None
    failure_cause: str | None = None
    failure_message: str | None = None
    delivery_count: int | None = None
    record_copied: bool = True
    missing: tuple[str, ...] = ()
    unreadable: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain data (header strings as read: bound them before showing them)."""
        return {
            "family": self.family,
            "families": list(self.families),
            "original_topic": self.original_topic,
            "original_partition": self.original_partition,
            "original_offset": self.original_offset,
            "original_timestamp_ms": self.original_timestamp_ms,
            "failed_at_ms": self.failed_at_ms,
            "group": self.group,
            "connector": self.connector,
            "task": self.task,
            "stage": self.stage,
            "failure_class": self.failure_class,
            "failure_cause": self.failure_cause,
            "failure_message": self.failure_message,
            "delivery_count": self.delivery_count,
            "record_copied": self.record_copied,
            "missing": list(self.missing),
            "unreadable": dict(self.unreadable),
        }


def describe_dead_letter(
    headers: Sequence[Header] | None,
    timestamp_ms: int,
    *,
    key: bytes | None = b"",
    value: bytes | None = b"",
    assume: Family | None = None,
) -> DeadLetter:
    """
    Describe one dead letter from its headers, record timestamp, key and value (only their nullness).

    :param assume: the family of a record whose headers name none (``airflow``, or ``kafka-connect``
        without context headers); else such a record is ``unknown``.
    """
    headers = list(headers or ())
    reader = HeaderReader(headers)
    seen = families_seen(headers)
    family: Family = seen[-1] if seen else (assume or "unknown")
    at = timestamp_ms if timestamp_ms >= 0 else None
    fields: dict[str, Any]
    if family in _SPRING_SPELLING:
        fields = _spring(reader, family, at, seen)
    elif family == "kafka-connect":
        fields = _connect(reader, at)
    elif family == "share-group":
        fields = _share(reader, at, key is None and value is None)
    else:  # airflow, unknown, or a family assumed for a record without its headers
        fields = {"original_timestamp_ms": at if family == "kafka-connect" else None}
        fields["failed_at_ms"] = None if family == "kafka-connect" else at
    for other in seen[:-1]:  # the older families are decoded only to name their unreadable headers
        if other == "kafka-connect":
            _connect(reader, at)
        elif other == "share-group":
            _share(reader, at, False)
        elif family not in _SPRING_SPELLING:  # (a used Spring spelling reads the other one already)
            _spring(reader, other, at, seen)
    present = {
        "original_topic": fields.get("original_topic"),
        "original_partition": fields.get("original_partition"),
        "original_offset": fields.get("original_offset"),
        "original_timestamp": fields.get("original_timestamp_ms"),
        "failed_at": fields.get("failed_at_ms"),
        "group_or_connector": fields.get("group") or fields.get("connector"),
        "failure_class": fields.get("failure_class"),
        "failure_message": fields.get("failure_message"),
        "delivery_count": fields.get("delivery_count"),
    }
    return DeadLetter(
        family=family,
        families=tuple(seen),
        missing=tuple(name for name in FIELDS if present[name] is None),
        unreadable=tuple(sorted(reader.unreadable.items())),
        **fields,
    )


def _spring(reader: HeaderReader, family: Family, at: int | None, seen: list[Family]) -> dict[str, Any]:
    used = _SPRING_SPELLING[family]
    spellings = [used] + [n for f, n in _SPRING_SPELLING.items() if f != family and f in seen]

    def first(read: Any, attr: str, *args: Any) -> Any:
        values = [read(getattr(n, attr), *args) for n in spellings]  # every spelling read: all reported
        return next((v for v in values if v is not None), None)

    original_ts = first(reader.fixed, "original_timestamp", 8)
    retry_ts = reader.big_integer(ORIGINAL_TIMESTAMP)
    attempts = reader.attempts(ATTEMPTS)
    if attempts is not None and not 1 <= attempts <= 32_767:
        reader.unreadable[ATTEMPTS] = f"{attempts} is out of range 1..32767"
        attempts = None
    return {
        "original_topic": first(reader.text, "original_topic") or None,
        "original_partition": first(reader.fixed, "original_partition", 4),
        "original_offset": first(reader.fixed, "original_offset", 8),
        "original_timestamp_ms": original_ts if original_ts is not None else retry_ts,
        "original_timestamp_type": first(reader.text, "original_timestamp_type"),
        "failed_at_ms": at,
        "group": reader.text(_SHARED_SPRING),
        "failure_class": first(reader.text, "exception_fqcn") or first(reader.text, "key_exception_fqcn"),
        "failure_cause": first(reader.text, "exception_cause_fqcn"),
        "failure_message": first(reader.text, "exception_message")
        or first(reader.text, "key_exception_message"),
        "delivery_count": None if attempts is None else max(1, attempts - 1),
    }


def _connect(reader: HeaderReader, at: int | None) -> dict[str, Any]:
    partition = reader.decimal(CONNECT_PARTITION, INT32)
    offset = reader.decimal(CONNECT_OFFSET, INT64)
    for name, number in ((CONNECT_PARTITION, partition), (CONNECT_OFFSET, offset)):
        if number is not None and number < 0:  # the reporter writes -1 when it had no consumer record
            reader.unreadable[name] = f"{number}: Connect had no source record"
    topic = reader.text(CONNECT_TOPIC)
    if topic == "":
        reader.unreadable[CONNECT_TOPIC] = "empty: Connect had no source record"
    return {
        "original_topic": topic or None,
        "original_partition": partition if partition is not None and partition >= 0 else None,
        "original_offset": offset if offset is not None and offset >= 0 else None,
        "original_timestamp_ms": at,  # the reporter keeps the source record's timestamp
        "failed_at_ms": None,
        "connector": reader.text(CONNECT_CONNECTOR),
        "task": reader.decimal(CONNECT_TASK, INT32),
        "stage": reader.text(CONNECT_STAGE),
        "executing_class": reader.text(CONNECT_CLASS),
        "failure_class": reader.text(CONNECT_EXCEPTION),
        "failure_message": reader.text(CONNECT_MESSAGE),
    }


def _share(reader: HeaderReader, at: int | None, no_record: bool) -> dict[str, Any]:
    count = reader.decimal(SHARE_DELIVERY_COUNT, INT16)
    return {
        "original_topic": reader.text(SHARE_TOPIC) or None,
        "original_partition": reader.decimal(SHARE_PARTITION, INT32),
        "original_offset": reader.decimal(SHARE_OFFSET, INT64),
        "failed_at_ms": at,  # the broker stamps the DLQ write time
        "group": reader.text(SHARE_GROUP),
        "failure_message": reader.text(SHARE_MESSAGE),
        "delivery_count": count,
        "record_copied": not no_record,
    }
