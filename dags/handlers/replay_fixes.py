"""An example replay transform for the ``orders`` DLT: copy it and write the fix your records need."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_kafka_retry.dlt.records import DltRecord


def add_default_customer(record: DltRecord) -> DltRecord | None:
    """Orders that failed for a missing customer get the default one; records that are not JSON stay out."""
    try:
        order = json.loads(record.value or b"")
    except ValueError:
        return None  # left in the DLT: a replay never moves it, a later one may (after another fix)
    order.setdefault("customer", "walk-in")
    return dataclasses.replace(record, value=json.dumps(order).encode())
