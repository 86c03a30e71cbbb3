"""
The broker capability checks on plain clients, and the client helpers every check uses.

Each check gets (bootstrap, topic, timeout) and returns None when the capability is present, else the
reason it is missing; :mod:`.capabilities` runs them (each in its own thread, on its own topic).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from airflow_kafka_retry.engine.kafka.clients import init_transactions
from airflow_kafka_retry.sandbox.scratch_topics import CLIENT_LOGGER, admin_client

log = logging.getLogger(__name__)

SESSION_TIMEOUT_MS = "6000"


def probe_producer(bootstrap: str, **extra: object) -> Producer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "logger": CLIENT_LOGGER,
        "linger.ms": 20,
        "message.timeout.ms": 5000,
    }
    conf.update(extra)
    return Producer(conf)


def probe_consumer(bootstrap: str, **extra: object) -> Consumer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "logger": CLIENT_LOGGER,
        "group.id": f"caps-probe-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_TIMEOUT_MS,
    }
    conf.update(extra)
    return Consumer(conf)


def produce_records(
    producer: Producer,
    topic: str,
    values: list[bytes],
    *,
    timeout: float,
    timestamps: list[int] | None = None,
) -> list[tuple[KafkaError | None, int]]:
    """Produce to partition 0, flush, return ``(error, offset)`` per record in order."""
    results: list[tuple[KafkaError | None, int]] = [(None, -1)] * len(values)

    def report(i: int) -> Callable[[KafkaError | None, Message], None]:
        def cb(err: KafkaError | None, msg: Message) -> None:
            offset = msg.offset() if err is None else None
            results[i] = (err, offset if offset is not None else -1)

        return cb

    for i, value in enumerate(values):
        timestamp = timestamps[i] if timestamps is not None else 0  # 0: librdkafka stamps the time
        producer.produce(topic, value=value, partition=0, on_delivery=report(i), timestamp=timestamp)
    if producer.flush(timeout):
        raise TimeoutError(f"records to {topic} not delivered within {timeout:.0f}s")
    return results


def delivered_offsets(results: list[tuple[KafkaError | None, int]]) -> list[int]:
    errors = [err for err, _ in results if err is not None]
    if errors:
        raise KafkaException(errors[0])
    return [offset for _, offset in results]


# ----------------------------------------------------------------------------- checks
# Each check gets (bootstrap, topic, timeout) and returns None when the capability is present,
# else the reason it is missing. The topic already exists with one partition.


def check_abort_isolation(bootstrap: str, topic: str, timeout: float) -> str | None:
    producer = probe_producer(bootstrap, **{"transactional.id": f"{topic}-tx"})
    init_transactions(producer, timeout)
    producer.begin_transaction()
    for _ in range(3):
        producer.produce(topic, value=b"aborted", partition=0)
    producer.flush(timeout)  # on the broker before the abort, not purged client-side
    producer.abort_transaction(timeout)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed", partition=0)
    producer.commit_transaction(timeout)

    consumer = probe_consumer(
        bootstrap, **{"isolation.level": "read_committed", "enable.partition.eof": True}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values = _read_to_eof(consumer, until=b"committed", timeout=timeout)
    finally:
        consumer.close()
    aborted = values.count(b"aborted")
    if aborted:
        return f"read_committed consumer saw {aborted} of 3 records of an aborted transaction"
    return None


def _read_to_eof(consumer: Consumer, *, until: bytes, timeout: float) -> list[bytes]:
    """Values read until partition EOF after ``until`` was seen; ``TimeoutError`` at the deadline."""
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        error = msg.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                if until in values:
                    return values
                continue
            raise KafkaException(error)
        value = msg.value()
        if value is not None:
            values.append(value)
    raise TimeoutError(
        f"did not read {until!r} and then the partition end within {timeout:.0f}s "
        f"({len(values)} record(s) read)"
    )


def check_exact_high_watermark(bootstrap: str, topic: str, timeout: float) -> str | None:
    producer = probe_producer(bootstrap, **{"linger.ms": 50})
    offsets: list[int] = []
    for batch in range(3):  # three multi-record batches
        offsets += delivered_offsets(produce_records(producer, topic, [b"%d" % batch] * 5, timeout=timeout))
    log_end = max(offsets) + 1
    tp = TopicPartition(topic, 0)
    consumer = probe_consumer(bootstrap)
    try:
        _, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
    finally:
        consumer.close()
    admin = admin_client(bootstrap)  # keep a reference until the future resolves
    latest = admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=timeout)[tp].result(timeout).offset
    if high == log_end and latest == log_end:
        return None
    return (
        f"after 3 batches of 5 records the log end is {log_end}, but ListOffsets(latest) says {latest} "
        f"and get_watermark_offsets(cached=False) says {high}"
    )


def check_timestamp_lookup(bootstrap: str, topic: str, timeout: float) -> str | None:
    base = int(time.time() * 1000) - 3_600_000
    timestamps = [base + i * 1000 for i in range(10)]
    offsets = delivered_offsets(
        produce_records(probe_producer(bootstrap), topic, [b"t"] * 10, timeout=timeout, timestamps=timestamps)
    )
    expected = offsets[5]  # first record with timestamp >= base + 4500
    consumer = probe_consumer(bootstrap)
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 4500)], timeout=timeout)[0]
    finally:
        consumer.close()
    if found.error is None and found.offset == expected:
        return None
    return (
        f"offsets_for_times(ts of record {expected} - 500 ms) answered offset {found.offset}"
        f"{f' ({found.error})' if found.error else ''}, expected {expected}"
    )


SIZE_LIMIT = 10_000


def check_max_message_bytes(bootstrap: str, topic: str, timeout: float) -> str | None:
    # topic was created with max.message.bytes=SIZE_LIMIT (see _CHECKS)
    size = 5 * SIZE_LIMIT
    err, offset = produce_records(probe_producer(bootstrap), topic, [os.urandom(size)], timeout=timeout)[0]
    if err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return None
    if err is None:
        return (
            f"a {size}-byte record was accepted (offset {offset}) by a topic with "
            f"max.message.bytes={SIZE_LIMIT}"
        )
    return f"oversized record failed with {err.name()} instead of MSG_SIZE_TOO_LARGE"


def check_commit_metadata(bootstrap: str, topic: str, timeout: float) -> str | None:
    consumer = probe_consumer(bootstrap)
    try:
        stored = '{"probe":1}'
        consumer.commit(offsets=[TopicPartition(topic, 0, 0, metadata=stored)], asynchronous=False)
        [found] = consumer.committed([TopicPartition(topic, 0)], timeout=timeout)
        if found.metadata != stored:
            return f"committed metadata {stored!r}, read back {found.metadata!r}"
        return None
    finally:
        consumer.close()


def check_delete_records(bootstrap: str, topic: str, timeout: float) -> str | None:
    delivered_offsets(produce_records(probe_producer(bootstrap), topic, [b"d"] * 10, timeout=timeout))
    tp = TopicPartition(topic, 0, 5)
    # A throwaway client: if the broker drops this connection, nothing else shares it.
    admin = admin_client(bootstrap, **{"socket.timeout.ms": int(timeout * 1000)})
    try:
        futures = admin.delete_records([tp], request_timeout=timeout, operation_timeout=timeout)
        result = futures[tp].result(timeout)
    except KafkaException as exc:
        err = exc.args[0]
        hint = " (the broker dropped the connection)" if err.code() == KafkaError._TRANSPORT else ""
        return f"delete_records failed with {err.name()}: {err.str()}{hint}"
    low = getattr(result, "low_watermark", None)
    return None if low == 5 else f"delete_records(before offset 5) reported low watermark {low}"
