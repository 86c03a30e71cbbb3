"""The environment of an Airflow deployment running the timed handler (``tests/support/timed_handler.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_kafka_retry.sandbox.airflow_stack import airflow_env

REPO = Path(__file__).parents[2]


def timed_airflow_env(
    home: Path,
    *,
    bootstrap: str,
    database_url: str,
    timed_ledger: Path,
    notify_log: Path,
    extra: dict[str, str] | None = None,
    **kwargs: Any,
) -> dict[str, str]:
    """
    ``airflow_env`` with ``kafka_default`` on ``bootstrap``, the handler's ledger and the DLT notifications'
    log (``AKR_TIMED_LEDGER``, ``AKR_NOTIFY_LOG``), the repository on the path (the DAG files import
    ``tests.support``) and the metadata DB at ``database_url``; ``extra`` and ``kwargs`` as ``airflow_env``'s.
    """
    return airflow_env(
        home,
        connections={"kafka_default": {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}},
        extra={"AKR_TIMED_LEDGER": str(timed_ledger), "AKR_NOTIFY_LOG": str(notify_log), **(extra or {})},
        pythonpath=[REPO],
        database_url=database_url,
        **kwargs,
    )
