"""
confluent-kafka clients for the engine: configuration, metadata, lifecycle.

``kafka_config`` is a plain librdkafka configuration (at least ``bootstrap.servers``), as the
Kafka provider keeps it in a ``kafka_default`` connection's extra. Nothing here logs it.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

# Keys the engine sets itself; a user value for them would break its guarantees.
_ENGINE_OWNED = (
    "enable.auto.commit",
    "enable.auto.offset.store",
    "isolation.level",
    "enable.partition.eof",
    "group.id",
    "transactional.id",
    "enable.idempotence",
)
_CONSUMER_ONLY = (
    "auto.offset.reset",
    "session.timeout.ms",
    "max.poll.interval.ms",
    "fetch.",
    "group.",
    "heartbeat.interval.ms",
    "partition.assignment.strategy",
    "isolation.level",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "queued.",
    "max.partition.fetch.bytes",
)
_PRODUCER_ONLY = (
    "acks",
    "linger.ms",
    "batch.",
    "compression.",
    "transaction.timeout.ms",
    "delivery.timeout.ms",
    "message.timeout.ms",
    "queue.buffering.",
    "retries",
    "enable.idempotence",
    "transactional.id",
)


#: Bounds on what a consumer prefetches (librdkafka's defaults allow 64 MB queued and 50 MB per fetch
#: per consumer, so memory would multiply with parallelism). A drain consumer reads one partition,
#: a chunk at a time: a few MB ahead keeps its fetches flowing. User values win.
PREFETCH_DEFAULTS: dict[str, int] = {
    "queued.max.messages.kbytes": 4096,
    "queued.min.messages": 2000,
    "max.partition.fetch.bytes": 1_048_576,
    "fetch.max.bytes": 4_194_304,
    # once a bound is reached librdkafka pauses the partition's fetches for this long (default 1 s,
    # which would stall a consumer that empties its queue in a few milliseconds)
    "fetch.queue.backoff.ms": 10,
}

#: librdkafka's ``message.max.bytes`` for the engine's producer (below Kafka's 100 MiB request limit).
PRODUCER_MAX_MESSAGE_BYTES = 100_000_000

#: librdkafka's own log lines (disconnects, retries) go to Python logging, so Airflow task logs get them.
CLIENT_LOGGER = logging.getLogger("airflow_kafka_retry.rdkafka")


class KafkaConfigError(ValueError):
    """The Kafka configuration is unusable; the message names the key (never a secret value)."""


class TopicsMissing(KafkaConfigError):
    """Topics the call needs do not exist on the cluster (``topics``: their names)."""

    def __init__(self, message: str, topics: list[str]) -> None:
        super().__init__(message)
        self.topics = topics


class NotAuthorized(KafkaConfigError):
    """
    The principal may not use resources the call needs: Kafka answered ``*_AUTHORIZATION_FAILED``.

    Never a :class:`TopicsMissing`: creating the topics would not help, an ACL would. The message names the
    principal (when the configuration says it), each resource and the operation.
    """

    def __init__(self, message: str, resources: list[str]) -> None:
        super().__init__(message)
        self.resources = resources
        self.transient = False  # another attempt gets the same answer


#: Kafka's answers that a principal lacks an ACL (a topic's, a group's, a transactional id's, the cluster's).
AUTHORIZATION_CODES = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)


#: librdkafka settings that name a file this host must hold (``probe``: the system's CA store).
FILE_KEYS = (
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.keystore.location",
    "ssl.crl.location",
    "ssl.engine.location",
)


def check_local_files(kafka_config: Mapping[str, Any], where: str) -> None:
    """
    Every file the configuration names exists here; a KafkaConfigError names each key, path and ``where``.

    librdkafka says only ``ssl.ca.location failed: ... BIO lib``. On Spark the configuration travels to the
    executors, and so must each file it names: the error says on which host one is missing.
    """
    import os

    missing = [
        f"{key}={value!r}"
        for key in FILE_KEYS
        if isinstance(value := kafka_config.get(key), str) and value and value != "probe"
        if not os.path.isfile(value) and not os.path.isdir(value)
    ]
    if missing:
        raise KafkaConfigError(
            f"the Kafka configuration names file(s) that do not exist {where}: {', '.join(missing)}; each "
            "must exist on the driver and on every executor (mount it there, or use a path they all share)"
        )


def principal_of(kafka_config: Mapping[str, Any] | None) -> str:
    """``User:<sasl.username>`` when the configuration names it, else words that say who (never a secret)."""
    name = (kafka_config or {}).get("sasl.username")
    return f"User:{name}" if name else "this connection's principal"


def _common(kafka_config: Mapping[str, Any], drop: tuple[str, ...]) -> dict[str, Any]:
    if "bootstrap.servers" not in kafka_config:
        raise KafkaConfigError("the Kafka configuration has no 'bootstrap.servers'")
    config = {
        k: v
        for k, v in kafka_config.items()
        if not any(k == d or k.startswith(d) for d in drop) and k not in _ENGINE_OWNED
    }
    config.setdefault("logger", CLIENT_LOGGER)
    if isinstance(config.get("oauth_cb"), str):  # 'module:function', as it travels to Spark executors
        from airflow_kafka_retry.engine.kafka.loading import load_callable

        config["oauth_cb"] = load_callable(config["oauth_cb"], what="oauth_cb")
    return config


def consumer_config(kafka_config: Mapping[str, Any], group_id: str) -> dict[str, Any]:
    config = _common(kafka_config, _PRODUCER_ONLY)
    config.setdefault("auto.offset.reset", "earliest")
    # A drain reads to the end of the partition and stops: do not let the broker hold an empty
    # fetch for long (librdkafka's default is 500 ms per fetch).
    config.setdefault("fetch.wait.max.ms", 100)
    for key, value in PREFETCH_DEFAULTS.items():
        config.setdefault(key, value)
    # a fetch must hold at least one partition's share and the largest message
    config["fetch.max.bytes"] = max(
        config["fetch.max.bytes"], config["max.partition.fetch.bytes"], config.get("message.max.bytes", 0)
    )
    config.update(
        {
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "allow.auto.create.topics": False,
        }
    )
    for key in ("auto.offset.reset", "session.timeout.ms", "fetch.wait.max.ms"):
        if key in kafka_config:
            config[key] = kafka_config[key]
    return config


def admin_config(kafka_config: Mapping[str, Any]) -> dict[str, Any]:
    """An ``AdminClient``'s configuration: the connection and security settings, no client-kind ones."""
    config = _common(kafka_config, _CONSUMER_ONLY + _PRODUCER_ONLY)
    config["allow.auto.create.topics"] = False  # asking for a topic's metadata must not create it
    return config


