"""Kafka non-blocking retry tiers and dead-letter topics as scheduled Airflow pipelines.

The top level re-exports only what user handler code needs; everything else lives in its
sub-package (``policy`` is pure, ``engine`` does Kafka I/O, the Airflow skin sits beside them).
"""

from __future__ import annotations

from airflow_kafka_retry.errors import BatchFailedError, DeserializationError

__all__ = ["BatchFailedError", "DeserializationError", "__version__"]

__version__ = "0.1.0"
