"""
The public files a Kafka configuration names (the CA, the client certificate, a CRL) travel with it.

librdkafka reads ``ssl.ca.location`` and its kin from the local disk of the process that makes the client.
On Spark that is the driver and every executor, which on a cluster run in other JVMs, often on other
machines, where the path the Airflow worker was given need not exist (or may hold another CA). So the
submission carries the files themselves:

* :func:`pack_files`, where the submission is prepared: each key of :data:`SHIPPED_FILE_KEYS` that names a
  regular file there has the file's bytes packed under :data:`FILES_KEY` of the credentials file (``0600``,
  deleted after the run; see :mod:`~airflow_kafka_retry.spark.credentials`). A path that is not a file
  there (a folder, ``probe``, a path only the cluster mounts) stays a path.
* :func:`materialized`, on the driver and in each Spark task on its executor: the packed files are written
  to a new private folder (``0700``, each file ``0600``), the keys point at those copies while the block
  runs, and the folder is deleted when it ends, however it ends.

Key material is not packed: ``ssl.key.location``, ``ssl.keystore.location`` (and ``sasl.kerberos.keytab``)
stay paths that the cluster mounts on its executors, so that no private key crosses Spark's network
(``ssl.key.pem`` and ``ssl.key.password`` are secrets that the transport check guards, see
:mod:`~airflow_kafka_retry.spark.transport`). Nor is ``ssl.engine.location`` (a shared library to install).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError

log = logging.getLogger(__name__)

#: Keys naming public files that travel with the configuration.
SHIPPED_FILE_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.crl.location")
#: Where the credentials file holds them: ``{key: {"path": the original path, "base64": the bytes}}``.
FILES_KEY = "airflow_kafka_retry.files"
#: The largest file packed (a system CA bundle is about 200 KiB); a larger one is refused, named.
MAX_FILE_BYTES = 4 * 1024 * 1024


def pack_files(kafka_config: Mapping[str, Any]) -> dict[str, Any]:
    """
    A copy of ``kafka_config`` carrying the files its :data:`SHIPPED_FILE_KEYS` name here (see the module).

    :raises KafkaConfigError: naming the key and path of a file that cannot be read or is too large.
    """
    packed: dict[str, dict[str, str]] = {}
    for key in SHIPPED_FILE_KEYS:
        path = kafka_config.get(key)
        if not isinstance(path, str) or not os.path.isfile(path):
            continue
        try:
            size = os.path.getsize(path)
            if size > MAX_FILE_BYTES:
                raise KafkaConfigError(
                    f"{key}={path!r} is {size} bytes, more than the {MAX_FILE_BYTES} a Spark run carries to "
                    "its executors; give a smaller file (the CA that signed the brokers' certificates)"
                )
            with open(path, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise KafkaConfigError(f"cannot read {key}={path!r}: {exc.strerror or exc}") from None
        packed[key] = {"path": path, "base64": base64.b64encode(data).decode("ascii")}
    config = {k: v for k, v in kafka_config.items() if k != FILES_KEY}
    if packed:
        config[FILES_KEY] = packed
    return config


def _unpack(kafka_config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, tuple[str, bytes]]]:
    """The librdkafka configuration and the packed files (``key -> (original path, bytes)``)."""
    config = {k: v for k, v in kafka_config.items() if k != FILES_KEY}
    packed = kafka_config.get(FILES_KEY) or {}
    if not isinstance(packed, Mapping):
        raise KafkaConfigError(f"{FILES_KEY} must map Kafka settings to files, got a {type(packed).__name__}")
    files: dict[str, tuple[str, bytes]] = {}
    for key, entry in packed.items():
        if key not in SHIPPED_FILE_KEYS:
            raise KafkaConfigError(f"{FILES_KEY} names {key!r}, which is not one of {SHIPPED_FILE_KEYS}")
        try:
            files[key] = (str(entry["path"]), base64.b64decode(entry["base64"], validate=True))
        except (TypeError, KeyError, binascii.Error):
            raise KafkaConfigError(
                f"{FILES_KEY}: the entry of {key!r} is not a path and base64 bytes"
            ) from None
    return config, files


@contextlib.contextmanager
def materialized(kafka_config: Mapping[str, Any], where: str) -> Iterator[dict[str, Any]]:
    """
    The librdkafka configuration, its packed files written to a private folder for the block's length.

    A configuration without packed files is yielded as it is (without :data:`FILES_KEY`).

    :param where: where this runs (``on executor host 'h'``), for the log line naming each copy.
    :raises KafkaConfigError: :data:`FILES_KEY` is malformed (named).
    """
    config, files = _unpack(kafka_config)
    if not files:
        yield config
        return
    folder = tempfile.mkdtemp(prefix="akr-kafka-files-")  # 0700
    try:
        for index, (key, (original, data)) in enumerate(sorted(files.items())):
            copy = os.path.join(folder, f"{index}-{os.path.basename(original) or 'file'}")
            fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            config[key] = copy
            log.info("%s: the submission's copy of %s, written to %s %s", key, original, copy, where)
        yield config
    finally:
        shutil.rmtree(folder, ignore_errors=True)
