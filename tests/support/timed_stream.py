"""A scripted stream of records for the Airflow end-to-end tests, and what ``timed_handler`` wrote of it.

Each record's value names its id and the attempt it succeeds on (``tests/support/timed_handler.py`` reads
it), so every record's path through the tiers is known in advance; the handler appends one JSON line per
record it handled to the ledger file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from confluent_kafka import Producer


def scripted(ids: range) -> dict[str, int]:
    """id -> the attempt it succeeds on (2: retry-1, 3: retry-2, 0: never, DLT)."""
    return {str(i): (2, 3, 0)[i % 3] for i in ids}


def produce_slowly(
    bootstrap: str, topic: str, records: dict[str, int], *, partitions: int, rate: float
) -> None:
    """Produce ``records`` (from :func:`scripted`) ``rate`` a second, round-robin over ``partitions``."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, (rid, succeed_on) in enumerate(records.items()):
        producer.produce(
            topic,
            key=rid.encode(),
            partition=i % partitions,
            value=json.dumps({"id": rid, "succeed_on": succeed_on}).encode(),
        )
        producer.poll(0)
        time.sleep(1 / rate)
    assert producer.flush(30) == 0


def read_ledger(path: Path) -> list[dict]:
    """The handler's ledger: one dict per handled record (empty before the first)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def json_column(value: str | dict) -> dict:
    """A JSON column of the metadata DB: text on SQLite, decoded already by the PostgreSQL driver."""
    return value if isinstance(value, dict) else json.loads(value)
