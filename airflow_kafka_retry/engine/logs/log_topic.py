"""
Creating a log topic of one partition (the replay and redelivery logs) and completing an old one's configs.

:func:`ensure_compacted_log` is what a log calls, under its deadlines: :func:`ensure_log_topic` creates the
topic if it is missing; an existing one gets the configs it has not set itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from airflow_kafka_retry.engine.kafka.clients import (
    CLIENT_LOGGER,
    KafkaConfigError,
    admin_config,
    principal_of,
)
from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
from airflow_kafka_retry.engine.kafka.topic_admin import check_not_hidden

log = logging.getLogger(__name__)

#: Kafka's longest topic name.
MAX_TOPIC = 249


def log_topic_name(base: str, suffix: str, *, what: str, fix: str, error: type[Exception]) -> str:
    """``base`` + ``suffix``; ``error``, naming ``what`` and saying ``fix``, when it is too long."""
    name = f"{base}{suffix}"
    if len(name) > MAX_TOPIC:
        raise error(f"{what} would be named {name!r}, longer than Kafka's {MAX_TOPIC} characters; {fix}")
    return name


def ensure_compacted_log(
    kafka_config: Mapping[str, Any],
    topic: str,
    *,
    what: str,
    config: Mapping[str, str],
    complete: Iterable[str] = (),
    error: type[Exception] = KafkaConfigError,
    timeout: float = 30.0,
    deadlines: CallDeadlines | None = None,
) -> bool:
    """
    Create the log (one partition, ``config``) if it is missing, else set those of ``complete`` it lacks.

    True when it was created; ``what`` names the log (see ``ensure_log_topic``). Under ``deadlines``.
    """
    deadlines = deadlines or CallDeadlines(topic)
    with deadlines.call(f"create {what}", 4 * timeout, f"the controller (creating {topic})"):
        created = ensure_log_topic(
            kafka_config, topic, what=what, config=config, error=error, timeout=timeout
        )
    wanted = {name: config[name] for name in complete}
    if not created and wanted:
        with deadlines.call(f"complete {what}'s configs", 2 * timeout, f"the brokers ({topic}'s configs)"):
            _complete(kafka_config, topic, wanted, what, timeout)
    return created


def _complete(
    kafka_config: Mapping[str, Any], topic: str, configs: Mapping[str, str], what: str, timeout: float
):
    """
    Set those of ``configs`` the log has not set itself (one made by an earlier version); never fails the run.

    A log whose configs cannot be read or set (no ``ALTER_CONFIGS``, a timeout) is named in a warning.
    """
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient(admin_config(kafka_config))
    try:
        described = admin.describe_configs([resource], request_timeout=timeout)[resource].result(timeout)
        own = {
            name
            for name, entry in described.items()
            if _source(entry) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        }
        missing = {name: value for name, value in configs.items() if name not in own}
        if missing:
            entries = [
                ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET) for n, v in missing.items()
            ]
            change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
            admin.incremental_alter_configs([change], request_timeout=timeout)[change].result(timeout)
            log.info("set %s of %s %s", ", ".join(f"{n}={v}" for n, v in missing.items()), what, topic)
    except (KafkaException, TimeoutError) as exc:
        fix = " and ".join(f"{name}={value}" for name, value in configs.items())
        log.warning(_NOT_COMPLETED, what, topic, exc, fix)


_NOT_COMPLETED = (
    "cannot complete the configs of %s %s (%s): set %s on it, or compaction never reaches its newest week"
)


def _source(entry: ConfigEntry) -> int:
    """Where a described config comes from (the client gives the enum's value or the enum)."""
    source: Any = entry.source
    return int(getattr(source, "value", source))


def ensure_log_topic(
    kafka_config: Mapping[str, Any],
    topic: str,
    *,
    what: str,
    config: Mapping[str, str],
    error: type[Exception] = KafkaConfigError,
    timeout: float = 30.0,
) -> bool:
    """
    Create a one-partition log topic with ``config`` if it is missing; True when this call created it.

    The replay log and the redelivery log are such topics. A created topic is waited for until the
    metadata shows it (a producer asked for it at once could otherwise find it missing). ``what`` names
    the topic in the log and in ``error`` (raised when it cannot be created, or does not appear in
    ``timeout``).
    """
    admin = AdminClient(
        {k: v for k, v in kafka_config.items() if k != "group.id"} | {"logger": CLIENT_LOGGER}
    )
    if topic in admin.list_topics(timeout=timeout).topics:
        return False
    check_not_hidden([topic], kafka_config, timeout)  # a log the principal may not see is not missing
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=-1, config=dict(config))],
        operation_timeout=timeout,
        request_timeout=timeout,
    )[topic]
    try:
        future.result(timeout)
    except TimeoutError as exc:  # the cluster did not answer: another attempt may succeed
        raise _transient(error(f"cannot create {what} {topic}: no answer within {timeout:g}s")) from exc
    except KafkaException as exc:
        kafka_error: KafkaError = exc.args[0]
        code = kafka_error.code()
        if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
            raise error(
                f"cannot create {what} {topic}: {principal_of(kafka_config)} lacks CREATE on topic {topic!r} "
                f"(Kafka: {kafka_error.name()})"
            ) from exc
        if code != KafkaError.TOPIC_ALREADY_EXISTS:
            failed = error(f"cannot create {what} {topic}: {kafka_error.str()}")
            if code in (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT):
                raise _transient(failed) from exc
            raise failed from exc
        return False
    deadline = time.monotonic() + timeout
    while topic not in admin.list_topics(timeout=timeout).topics:
        if time.monotonic() > deadline:
            raise _transient(
                error(f"created {what} {topic}, but it did not appear in the metadata in {timeout:.0f}s")
            )
        time.sleep(0.1)
    log.info("created %s %s (1 partition, %s)", what, topic, ", ".join(f"{k}={v}" for k, v in config.items()))
    return True


def _transient(error: Exception) -> Exception:
    """``error`` marked as the cluster's failure, not the input's (a partition run retries it)."""
    error.transient = True  # type: ignore[attr-defined]
    return error