def producer_config(kafka_config: Mapping[str, Any], transactional_id: str | None) -> dict[str, Any]:
    config = _common(kafka_config, _CONSUMER_ONLY)
    # The engine forwards records the cluster already accepted: the topic's max.message.bytes on the
    # broker is the limit that counts, not librdkafka's 1 MB default (a 10 MB record must route).
    config.setdefault("message.max.bytes", PRODUCER_MAX_MESSAGE_BYTES)
    # A destination deleted during a run must fail the chunk, not be re-created by the broker with
    # its default layout (partition count) behind the topology's back.
    config.update({"enable.idempotence": True, "acks": "all", "allow.auto.create.topics": False})
    if transactional_id:
        config["transactional.id"] = transactional_id
    return config


@contextmanager
def open_consumer(kafka_config: Mapping[str, Any], group_id: str) -> Iterator[Consumer]:
    consumer = Consumer(consumer_config(kafka_config, group_id))
    try:
        yield consumer
    finally:
        consumer.close()


@contextmanager
def open_producer(kafka_config: Mapping[str, Any], transactional_id: str | None) -> Iterator[Producer]:
    producer = Producer(producer_config(kafka_config, transactional_id))
    try:
        yield producer
    finally:
        # A transactional producer has nothing to flush: commit_transaction flushed what was committed, and
        # what is left belongs to a failed transaction. Flushing a fenced (fatal) one raises and then runs
        # delivery callbacks with that exception set, masking the run's own error.
        if transactional_id is None:
            try:
                producer.flush(10)
            except KafkaException as exc:
                CLIENT_LOGGER.debug("producer flush on close failed: %s", exc.args[0])


