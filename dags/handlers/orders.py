"""An example retry handler for the ``orders`` topology: copy it and put your own processing in."""

from __future__ import annotations

import json
import logging

from airflow_kafka_retry import BatchFailedError

log = logging.getLogger(__name__)


def decode(value: bytes) -> dict:
    """Value deserializer: a record that is not JSON is dead-lettered with its original bytes."""
    return json.loads(value)


def handle(records: list) -> None:
    """Process a batch of due orders; report the first failure by its index (Spring's batch semantics)."""
    for index, record in enumerate(records):
        try:
            process_order(record.value, attempt=record.attempt)
        except Exception as exc:
            raise BatchFailedError(index, exc) from exc


def process_order(order: dict, *, attempt: int) -> None:
    if "customer" not in order:
        raise ValueError(f"order {order.get('id')!r} has no customer")
    log.info("order %s processed on attempt %s", order.get("id"), attempt)
