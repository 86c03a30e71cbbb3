"""The broker a bench runs on: the one ``--bootstrap`` names, or an Apache Kafka started for the run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psutil


@contextlib.contextmanager
def given_broker(bootstrap: str | None) -> Iterator[tuple[str, psutil.Process | None]]:
    """
    ``bootstrap`` (no process of ours: None), or a new Apache Kafka's, with its JVM's process.

    The broker started here is stopped when the block ends, however it ends.
    """
    if bootstrap:
        yield bootstrap, None
        return
    from airflow_kafka_retry.sandbox.kafka import ApacheKafka

    with ApacheKafka() as kafka:
        yield kafka.bootstrap, psutil.Process(kafka.pid) if kafka.pid else None
