"""A handler for the key-order tests: each value says its key, its sequence number and how often it fails.

A value is JSON ``{"k": key, "s": seq, "f": n}``: the record fails while its attempt is <= n (99: always);
``"fatal": true`` fails it as not retryable. Each success appends ``key seq`` to the file named by
``AKR_LEDGER``, in the order handled, so a test reads each key's handled sequence back.
"""

from __future__ import annotations

import json
import os

from airflow_kafka_retry import BatchFailedError


class Flaky(RuntimeError):
    pass


class Fatal(Exception):
    """Configured as not_retryable in the key-order tests."""


def _check(record) -> str:
    data = json.loads(record.value)
    if data.get("fatal"):
        raise Fatal(f"{data['k']} {data['s']} is fatal")
    if record.attempt <= data.get("f", 0):
        raise Flaky(f"{data['k']} {data['s']} fails on attempt {record.attempt}")
    return f"{data['k']} {data['s']}"


def _write(lines: list[str]) -> None:
    if not lines:
        return
    fd = os.open(os.environ["AKR_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(f"{line}\n" for line in lines).encode())
    finally:
        os.close(fd)


def handle(records) -> None:
    """Reports the first failure with BatchFailedError(index, cause); a call never sees one key twice."""
    done: list[str] = []
    keys = [r.key for r in records if r.key is not None]
    assert len(keys) == len(set(keys)), "a handler call saw two records of one key"
    for i, record in enumerate(records):
        try:
            done.append(_check(record))
        except Exception as exc:
            _write(done)
            raise BatchFailedError(i, exc) from exc
    _write(done)
