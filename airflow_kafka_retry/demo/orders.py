"""
The demo's order service: the orders it receives, its handler, and the bug that gets fixed.

Runs inside the Airflow workers (the tier tasks call :func:`handle_orders`), so it imports no
Airflow. Each order's fate follows from its id:

- ``ok``: processed on the main topic;
- ``flaky``: the payment service times out once, processed on retry-1;
- ``slow-flaky``: times out twice, processed on retry-2;
- ``bug``: a CHF order, which the service cannot price until the bug is fixed: every attempt
  fails, it ends in the DLT; after the fix it is replayed and processed;
- ``invalid``: no customer, rejected as invalid (not retryable): straight to ``-validation-dlt``;
- ``undecodable``: the producer wrote a truncated value; it cannot be decoded (never retried),
  goes to the DLT, fails again when replayed and ends in the parking topic.

The service keeps its own books, as a real one keeps its database: every handling is appended
(order id, topic, attempt, due and handled times, outcome; never the order itself) to
``$AKR_DEMO_DIR/handled.jsonl``. The fix is "deployed" by creating ``$AKR_DEMO_DIR/fix-deployed``.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from airflow_kafka_retry.errors import BatchFailedError
from airflow_kafka_retry.policy.headers.replay import is_replayed

FATES = ("ok", "flaky", "slow-flaky", "bug", "invalid", "undecodable")
#: What each fate means, for the final table's legend.
FATE_NOTES = {
    "ok": "processed at once",
    "flaky": "payment timeout once",
    "slow-flaky": "payment timeout twice",
    "bug": "CHF orders: a bug until fixed",
    "invalid": "no customer: rejected",
    "undecodable": "truncated value",
}
DEMO_DIR_ENV = "AKR_DEMO_DIR"
LEDGER_FILE = "handled.jsonl"
ALERTS_FILE = "alerts.jsonl"
FIX_FLAG = "fix-deployed"


class InvalidOrder(ValueError):
    """An order that can never be processed (not retryable; routed to ``-validation-dlt``)."""


class PaymentServiceTimeout(RuntimeError):
    """A transient failure: the order goes through on a later attempt."""


class UnsupportedCurrency(RuntimeError):
    """The bug: the service has no exchange rate for CHF until the fix is deployed."""


def fate(order_id: int) -> str:
    """The fate of an order (deterministic; about 70 % ok, 5-10 % each of the others)."""
    bucket = zlib.crc32(f"order-{order_id}".encode()) % 20
    return {0: "invalid", 1: "flaky", 2: "flaky", 3: "slow-flaky", 4: "bug", 5: "undecodable"}.get(
        bucket, "ok"
    )


def order_record(order_id: int) -> tuple[bytes, bytes]:
    """The key and value the shop's producer writes for order ``order_id``."""
    kind = fate(order_id)
    order = {
        "id": order_id,
        "customer": None if kind == "invalid" else f"c-{order_id % 37}",
        "amount": round(5 + (order_id * 7.31) % 200, 2),
        "currency": "CHF" if kind == "bug" else "EUR",
    }
    value = json.dumps(order).encode()
    if kind == "undecodable":
        value = value[: len(value) // 2]  # a truncated write
    return str(order_id).encode(), value


def decode_order(value: bytes) -> dict[str, Any]:
    """The value deserializer: JSON; a value that does not decode is never retried."""
    return json.loads(value)


def handle_orders(records: list) -> None:
    """The handler (a batch listener): records before a failure succeeded, the failed one is named."""
    fixed = _fix_deployed()
    lines: list[dict[str, Any]] = []
    try:
        for index, record in enumerate(records):
            line = {
                "id": record.key.decode() if isinstance(record.key, bytes) else str(record.key),
                "topic": record.topic,
                "attempt": record.attempt,
                "due_ms": record.due_ms,
                "handled_ms": int(time.time() * 1000),
                "replayed": is_replayed(record.headers),
                "ok": False,
            }
            lines.append(line)
            try:
                _process(record.value, record.attempt, fixed)
            except Exception as exc:
                line["error"] = type(exc).__name__
                raise BatchFailedError(index, exc) from exc
            line["ok"] = True
    finally:
        _append(LEDGER_FILE, lines)


def _process(order: dict[str, Any], attempt: int, fixed: bool) -> None:
    kind = fate(order["id"])
    if not order.get("customer"):
        raise InvalidOrder(f"order {order['id']} has no customer")
    if kind == "flaky" and attempt < 2 or kind == "slow-flaky" and attempt < 3:
        raise PaymentServiceTimeout(f"payment service timed out for order {order['id']}")
    if order["currency"] == "CHF" and not fixed:
        raise UnsupportedCurrency(f"no exchange rate for CHF (order {order['id']})")


def record_alert(context: Any) -> None:
    """A DLT notifier (``f(context)``): notes how many records the run or the DLT watch reported."""
    summary = context["kafka_retry_summary"]
    totals = summary.get("totals", {})
    count = totals["new_records"] if "new_records" in totals else sum(totals.get("dlt_topics", {}).values())
    ti = context["ti"]
    _append(
        ALERTS_FILE,
        [{"dag_id": ti.dag_id, "task_id": ti.task_id, "records": count, "at_ms": int(time.time() * 1000)}],
    )


def demo_dir() -> Path | None:
    value = os.environ.get(DEMO_DIR_ENV)
    return Path(value) if value else None


def _fix_deployed() -> bool:
    where = demo_dir()
    return where is not None and (where / FIX_FLAG).exists()


def _append(name: str, lines: list[dict[str, Any]]) -> None:
    where = demo_dir()
    if where is None or not lines:
        return
    fd = os.open(
        where / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
    )  # several task processes share it
    try:
        os.write(fd, "".join(json.dumps(line) + "\n" for line in lines).encode())
    finally:
        os.close(fd)


def read_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON lines of a ledger or alerts file (none when it does not exist yet)."""
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                yield json.loads(line)
