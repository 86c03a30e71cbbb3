"""Replay transforms used by the DLT tests (values are the ledger's JSON ``{"id": ..., "mode": ...}``)."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_kafka_retry.dlt.records import DltRecord


def _with_mode(record: DltRecord, mode: str) -> DltRecord:
    try:
        value = json.loads(record.value)
    except ValueError:  # the bad-json records: rebuild the value from the key
        value = {"id": record.key.decode()}
    value["mode"] = mode
    return dataclasses.replace(
        record, value=json.dumps(value).encode(), headers=(*record.headers, ("fixed-by", b"dlt-test"))
    )


def fix(record: DltRecord) -> DltRecord:
    """The bug is fixed: the record now succeeds."""
    return _with_mode(record, "ok")


def fix_even_leave_out_odd(record: DltRecord) -> DltRecord | None:
    """Fix records with an even id; leave the odd ones out of the replay."""
    return fix(record) if int(record.key) % 2 == 0 else None


def identity(record: DltRecord) -> DltRecord:
    return record


def raise_on_second(record: DltRecord) -> DltRecord:
    if record.offset == 1:
        raise ValueError("cannot fix this one")
    return record


def wrong_type(record: DltRecord) -> str:
    return "not a record"


def str_value(record: DltRecord) -> DltRecord:
    return dataclasses.replace(record, value=record.value.decode())


def move_offset(record: DltRecord) -> DltRecord:
    return dataclasses.replace(record, offset=record.offset + 1)


# A transform that stops a replay in its move step (the second call for DLT record 0@4) until released.
GATE = threading.Event()
BLOCKED = threading.Event()
_calls: Counter = Counter()


def gated(record: DltRecord) -> DltRecord:
    _calls[(record.partition, record.offset)] += 1
    if (record.partition, record.offset) == (0, 4) and _calls[(0, 4)] == 2:
        BLOCKED.set()
        GATE.wait(120)
    return record
