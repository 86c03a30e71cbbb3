"""
Back-off retries of a real share group, for tests and the bench: its consumer, and the tier runs.

:class:`ShareQueue` is a real ``confluent_kafka.ShareConsumer`` (explicit acknowledgement) in a thread of its
own that answers each delivery as ``decide(key, attempt)`` says (ACCEPT or REJECT), reading the round of a
redelivered record from its ``retry_topic-attempts`` header as a user's consumer would, and records every
delivery (:class:`Delivery`). :func:`drain_share_topology` runs the input lane and every retry tier of a
``on_due: redeliver`` topology once with the local engine: a bench or test calls it in a loop, which is how
the tiers are triggered there (the topology DAG's watcher does it in Airflow).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from airflow_kafka_retry.policy.headers.codec import BACKOFF_TIMESTAMP, read_attempts, read_due_ms
from airflow_kafka_retry.sandbox.scratch_topics import CLIENT_LOGGER

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.summary import RunSummary
    from airflow_kafka_retry.policy.headers.codec import Header
    from airflow_kafka_retry.policy.topology.model import Topology

#: The group configs of a share group whose rejected records a topology retries.
RETRIED_GROUP_CONFIGS = {
    "share.auto.offset.reset": "earliest",
    "errors.deadletterqueue.copy.record.enable": "true",  # key and value in the dead letter: redeliverable
    "share.isolation.level": "read_committed",  # never a redelivery of an aborted tier transaction
}


@dataclass(frozen=True)
class Delivery:
    """One delivery to the share consumer: which record, on which round, produced and due when."""

    key: bytes
    topic: str
    partition: int
    offset: int
    attempt: int  # retry_topic-attempts, 1 when absent (the source record)
    timestamp_ms: int  # the record's (CreateTime: when it was produced, a redelivery's when redelivered)
    due_ms: int | None  # retry_topic-backoff-timestamp of a redelivered record
    received_ms: int
    accepted: bool


class ShareQueue:
    """
    A share consumer of ``group`` on ``topics`` that accepts or rejects as ``decide(key, attempt)`` says.

    Use as a context manager; :attr:`deliveries` grows while it runs. A consumer error stops it and is
    raised by :meth:`check` (and on exit).
    """

    def __init__(
        self, bootstrap: str, group: str, topics: list[str], decide: Callable[[bytes, int], bool]
    ) -> None:
        self.bootstrap, self.group, self.topics, self.decide = bootstrap, group, topics, decide
        self.deliveries: list[Delivery] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"share-queue-{group}", daemon=True)

    def __enter__(self) -> ShareQueue:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        if self._thread.is_alive():
            raise TimeoutError(f"share consumer of {self.group} did not stop within 30s")
        self.check()

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"share consumer of {self.group} failed: {self.error}") from self.error

    def snapshot(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def _run(self) -> None:
        from confluent_kafka import AcknowledgeType, ShareConsumer

        consumer = ShareConsumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "share.acknowledgement.mode": "explicit",
                "logger": CLIENT_LOGGER,
            }
        )
        try:
            consumer.subscribe(self.topics)
            while not self._stop.is_set():
                answered = False
                for message in consumer.poll(0.5):
                    if message.error() is not None:
                        raise RuntimeError(str(message.error()))
                    headers = cast("list[Header]", message.headers() or [])
                    attempt = read_attempts(headers)
                    key = bytes(message.key() or b"")
                    accepted = self.decide(key, attempt)
                    consumer.acknowledge(
                        message, AcknowledgeType.ACCEPT if accepted else AcknowledgeType.REJECT
                    )
                    answered = True
                    has_due = any(name == BACKOFF_TIMESTAMP for name, _ in headers)
                    with self._lock:
                        self.deliveries.append(
                            Delivery(
                                key,
                                str(message.topic()),
                                int(message.partition() or 0),
                                int(message.offset() or 0),
                                attempt,
                                message.timestamp()[1],
                                read_due_ms(headers) if has_due else None,
                                time.time_ns() // 1_000_000,
                                accepted,
                            )
                        )
                if answered:
                    failed = {str(tp): e for tp, e in consumer.commit_sync(30.0).items() if e is not None}
                    if failed:
                        raise RuntimeError(f"acknowledgements failed: {failed}")
        except BaseException as exc:  # reported by check(): the test or bench fails with it
            self.error = exc
        finally:
            consumer.close()


def drain_share_topology(topology: Topology, kafka_config: Mapping[str, Any]) -> list[RunSummary]:
    """One run of the input lane and of every retry tier, in this process (what is due now)."""
    from airflow_kafka_retry.engine.drain.options import DrainOptions
    from airflow_kafka_retry.engine.local.engine import run_local

    options = DrainOptions(
        handler="airflow_kafka_retry.engine.drain.redelivery:no_handler", call_timeout_s=10.0
    )
    return [
        run_local(topology, tier, kafka_config, options, in_process=True)
        for tier in (topology.tier(0), *topology.retry_tiers)
    ]
