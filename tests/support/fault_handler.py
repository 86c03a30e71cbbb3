"""The fault suite's handler: each record's fate is written in its ``fault-mode`` header.

Records carry ``fault-id`` and ``fault-mode`` headers (so records without a key, or with an
empty or huge value, are told apart the same way). Modes:

* ``ok``; ``transient:K`` (fails while the attempt is <= K); ``permanent`` (always fails,
  retryable); ``fatal`` (``InvalidOrder``, configured not retryable in the fault topologies);
* ``hang``: the call never returns (sleeps an hour; only a ``handler_timeout`` gets past it);
* ``exit`` / ``segv``: the first time (per topic and partition, marker files in ``$AKR_KILL_DIR``)
  the process ends with ``os._exit`` / a segmentation fault, afterwards the record succeeds.

``$AKR_SLOW_S`` pauses every call; ``$AKR_DELETE_TOPIC`` is deleted (on ``$AKR_DELETE_BOOTSTRAP``)
by the first call that sees it set, once (marker ``$AKR_DELETE_MARKER``). Successful ids are
appended to ``$AKR_LEDGER`` (O_APPEND: several processes may share it).
"""

from __future__ import annotations

import ctypes
import os
import time

from airflow_kafka_retry import BatchFailedError
from airflow_kafka_retry.policy.headers.codec import last_header

from tests.support.ledger_handler import InvalidOrder, PermanentError, TransientError, _write

ID_HEADER, MODE_HEADER = "fault-id", "fault-mode"


def record_id(record) -> str:
    return (last_header(record.headers, ID_HEADER) or b"?").decode()


def record_mode(record) -> str:
    return (last_header(record.headers, MODE_HEADER) or b"ok").decode()


def _once(name: str) -> bool:
    """True the first time ``name`` is claimed (a marker file created exclusively in $AKR_KILL_DIR)."""
    try:
        fd = os.open(
            os.path.join(os.environ["AKR_KILL_DIR"], name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644
        )
    except FileExistsError:
        return False
    os.write(fd, f"pid {os.getpid()}\n".encode())
    os.close(fd)
    return True


def _check(record) -> None:
    mode = record_mode(record)
    if mode == "ok":
        return
    if mode.startswith("transient:"):
        if record.attempt <= int(mode.split(":")[1]):
            raise TransientError(f"id {record_id(record)} fails on attempt {record.attempt}")
        return
    if mode == "permanent":
        raise PermanentError(f"id {record_id(record)} always fails")
    if mode == "fatal":
        raise InvalidOrder(f"id {record_id(record)} is invalid")
    if mode == "hang":
        time.sleep(3600)
        return
    if mode in ("exit", "segv"):
        if _once(f"{mode}.{record.topic}.{record.partition}"):
            if mode == "exit":
                os._exit(17)
            ctypes.string_at(0)  # SIGSEGV: the interpreter dies as it would in a broken C extension
        return
    raise AssertionError(f"unknown fault mode {mode!r}")


def _maybe_delete_topic() -> None:
    """The first call of the run deletes ``$AKR_DELETE_TOPIC``; every other call waits until it is gone.

    Partitions run in parallel: a call of another partition that went on while the first was still
    deleting could route to the topic before the deletion, and the case means "deleted before the run
    wrote to it".
    """
    topic = os.environ.get("AKR_DELETE_TOPIC")
    marker = os.environ.get("AKR_DELETE_MARKER")
    if not topic or not marker:
        return
    done = f"{marker}.done"
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        deadline = time.monotonic() + 60
        while not os.path.exists(done):
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic} was not deleted within 60 s") from None
            time.sleep(0.05)
        return
    os.close(fd)
    from airflow_kafka_retry.sandbox.scratch_topics import delete_topics

    delete_topics(os.environ["AKR_DELETE_BOOTSTRAP"], [topic])
    with open(done, "w"):
        pass


def indexed(records) -> None:
    """Reports the first failure with ``BatchFailedError(index, cause)``."""
    _maybe_delete_topic()
    if os.environ.get("AKR_SLOW_S"):
        time.sleep(float(os.environ["AKR_SLOW_S"]))
    done = []
    for i, record in enumerate(records):
        try:
            _check(record)
        except Exception as exc:
            _write(done)
            raise BatchFailedError(i, exc) from exc
        done.append(record_id(record))
    _write(done)


def whole_batch(records) -> None:
    """All or nothing: any failure (or hang) holds up the whole batch; the engine bisects it."""
    _maybe_delete_topic()
    for record in records:
        _check(record)
    _write([record_id(r) for r in records])
