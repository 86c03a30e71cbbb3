"""
Kafka non-blocking retry tiers and dead-letter topics as scheduled Airflow pipelines.

The top level re-exports what user handler code needs; everything else lives in its sub-package
(``policy`` is pure, ``engine`` does Kafka I/O, the Airflow skin sits beside them). The DAG factories
(``build_retry_dags``, ``build_retry_dags_from_folder``, ``build_dlt_replay_dag``) are exported lazily:
``import airflow_kafka_retry`` in a handler or a Spark executor never imports Airflow;
``from airflow_kafka_retry import build_retry_dags`` in a DAG file does. ``__version__`` is the installed
distribution's (pyproject.toml holds the one literal), read on use.
"""

from __future__ import annotations

from importlib import import_module, metadata
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.errors import BatchFailedError, DeserializationError

if TYPE_CHECKING:
    from airflow_kafka_retry.factory.folder import build_retry_dags_from_folder
    from airflow_kafka_retry.factory.replay_dag import build_dlt_replay_dag
    from airflow_kafka_retry.factory.retry_dags import build_retry_dags

__all__ = [
    "BatchFailedError",
    "DeserializationError",
    "__version__",
    "build_dlt_replay_dag",
    "build_retry_dags",
    "build_retry_dags_from_folder",
]

DISTRIBUTION = "airflow-kafka-retry"
#: ``__version__`` where the package has no distribution metadata (a zip on Spark's ``--py-files``)
UNKNOWN_VERSION = "0+unknown"

#: Names imported on first use (they import Airflow): name -> module.
_LAZY = {
    "build_dlt_replay_dag": "airflow_kafka_retry.factory.replay_dag",
    "build_retry_dags": "airflow_kafka_retry.factory.retry_dags",
    "build_retry_dags_from_folder": "airflow_kafka_retry.factory.folder",
}


def _installed_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return UNKNOWN_VERSION


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _installed_version()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})
