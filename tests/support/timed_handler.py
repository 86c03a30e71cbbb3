"""A handler that records when it handled each record, for the end-to-end scheduler test.

A value is JSON ``{"id": ..., "succeed_on": N}``: the record fails (retryably) on every attempt
before ``N`` and succeeds on attempt ``N`` (0: never succeeds, ends in the DLT). Every handling is
appended as a JSON line ``{"id", "topic", "attempt", "due_ms", "handled_ms", "ok", "run"}`` to the
file named by ``AKR_TIMED_LEDGER`` (O_APPEND: several task processes share it; ``run``, the Airflow task
try that handled it as ``dag_id/run_id/task_id/try``, from the task's ``AIRFLOW_CTX_*`` variables, tells
them apart: in a topology DAG one run has a task per tier).
"""

from __future__ import annotations

import json
import os
import time

from airflow_kafka_retry import BatchFailedError


class NotYetError(RuntimeError):
    """The record is meant to fail on this attempt."""


_CTX = ("AIRFLOW_CTX_DAG_ID", "AIRFLOW_CTX_DAG_RUN_ID", "AIRFLOW_CTX_TASK_ID", "AIRFLOW_CTX_TRY_NUMBER")


def _run() -> str | None:
    """The Airflow task try this process handles records for, ``dag/run/task/try`` (None outside a task)."""
    parts = [os.environ.get(name) for name in _CTX]
    return "/".join(p for p in parts if p) if all(parts) else None


def _append(lines: list[dict]) -> None:
    if not lines:
        return
    fd = os.open(os.environ["AKR_TIMED_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(json.dumps(line) + "\n" for line in lines).encode())
    finally:
        os.close(fd)


def handle(records) -> None:
    lines = []
    try:
        for i, record in enumerate(records):
            value = json.loads(record.value)
            ok = value["succeed_on"] == record.attempt
            lines.append(
                {
                    "id": value["id"],
                    "topic": record.topic,
                    "attempt": record.attempt,
                    "due_ms": record.due_ms,
                    "handled_ms": int(time.time() * 1000),
                    "ok": ok,
                    "run": _run(),
                }
            )
            if not ok:
                raise BatchFailedError(i, NotYetError(f"id {value['id']} fails on attempt {record.attempt}"))
    finally:
        _append(lines)


def record_notification(context) -> None:
    """A DLT notifier (``f(context)``): appends the task id and the run summary to ``AKR_NOTIFY_LOG``."""
    line = {
        "task_id": context["ti"].task_id,
        "dag_id": context["ti"].dag_id,
        "summary": context["kafka_retry_summary"],
    }
    fd = os.open(os.environ["AKR_NOTIFY_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)
