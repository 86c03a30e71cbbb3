"""
Fixtures for the dead letters other frameworks write (issue 41): Kafka 4.4 share groups and Kafka Connect.

* ``share_dlq_kafka`` -- a single-node Apache Kafka 4.4 formatted with ``share.version=2`` (session scope:
  one per xdist worker that runs such a test; the suite's own 4.1.2 broker is not touched).
* ``connect_worker`` -- a Kafka Connect 4.3.1 standalone worker against that broker (session scope).

Both come from Maven Central jars cached outside git. When the jars are not cached and Maven cannot reach
Maven Central, the tests that need them are skipped with Maven's words as the reason; any other failure
(no Java, a broker or worker that does not start) fails them.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from airflow_kafka_retry.sandbox.kafka_jars import KafkaJarsError, ensure_kafka_jars
from airflow_kafka_retry.sandbox.scratch_topics import CLIENT_LOGGER
from testkit import share_groups
from testkit.kafka_connect import ConnectWorker, ensure_connect_jars

if TYPE_CHECKING:
    from confluent_kafka import Message

    from airflow_kafka_retry.sandbox.kafka import ApacheKafka

#: What Maven prints when it cannot reach the repository (as opposed to an artifact that is not there).
_UNREACHABLE = re.compile(
    r"Could not transfer|Unknown ?host|Network is unreachable|Connection refused|Connect timed out|"
    r"No route to host|Temporary failure in name resolution|did not finish within",
    re.IGNORECASE,
)


def resolve_or_skip(resolve: Callable[[], object], what: str) -> None:
    """Run ``resolve``; skip the test when Maven Central cannot be reached, fail on any other error."""
    try:
        resolve()
    except KafkaJarsError as exc:
        if _UNREACHABLE.search(str(exc)):
            pytest.skip(f"{what}: Maven Central is unreachable and the jars are not cached: {exc}")
        raise


@pytest.fixture(scope="session")
def share_dlq_kafka() -> Iterator[ApacheKafka]:
    version = share_groups.SHARE_DLQ_KAFKA_VERSION
    resolve_or_skip(lambda: ensure_kafka_jars(version), f"Apache Kafka {version}")
    with share_groups.share_dlq_kafka() as kafka:
        yield kafka


@pytest.fixture(scope="session")
def connect_worker(share_dlq_kafka: ApacheKafka) -> Iterator[ConnectWorker]:
    resolve_or_skip(ensure_connect_jars, "Kafka Connect")
    with ConnectWorker(bootstrap=share_dlq_kafka.bootstrap) as worker:
        yield worker


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def read_exactly(bootstrap: str, topic: str, count: int, *, timeout: float = 60.0) -> list[Message]:
    """
    The records of ``topic`` once it holds ``count`` of them, read from the start of every partition.

    Dead letters are written asynchronously (a share group's about 2 s after the reject), so the read waits
    for ``count``, then goes on to the end of every partition: more than ``count`` is an error, and so is
    fewer when ``timeout`` passes.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("dlq-reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
            "logger": CLIENT_LOGGER,
        }
    )
    deadline = time.monotonic() + timeout
    try:
        partitions: list[int] = []
        while not partitions:  # the topic is created by the framework on its first dead letter
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no topic {topic} within {timeout:.0f}s")
            found = consumer.list_topics(topic, timeout=5).topics.get(topic)
            partitions = list(found.partitions) if found is not None and found.error is None else []
            if not partitions:
                time.sleep(0.2)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: list[Message] = []
        eof: set[int] = set()
        while len(records) < count or len(eof) < len(partitions):  # an EOF is dropped by a later record
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{topic}: {len(records)} of {count} records within {timeout:.0f}s")
            for message in consumer.consume(100, 0.2):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    eof.add(int(message.partition() or 0))
                elif error is not None:
                    raise RuntimeError(f"reading {topic}: {error}")
                else:
                    records.append(message)
                    eof.discard(int(message.partition() or 0))
        assert len(records) == count, f"{topic}: {len(records)} records, expected exactly {count}"
        return records
    finally:
        consumer.close()
