"""The result document a Spark run leaves behind: a run summary, or the reason it could not start.

The driver writes it to a local path or any fsspec URL (``s3://...``, ``gs://...``); whoever
submitted the run reads it back. It holds counts, offsets and dead-letter coordinates -- never
payloads, never the Kafka configuration.
"""

from __future__ import annotations

import json
from typing import Any

import fsspec

from airflow_kafka_retry.engine.summary import RunSummary

ERROR_STATUS = "error"


class SparkAppError(ValueError):
    """The Spark application refused to start (bad topology, handler, options, topics); the message says why."""


class ResultMissingError(RuntimeError):
    """The Spark application left no result document (it crashed, or never started)."""


def write_result(url: str, document: dict[str, Any]) -> None:
    """Write ``document`` as JSON to ``url`` (a local path or an fsspec URL), creating parent folders."""
    fs, path = fsspec.core.url_to_fs(url)
    parent = path.rsplit("/", 1)[0] if "/" in path else ""
    if parent:
        fs.makedirs(parent, exist_ok=True)
    with fs.open(path, "w", encoding="utf-8") as fh:
        json.dump(document, fh, indent=1)


def error_document(message: str) -> dict[str, Any]:
    """What the driver writes when it stops before reading any record."""
    return {"status": ERROR_STATUS, "engine": "spark", "error": message}


def remove_result(url: str) -> None:
    """Delete a result left by an earlier try, so it cannot be mistaken for this run's."""
    fs, path = fsspec.core.url_to_fs(url)
    if fs.exists(path):
        fs.rm(path)


def read_result(url: str) -> RunSummary:
    """The run summary at ``url``.

    :raises ResultMissingError: there is no result document.
    :raises SparkAppError: the application wrote why it refused to start.
    """
    fs, path = fsspec.core.url_to_fs(url)
    if not fs.exists(path):
        raise ResultMissingError(f"the Spark application wrote no result to {url}")
    with fs.open(path, "r", encoding="utf-8") as fh:
        document = json.load(fh)
    if document.get("status") == ERROR_STATUS:
        raise SparkAppError(document.get("error") or "the Spark application failed to start")
    return RunSummary.from_dict(document)
