"""A scripted stream of records for the Airflow end-to-end tests, and what ``timed_handler`` wrote of it.

Each record's value names its id and the attempt it succeeds on (``tests/support/timed_handler.py`` reads
it), so every record's path through the tiers is known in advance; the handler appends one JSON line per
record it handled to the ledger file.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from confluent_kafka import Producer

from tests.support import ledger


def scripted(ids: range) -> dict[str, int]:
    """id -> the attempt it succeeds on (2: retry-1, 3: retry-2, 0: never, DLT)."""
    return {str(i): (2, 3, 0)[i % 3] for i in ids}


def produce_script(
    bootstrap: str, topic: str, records: dict[str, int], *, partitions: int, rate: float | None = None
) -> None:
    """Produce ``records`` (from :func:`scripted`), ``rate`` a second (None: at once), round-robin."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, (rid, succeed_on) in enumerate(records.items()):
        producer.produce(
            topic,
            key=rid.encode(),
            partition=i % partitions,
            value=json.dumps({"id": rid, "succeed_on": succeed_on}).encode(),
        )
        producer.poll(0)
        if rate:
            time.sleep(1 / rate)
    assert producer.flush(30) == 0


def read_ledger(path: Path) -> list[dict]:
    """The handler's ledger: one dict per handled record (empty before the first)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def json_column(value: str | dict) -> dict:
    """A JSON column of the metadata DB: text on SQLite, decoded already by the PostgreSQL driver."""
    return value if isinstance(value, dict) else json.loads(value)


def lateness(entries: list[dict]) -> tuple[float, float]:
    """Median and largest seconds between each entry's due time and its handling."""
    late = [(e["handled_ms"] - e["due_ms"]) / 1000 for e in entries]
    return statistics.median(late), max(late)


def watched_dead_letters(notes: list[dict]) -> list[tuple[str, int, int]]:
    """Where the DLT records the DLT-watch task reported to the notifier sit, once per report (sorted)."""
    return sorted(
        (d["dlt_topic"], d["dlt_partition"], d["dlt_offset"])
        for n in notes
        if n["task_id"] == "watch_dlt"
        for d in n["summary"]["dead_letters"]
    )


def dlt_coordinates(bootstrap: str, topic: str) -> list[tuple[str, int, int]]:
    """Where the records on the DLT sit, read from the topic."""
    return sorted((m.topic(), m.partition(), m.offset()) for m in ledger.read_all(bootstrap, topic))
