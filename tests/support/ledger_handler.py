"""Test handlers whose behaviour is written in each record's value, with a processed-ledger file.

A value is JSON ``{"id": ..., "mode": ...}``; modes: ``ok``; ``transient:K`` (fails while the
attempt is <= K); ``permanent`` (always fails, retryable); ``fatal`` (not retryable); values
that are not JSON fail the deserializer. Successful ids are appended to the file named by
``AKR_LEDGER`` (one line per success, O_APPEND so several processes may share it).
"""

from __future__ import annotations

import json
import os

from airflow_kafka_retry import BatchFailedError


class TransientError(RuntimeError):
    pass


class PermanentError(RuntimeError):
    pass


class InvalidOrder(Exception):
    """Configured as not_retryable in the test topologies."""


def decode(value: bytes) -> dict:
    return json.loads(value.decode("utf-8"))


def _check(record) -> None:
    mode = record.value["mode"]
    if mode == "ok":
        return
    if mode.startswith("transient:"):
        if record.attempt <= int(mode.split(":")[1]):
            raise TransientError(f"id {record.value['id']} fails on attempt {record.attempt}")
        return
    if mode == "permanent":
        raise PermanentError(f"id {record.value['id']} always fails")
    if mode == "fatal":
        raise InvalidOrder(f"id {record.value['id']} is invalid")
    raise AssertionError(f"unknown mode {mode!r}")


def _write(ids: list) -> None:
    if not ids:
        return
    path = os.environ["AKR_LEDGER"]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(f"{i}\n" for i in ids).encode())
    finally:
        os.close(fd)


def indexed(records) -> None:
    """Reports the first failure with BatchFailedError(index, cause)."""
    done = []
    for i, record in enumerate(records):
        try:
            _check(record)
        except Exception as exc:
            _write(done)
            raise BatchFailedError(i, exc) from exc
        done.append(record.value["id"])
    _write(done)


def whole_batch(records) -> None:
    """All or nothing: any failure fails the whole batch with that exception (no index)."""
    for record in records:
        _check(record)
    _write([r.value["id"] for r in records])


def slow_indexed(records) -> None:
    """``indexed`` with a pause per batch, so a test can kill the process mid-run."""
    import time

    time.sleep(float(os.environ.get("AKR_SLOW_S", "0.2")))
    indexed(records)


def bad_index(records) -> None:
    """Breaks the contract: reports a failure index outside the batch."""
    raise BatchFailedError(5, RuntimeError("boom"))


def stamped(records) -> None:
    """``indexed``, noting when each record came: ``id due handled`` (ms) lines in ``<ledger>.stamps``."""
    import time

    now = time.time_ns() / 1_000_000
    fd = os.open(os.environ["AKR_LEDGER"] + ".stamps", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(f"{r.value['id']} {r.due_ms} {now}\n" for r in records).encode())
    finally:
        os.close(fd)
    indexed(records)
