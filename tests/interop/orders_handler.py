"""The Python side of the Spring order service: the same order kinds, failing the same way.

A record's key is the order id and its value the kind (``ok``, ``transient:N``, ``invalid``, ``poison``),
as ``interop/spring-orders-service`` reads them (``OrderFailures.java``). Processed order ids are appended to
the file named by ``AKR_LEDGER`` as JSON lines ``{"id", "topic", "attempt"}``.
"""

from __future__ import annotations

import json
import os

from airflow_kafka_retry import BatchFailedError


class InvalidOrder(ValueError):
    """No customer (routed to ``orders-validation-dlt``), as ``OrderFailures.InvalidOrderException``."""


class PaymentTimeout(RuntimeError):
    """Transient, as ``OrderFailures.PaymentTimeoutException``."""


class PoisonOrder(RuntimeError):
    """Fails on every attempt, as ``OrderFailures.PoisonOrderException``."""


def decode(value: bytes) -> str:
    return value.decode("utf-8")


def check(kind: str, attempt: int) -> None:
    if kind == "ok":
        return
    if kind == "invalid":
        raise InvalidOrder("order has no customer")
    if kind == "poison":
        raise PoisonOrder("no exchange rate for CHF")
    if kind.startswith("transient:"):
        if attempt <= int(kind.split(":")[1]):
            raise PaymentTimeout(f"payment service timed out on attempt {attempt}")
        return
    raise InvalidOrder(f"unknown order kind: {kind}")


def handle(records) -> None:
    """The tier handler: processes in order, reports the first failure by index."""
    done = []
    try:
        for i, record in enumerate(records):
            try:
                check(record.value, record.attempt)
            except Exception as exc:
                raise BatchFailedError(i, exc) from exc
            done.append({"id": record.key.decode(), "topic": record.topic, "attempt": record.attempt})
    finally:
        if done:
            fd = os.open(os.environ["AKR_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, "".join(json.dumps(d) + "\n" for d in done).encode())
            finally:
                os.close(fd)