def partition_counts(
    client: Consumer | Producer | AdminClient,
    topics: list[str],
    timeout: float = 10.0,
    *,
    kafka_config: Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """
    Partition count of each topic; a KafkaConfigError names every topic that does not exist.

    A topic the principal may not describe is reported as such (:class:`NotAuthorized`, naming the principal
    from ``kafka_config`` when given), never as missing: Kafka tells the two apart.
    """
    counts: dict[str, int] = {}
    missing: list[str] = []
    refused: list[str] = []
    for topic in topics:
        try:
            metadata = client.list_topics(topic, timeout=timeout)
        except KafkaException as exc:
            raise KafkaConfigError(f"cannot read metadata of topic {topic!r}: {exc}") from exc
        info = metadata.topics.get(topic)
        if info is not None and info.error is not None and info.error.code() in AUTHORIZATION_CODES:
            refused.append(topic)
        elif info is None or info.error is not None or not info.partitions:
            missing.append(topic)
        else:
            counts[topic] = len(info.partitions)
    if refused:
        raise NotAuthorized(
            f"{principal_of(kafka_config)} is not authorized to DESCRIBE topic(s) {', '.join(refused)} "
            "(Kafka: TOPIC_AUTHORIZATION_FAILED; READ or WRITE on a topic implies DESCRIBE): grant this use "
            "the ACLs `airflow-kafka-retry topology acls FILE` prints for its role",
            refused,
        )
    if missing:
        raise TopicsMissing(
            f"topic(s) {', '.join(missing)} do not exist on the cluster; create the topology's topics first "
            "(airflow-kafka-retry topology create-topics FILE)",
            missing,
        )
    return counts


def from_log_start(
    consumer: Consumer, tps: Sequence[TopicPartition], timeout: float = 5.0
) -> list[TopicPartition]:
    """
    ``tps`` with ``OFFSET_BEGINNING`` replaced by each partition's log start, asked of the broker.

    librdkafka resolves a logical offset with an offset query of its own, and the partition's first fetch
    starts 0.5 s after the assignment, 1 s after a ``committed()`` call (measured with Apache Kafka 4.1.2
    and confluent-kafka 2.16: ``bench/first_fetch.py``). One ListOffsets request first takes a few
    milliseconds and the fetch starts at once: a group that never committed (a tier's first records, a
    watcher taken over before any run committed) is read a second sooner. Where the broker does not answer
    (a partition the client's metadata does not know yet, a timeout), the offset stays ``OFFSET_BEGINNING``
    for librdkafka to resolve, as before; so do the partitions after it. Should the log start move before
    the fetch (retention), ``auto.offset.reset`` (earliest) applies, as it would have.
    """
    resolved: list[TopicPartition] = []
    asking = True
    for tp in tps:
        start = tp
        if asking and tp.offset == OFFSET_BEGINNING:
            try:
                low, _ = consumer.get_watermark_offsets(
                    TopicPartition(tp.topic, tp.partition), timeout=timeout, cached=False
                )
            except KafkaException as exc:
                CLIENT_LOGGER.debug("%s[%s]: log start not read (%s)", tp.topic, tp.partition, exc.args[0])
                asking = False
            else:
                if low is not None and low >= 0:
                    start = TopicPartition(tp.topic, tp.partition, low)
        resolved.append(start)
    return resolved


def init_transactions(producer: Producer, timeout: float, *, topic: str | None = None) -> None:
    """
    ``producer.init_transactions``, retried on retriable errors until ``timeout`` seconds passed.

    A broker whose transaction coordinator is still loading or moving answers ``NOT_COORDINATOR`` or
    ``COORDINATOR_LOAD_IN_PROGRESS`` (a fresh Apache Kafka does, for its first seconds); the client
    raises those as retriable and the call is to be repeated. Any other error, or the deadline, raises.

    A new producer knows only its bootstrap address, which librdkafka does not use for the coordinator
    query; asked before the metadata named a broker, it retries on a 500 ms timer. So with ``topic`` (one
    the producer writes to) its metadata is asked first, a millisecond's request: measured on Apache
    Kafka 4.1.2 with confluent-kafka 2.16, a new producer's ``init_transactions`` took 0.5 s in 1 of 4
    cases without it, never with it.

    When it raises, ``producer`` is closed: librdkafka goes on asking for a producer id after a call that
    timed out, and an answer landing after a later producer's with the same transactional id bumps the
    epoch again and fences that one (an engine's next attempt, or the next run, of the same partition).
    """
    deadline = time.monotonic() + timeout
    if topic is not None:
        try:
            producer.list_topics(topic, timeout=max(min(timeout, 5.0), 0.1))
        except KafkaException as exc:  # init_transactions below waits and reports what is wrong
            CLIENT_LOGGER.debug("metadata of %s before init_transactions failed: %s", topic, exc.args[0])
    while True:
        try:
            producer.init_transactions(max(deadline - time.monotonic(), 1.0))
            return
        except KafkaException as exc:
            if not coordinator_busy(exc) or time.monotonic() >= deadline:
                close_uninitialised(producer)
                raise
            time.sleep(0.2)


def close_uninitialised(producer: Producer) -> None:
    """
    Close a transactional producer whose ``init_transactions`` did not finish; it returns at once.

    No transaction can be open, so the abort ``close()`` begins with fails at once ("conflicting
    init_transactions call"), and after ``purge`` its flush has nothing to wait for. Later calls on the
    producer raise ``RuntimeError`` ("Producer has been closed").
    """
    producer.purge()
    try:
        producer.close()  # its RuntimeWarning about that abort is filtered below: nothing went wrong
    except KafkaException as exc:
        CLIENT_LOGGER.debug("closing a producer whose init_transactions failed: %s", exc.args[0])


# close_uninitialised's close() warns that its abort failed, which it must (no transaction): not in task logs
warnings.filterwarnings(
    "ignore",
    message="Producer abort_transaction failed during close",
    category=RuntimeWarning,
    module=__name__,
)

#: What a broker answers while a group or transaction coordinator loads or moves.
_COORDINATOR_BUSY = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)


def coordinator_busy(exc: KafkaException) -> bool:
    """Whether ``exc`` is retriable or a coordinator not ready yet (the call is to be repeated)."""
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and (err.retriable() or err.code() in _COORDINATOR_BUSY)
