"""
Small Kafka admin helpers for tests: explicit topic creation, deletion and unique names.

Topics are always created explicitly: Tansu auto-creates unknown topics with 4 partitions
(Apache Kafka's default is 1), so relying on auto-creation gives different layouts per broker.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

log = logging.getLogger(__name__)

#: librdkafka's own log lines (disconnects etc.) go here instead of the test's stderr.
CLIENT_LOGGER = logging.getLogger("airflow_kafka_retry.sandbox.rdkafka")

_ILLEGAL = re.compile(r"[^a-zA-Z0-9._-]+")


def admin_client(bootstrap: str, **extra: object) -> AdminClient:
    """An ``AdminClient`` whose librdkafka log lines go to Python logging, not stderr."""
    # Any: the stubs allow only scalars as values, but librdkafka's ``logger`` takes a logging.Logger
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER}
    conf.update(extra)
    return AdminClient(conf)


def unique_topic(prefix: str = "test") -> str:
    """
    A topic name that no other test (or earlier run against the same broker) uses.

    Characters Kafka does not allow in topic names are replaced by ``-``.
    """
    clean = _ILLEGAL.sub("-", prefix).strip("-") or "test"
    return f"{clean}-{uuid.uuid4().hex[:12]}"


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except KafkaException as exc:
            last_error = exc
        time.sleep(0.05)
    raise TimeoutError(
        f"timed out after {timeout:.1f}s waiting for {what}"
        + (f" (last error: {last_error})" if last_error else "")
    )


def create_topics(
    bootstrap: str,
    names: Iterable[str],
    partitions: int = 1,
    *,
    config: Mapping[str, str] | None = None,
    replication_factor: int = -1,
    timeout: float = 15.0,
) -> list[str]:
    """
    Create ``names`` and wait until cluster metadata lists each with ``partitions`` partitions.

    ``replication_factor=-1`` uses the broker default, which works on a single-node test broker
    and on a real cluster alike. Raises ``KafkaException`` if the broker refuses a topic
    (including ``TOPIC_ALREADY_EXISTS``) and ``TimeoutError`` if metadata never shows it.
    """
    wanted = list(names)
    if not wanted:
        return wanted
    admin = admin_client(bootstrap)
    new = [
        NewTopic(
            n, num_partitions=partitions, replication_factor=replication_factor, config=dict(config or {})
        )
        for n in wanted
    ]
    futures = admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout)
    for name, fut in futures.items():
        fut.result(timeout)
        log.debug("created topic %s with %s partition(s)", name, partitions)

    def visible() -> bool:
        topics = admin.list_topics(timeout=min(5.0, timeout)).topics
        return all(
            n in topics and topics[n].error is None and len(topics[n].partitions) == partitions
            for n in wanted
        )

    _wait_for(visible, timeout, f"topics {wanted} in metadata with {partitions} partition(s)")
    return wanted


def delete_topics(
    bootstrap: str, names: Iterable[str], *, timeout: float = 15.0, missing_ok: bool = True
) -> None:
    """
    Delete ``names`` and wait until they are gone from cluster metadata.

    With ``missing_ok`` (the default) a topic that does not exist is not an error, so this is
    safe in ``finally`` blocks and fixture teardown.
    """
    wanted = list(names)
    if not wanted:
        return
    admin = admin_client(bootstrap)
    futures = admin.delete_topics(wanted, operation_timeout=timeout, request_timeout=timeout)
    for name, fut in futures.items():
        try:
            fut.result(timeout)
        except KafkaException as exc:
            if missing_ok and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                log.debug("topic %s already absent", name)
                continue
            raise
    _wait_for(
        lambda: not set(wanted) & set(admin.list_topics(timeout=min(5.0, timeout)).topics),
        timeout,
        f"topics {wanted} to disappear from metadata",
    )
