"""A replay transform for the Spring order service's dead letters: the data fix that goes with a replay.

A ``poison`` order fails on every attempt (``OrderFailures.java``); the fix is in the data, so the replay
repairs each copy's value to ``ok`` and Spring's main listener processes it. Everything else is kept.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_kafka_retry.dlt.records import DltRecord


def repair_order(record: DltRecord) -> DltRecord:
    """``poison`` -> ``ok``; any other record unchanged."""
    if record.value == b"poison":
        return dataclasses.replace(record, value=b"ok")
    return record
