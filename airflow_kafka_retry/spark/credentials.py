"""
The Kafka configuration file handed to a Spark run: owner-only, passed by path, deleted afterwards.

A librdkafka configuration may hold ``sasl.password``, ``ssl.key.password`` and the like. It never
goes on the ``spark-submit`` command line (visible in ``ps`` and in the Spark UI's environment tab
as ``sun.java.command``), into Spark properties, environment variables, logs or XCom: it is written
to a ``0600`` file in a ``0700`` folder and only that file's path is passed to the application.
The public files it names (the CA...) travel inside it (see :mod:`~airflow_kafka_retry.spark.kafka_files`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from typing import Any

from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
from airflow_kafka_retry.engine.kafka.loading import UserCodeError, load_callable
from airflow_kafka_retry.spark.kafka_files import pack_files

CREDENTIALS_FILENAME = "kafka-config.json"
_JSON_TYPES = (str, int, float, bool, type(None))


def callback_path(value: Any) -> str | None:
    """``module:qualname`` of a module-level function that imports back as itself, else ``None``."""
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    try:
        found = load_callable(f"{module}:{qualname}", what="oauth_cb")
    except UserCodeError:
        return None
    return f"{module}:{qualname}" if found is value else None


def check_shippable(kafka_config: Mapping[str, Any]) -> dict[str, Any]:
    """
    A copy of ``kafka_config`` that can be written as JSON; a KafkaConfigError names a bad key.

    Callbacks (``error_cb``, a ``logger``, a lambda or ``functools.partial``) are Python objects of
    the submitting process and cannot travel to Spark executors. An ``oauth_cb`` that is a
    module-level function travels as its import path (``module:function``) and each executor
    imports it (see :func:`~airflow_kafka_retry.engine.kafka.clients.consumer_config`): the executor then
    fetches its own OAUTHBEARER tokens, and no token or secret crosses the network. Messages name
    the key, never the value.
    """
    if "bootstrap.servers" not in kafka_config:
        raise KafkaConfigError("the Kafka configuration has no 'bootstrap.servers'")
    shippable: dict[str, Any] = {}
    for key, value in kafka_config.items():
        if not isinstance(key, str):
            raise KafkaConfigError(f"Kafka configuration keys must be strings, got a {type(key).__name__}")
        if key == "oauth_cb" and callable(value) and callback_path(value):
            shippable[key] = callback_path(value)
            continue
        if not isinstance(value, _JSON_TYPES):
            raise KafkaConfigError(
                f"Kafka configuration key {key!r} holds a {type(value).__name__}, which cannot be shipped to "
                "Spark "
                "executors; use plain librdkafka settings (strings, numbers, booleans) for Spark runs"
            )
        shippable[key] = value
    return shippable


def write_credentials_file(kafka_config: Mapping[str, Any], directory: str) -> str:
    """
    Write ``kafka_config`` as JSON to a new ``0600`` file in ``directory``; returns its path.

    ``directory`` should be private (``tempfile.mkdtemp`` makes it ``0700``). The file is created
    with ``O_EXCL`` and mode ``0600`` from the start, so it is never readable by others, not even
    briefly. The public files the configuration names are packed into it (see
    :func:`~airflow_kafka_retry.spark.kafka_files.pack_files`).
    """
    data = json.dumps(pack_files(check_shippable(kafka_config))).encode("utf-8")
    path = os.path.join(directory, CREDENTIALS_FILENAME)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fd, 0o600)  # whatever the umask
        fh.write(data)
    return path


def remove_credentials_file(path: str) -> None:
    """Delete the file (no error if it is already gone)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
