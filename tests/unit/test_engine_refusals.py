"""Which produce errors are a destination refusing a record for good (``engine/kafka/refusals.py``)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from airflow_kafka_retry.engine.kafka.refusals import refusal


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (KafkaError.MSG_SIZE_TOO_LARGE, False),  # that record (or its batch): too large for the topic
        (KafkaError.INVALID_RECORD, False),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, True),  # the whole topic: no WRITE
        (KafkaError._UNKNOWN_TOPIC, True),  # gone
        (KafkaError.UNKNOWN_TOPIC_OR_PART, True),
        (KafkaError._MSG_TIMED_OUT, None),  # the cluster's: the run fails and is retried
        (KafkaError.NOT_ENOUGH_REPLICAS, None),
        (KafkaError._FENCED, None),
        (KafkaError._STATE, None),
    ],
)
def test_only_a_destinations_own_refusals_count(code: int, expected: bool | None) -> None:
    assert refusal(KafkaError(code)) is expected
