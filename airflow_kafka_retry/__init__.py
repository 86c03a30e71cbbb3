"""Kafka non-blocking retry tiers and dead-letter topics as scheduled Airflow pipelines.

The top level re-exports only what user handler code needs; everything else lives in its
sub-package (``policy`` is pure, ``engine`` does Kafka I/O, the Airflow skin sits beside them).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from airflow_kafka_retry.errors import BatchFailedError, DeserializationError

__all__ = ["BatchFailedError", "DeserializationError", "__version__", "build_dlt_replay_dag"]

__version__ = "0.1.0"

#: DAG factories, imported on first use: handler code and Spark executors importing this package
#: never import Airflow.
_LAZY = {
    "build_dlt_replay_dag": "airflow_kafka_retry.factory.replay_dag",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
