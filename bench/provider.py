"""
The Kafka provider's way: ``ConsumeFromTopicOperator`` with an ``apply_function`` producing the 1 %.

The operator subscribes with the connection's consumer group, consumes batches of 1000, calls
:func:`apply` on every message and commits at the end of each batch (``commit_cadence``
``end_of_batch``); it stops after ``max_messages`` (the tier's record count). :func:`apply`
produces a failing record to the retry topic or the DLT with one ``retry_topic-attempts`` header,
as the raw loop does. Nothing here is transactional, and offsets are committed before the produced
records are acknowledged: the operator offers no way to do otherwise.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import TYPE_CHECKING, Any

from confluent_kafka import Producer

from bench.handler import OK, TRANSIENT, fate

if TYPE_CHECKING:
    from bench.workload import Workload

CONN_ID = "bench_kafka"
_ATTEMPTS = [("retry_topic-attempts", (3).to_bytes(4, "big"))]
_target: dict[str, Any] = {}


def apply(message: Any) -> None:
    """The operator's ``apply_function``: produce the record to its next topic if it fails."""
    outcome = fate(message.key())
    if outcome != OK:
        topic = _target["retry"] if outcome == TRANSIENT else _target["dlt"]
        producer: Producer = _target["producer"]
        producer.produce(
            topic, value=message.value(), key=message.key(), headers=_ATTEMPTS, partition=message.partition()
        )
        producer.poll(0)


def run_provider_operator(workload: Workload, group: str) -> tuple[int, dict[str, Any]]:
    """Run the operator over the whole tier; returns the records it read and when the first came."""
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="bench-airflow-"))
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
        {
            "conn_type": "kafka",
            "extra": {
                "bootstrap.servers": workload.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                # Tansu lets a new member join only after about half the session timeout (45 s by default);
                # 6 s is the smallest value real Kafka accepts, and what the test suite uses
                "session.timeout.ms": 6000,
            },
        }
    )
    from airflow.providers.apache.kafka.operators.consume import ConsumeFromTopicOperator

    _target.update(
        retry=workload.retry_topic,
        dlt=workload.dlt_topic,
        producer=Producer({"bootstrap.servers": workload.bootstrap, "linger.ms": 5}),
    )
    read = [0]
    started = time.perf_counter()
    first: list[float] = []

    def counted(message: Any) -> None:
        if not first:
            first.append(time.perf_counter() - started)
        read[0] += 1
        apply(message)

    operator = ConsumeFromTopicOperator(
        task_id="bench_consume",
        kafka_config_id=CONN_ID,
        topics=[workload.topic],
        apply_function=counted,
        commit_cadence="end_of_batch",
        max_messages=workload.records,
        max_batch_size=1000,
        poll_timeout=30,
    )
    operator.execute(context={})
    if _target["producer"].flush(60):
        raise RuntimeError("provider case: records left unacknowledged")
    # the group join: Tansu answers a new member's JoinGroup only after a delay
    return read[0], {"first_record_s": round(first[0], 3) if first else None}
