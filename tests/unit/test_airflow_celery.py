"""``testkit/airflow_celery.py`` without Airflow or a broker: its settings, and a worker's kill.

The kill is checked on a fake worker (a shell that forks one child into its own process group, as the task
supervisor does with a task, and one into the worker's): every process it forked is gone when
:meth:`CeleryWorkers.kill` returns.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from airflow_kafka_retry.sandbox.processes import ManagedProcess
from testkit.airflow_celery import (
    CeleryWorkers,
    alive,
    celery_env,
    descendants,
    result_backend,
)

PG = "postgresql+psycopg2://airflow:secret@127.0.0.1:5432/airflow_1"

# the "worker": a child in its own session and process group (a task process) and one in the worker's
FAKE_WORKER = "setsid sleep 600 & sleep 600 & wait"


def test_the_result_backend_is_the_metadata_db_with_its_driver():
    assert result_backend(PG) == "db+" + PG
    with pytest.raises(ValueError, match="PostgreSQL"):
        result_backend("sqlite:////tmp/airflow.db")


def test_the_settings_name_the_executor_broker_and_backend():
    env = celery_env("redis://:pw@127.0.0.1:6380/0", PG, concurrency=1)
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://:pw@127.0.0.1:6380/0"
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"] == "db+" + PG
    assert env["AIRFLOW__CELERY__WORKER_CONCURRENCY"] == "1"


def test_workers_need_the_celery_settings(tmp_path):
    with pytest.raises(ValueError, match="CeleryExecutor"):
        CeleryWorkers(tmp_path, {"AIRFLOW__CORE__EXECUTOR": "LocalExecutor"})


def _until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _groups(pid: int) -> set[int]:
    """The process groups of ``pid``'s descendants (those still there)."""
    found = set()
    for child in descendants(pid):
        with contextlib.suppress(ProcessLookupError):
            found.add(os.getpgid(child))
    return found


def test_a_kill_leaves_no_process_the_worker_forked_even_in_another_group(tmp_path: Path):
    workers = CeleryWorkers(tmp_path, celery_env("redis://:pw@127.0.0.1:1/0", PG), ["w"])
    worker = ManagedProcess(
        ["sh", "-c", FAKE_WORKER], log_path=tmp_path / "w.log", name="fake worker"
    ).start()
    workers.processes["w"] = worker
    try:
        assert worker.pid is not None
        # both sleeps started, one in a group of its own (setsid runs in the forked child a moment later)
        _until(lambda: len(descendants(worker.pid)) >= 2 and _groups(worker.pid) - {worker.pid})  # type: ignore[arg-type]
        forked = descendants(worker.pid)
        killed = workers.kill("w")
        assert set(forked) <= set(killed)
        assert not [pid for pid in killed if alive(pid)]
        assert not worker.running
    finally:
        worker.kill()
