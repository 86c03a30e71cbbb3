"""
The bench data: a retry tier of 1 KB records, every one of them due, on the embedded broker.

A topology ``<name>`` (attempts 3, fixed 30 s back-off) gives ``<name>-retry-1`` (the tier the
cases drain), ``<name>-retry-2`` (where transient failures go) and ``<name>-dlt``. Record ``i``
goes to partition ``i % partitions`` with the key ``%09d``. Two workloads:

* ``spring`` (the default): every record carries the 13 headers a Spring service's
  ``DeadLetterPublishingRecoverer`` and ``RetryTopicHeaders`` write when it sends a failed record to
  its first retry topic: ``kafka_original-*`` (topic, partition, offset, timestamp, timestamp type),
  the consumer group, ``kafka_exception-fqcn``/``-cause-fqcn``/``-message``/``-stacktrace`` (a Java
  stack trace of 20 lines), ``retry_topic-attempts`` (2), ``-backoff-timestamp`` (due 1 s before the
  data was produced) and ``-original-timestamp``: what a retry tier's records really carry;
* ``headerless``: the same records without any header (due at once, attempt 1).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from confluent_kafka import Producer

from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.policy.headers.failure import ExceptionInfo, Failure, forward_headers
from airflow_kafka_retry.policy.headers.header_policy import HeaderPolicy
from airflow_kafka_retry.policy.topology.file import load_topology

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.headers.codec import Header

VALUE_BYTES = 1024
FATAL_CLASS = "bench.handler.InvalidRecord"


@dataclass(frozen=True)
class Workload:
    """One produced tier: what the cases read."""

    name: str
    topology_path: str
    topic: str  # the tier the cases drain
    retry_topic: str  # where transient failures go
    dlt_topic: str
    records: int
    partitions: int
    bootstrap: str
    headers: str = "spring"  # spring | headerless

    @property
    def failing(self) -> int:
        return len(range(0, self.records, 100))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def write_topology(name: str, folder: Path) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "topic": name,
                "group_id": f"{name}-svc",
                "attempts": 3,
                "backoff": {"kind": "fixed", "delay": "30s"},
                "not_retryable": [FATAL_CLASS],
            }
        )
    )
    return path


WORKLOADS = ("spring", "headerless")

#: What Spring's recoverer writes for a listener that failed on a timeout (20 lines of Java stack trace).
SPRING_EXCEPTION = ExceptionInfo(
    fqcn="org.springframework.kafka.listener.ListenerExecutionFailedException",
    message=(
        "Listener method 'public void com.example.orders.OrderListener.onOrder(java.lang.String)' "
        "threw exception"
    ),
    stacktrace="org.springframework.kafka.listener.ListenerExecutionFailedException: Listener failed\n"
    + "".join(
        f"\tat com.example.orders.pipeline.Stage{i}.invoke(Stage{i}.java:{40 + i})\n" for i in range(19)
    ),
    cause_fqcn="java.net.SocketTimeoutException",
    key=False,
)


def spring_headers(name: str, partition: int, due_ms: int) -> list[Header]:
    """The 13 headers of a record a Spring service sent from ``name`` to its first retry topic."""
    failure = Failure(
        topic=name,
        partition=partition,
        offset=123_456,
        timestamp_ms=due_ms - 30_000,
        timestamp_type=1,
        consumer_group=f"{name}-svc",
        next_attempt=2,
        due_ms=due_ms,
        exception=SPRING_EXCEPTION,
    )
    return forward_headers([], failure, HeaderPolicy())


def produce(
    bootstrap: str, name: str, records: int, partitions: int, folder: Path, *, headers: str = "spring"
) -> Workload:
    """
    Create the topology's topics and produce ``records`` due records to its tier 1.

    ``headers``: a workload.
    """
    if headers not in WORKLOADS:
        raise ValueError(f"unknown workload {headers!r}; known: {', '.join(WORKLOADS)}")
    topology = load_topology(write_topology(name, folder))
    ensure_topics(topology, {"bootstrap.servers": bootstrap}, partitions=partitions)
    tier = topology.tier(1)
    due = int(time.time() * 1000) - 1_000
    headers_of = [spring_headers(name, p, due) if headers == "spring" else None for p in range(partitions)]
    value = (b"0123456789abcdef" * (VALUE_BYTES // 16 + 1))[:VALUE_BYTES]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 262_144,
            "enable.idempotence": True,
        }
    )
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for i in range(records):
        p = i % partitions
        while True:
            try:
                producer.produce(
                    tier.topic,
                    value=value,
                    key=b"%09d" % i,
                    partition=p,
                    headers=headers_of[p],
                    on_delivery=delivered,
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    if left or errors:
        raise RuntimeError(f"producing the bench data failed: {left} undelivered, errors {errors[:3]}")
    names = {t.index: t.topic for t in topology.tiers}
    return Workload(
        name=name,
        topology_path=str(topology.source),
        topic=tier.topic,
        retry_topic=names[2],
        dlt_topic=topology.dlt_topic or "",
        records=records,
        partitions=partitions,
        bootstrap=bootstrap,
        headers=headers,
    )
