"""
Creating a topology's topics (main, retry tiers, DLTs) where they are missing, and checking the others.

Under ``ordering: key`` also the hold and state topics (``policy/topology/order_topics.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from airflow_kafka_retry.engine.kafka.clients import (
    KafkaConfigError,
    NotAuthorized,
    TopicsMissing,
    admin_config,
    partition_counts,
    principal_of,
)
from airflow_kafka_retry.engine.kafka.topic_replication import replication_warnings
from airflow_kafka_retry.policy.topology.order_topics import (
    CLEANUP_POLICY,
    cleanup_problem,
    order_topic_configs,
    order_topics,
)

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = "max.message.bytes"


def topology_topics(topology: Topology) -> list[str]:
    """Every topic of the retry path, in order: main, retry tiers, DLTs, the parking topic, hold and state."""
    parking = [topology.parking_topic] if topology.parking_topic is not None else []
    return [t.topic for t in (*topology.tiers, *topology.dlt_tiers)] + parking + order_topics(topology)


def ensure_topics(
    topology: Topology,
    kafka_config: Mapping[str, Any],
    *,
    partitions: int,
    replication_factor: int = -1,
    timeout: float = 30.0,
) -> dict[str, str]:
    """
    Create the topology's missing topics; returns ``{topic: "created" | "exists"}``.

    Retry tiers and DLTs should have at least the main topic's partitions so records keep their
    partition (as Spring does); existing topics are left as they are. A topology's ``input`` DLQ is not
    created (nor in the result). Under ``ordering: key`` the hold and state topics get their cleanup configs
    (``policy/topology/order_topics.py``); an existing one with another ``cleanup.policy`` raises
    :class:`KafkaConfigError` naming it and the command that fixes it, once the others are created.
    """
    admin = _admin(kafka_config)
    existing = admin.list_topics(timeout=timeout).topics
    # an input DLQ is its framework's to create: a share group's needs errors.deadletterqueue.group.enable
    wanted = [t for t in topology_topics(topology) if topology.input is None or t != topology.input.dlq]
    check_not_hidden([n for n in wanted if n not in existing], kafka_config, timeout)
    result = {name: "exists" for name in wanted if name in existing}
    created = _create(
        admin,
        [n for n in wanted if n not in existing],
        partitions,
        {},
        replication_factor,
        timeout,
        principal=principal_of(kafka_config),
        configs=order_topic_configs(topology),
    )
    result.update(created)
    kept = [t for t in order_topics(topology) if result.get(t) == "exists"]
    settings = _settings(admin, kept, timeout, principal_of(kafka_config)) if kept else {}
    problems = [p for t in kept if (p := cleanup_problem(topology, t, settings[t].get(CLEANUP_POLICY)))]
    if problems:
        raise KafkaConfigError("; ".join(problems))
    return {name: result[name] for name in wanted}


def existing_topics(kafka_config: Mapping[str, Any], *, timeout: float = 30.0) -> set[str]:
    """The names of every topic on the cluster."""
    return set(_admin(kafka_config).list_topics(timeout=timeout).topics)


def missing_topics(kafka_config: Mapping[str, Any], topics: list[str], *, timeout: float = 30.0) -> list[str]:
    """
    Those of ``topics`` the cluster does not have; every request within ``timeout``.

    A listing leaves out the topics the principal may not describe: those absent from it are asked for by
    name (never created by asking), and one the principal may not see raises :class:`NotAuthorized`
    naming the principal, ``DESCRIBE`` and the topic, instead of being reported missing.
    """
    deadline = time.monotonic() + timeout
    existing = _admin(kafka_config).list_topics(timeout=timeout).topics
    absent = [t for t in topics if t not in existing]
    check_not_hidden(absent, kafka_config, max(0.1, deadline - time.monotonic()))
    return absent


def topology_replication_warnings(
    topology: Topology, kafka_config: Mapping[str, Any], *, timeout: float = 30.0
) -> list[str]:
    """:func:`replication_warnings` for every topic of ``topology`` that exists (one metadata request)."""
    metadata = _admin(kafka_config).list_topics(timeout=timeout)
    return replication_warnings(metadata, topology_topics(topology))


class MainTopicMissingError(KafkaConfigError):
    """The topology's main topic does not exist; its retry topics are sized after it, so it must."""


@dataclass(frozen=True)
class TopicMismatch:
    """
    An existing retry or DLT topic with less than the main topic has (an order topic: or the wrong cleanup).

    :param setting: ``partitions``, ``max.message.bytes`` or ``cleanup.policy`` (the hold or state topic of
        ``ordering: key``; ``note`` then says what is wrong and what to run).
    """

    topic: str
    setting: str
    actual: int | str
    required: int | str
    main_topic: str
    note: str = ""

    def __str__(self) -> str:
        if self.note:
            return self.note
        if self.setting == "partitions":
            why = "records cannot keep their partition"
        else:
            why = "a record the main topic accepts may be refused"
        return (
            f"topic {self.topic!r} has {self.setting}={self.actual}, less than main topic "
            f"{self.main_topic!r} ({self.required}): {why}"
        )


@dataclass
class TopicsReport:
    """What :func:`ensure_retry_topics` found and did (plain data; goes to XCom as :meth:`to_dict`)."""

    main_topic: str
    partitions: int
    max_message_bytes: int | None
    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    mismatches: list[TopicMismatch] = field(default_factory=list)
    replication_warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "main_topic": self.main_topic,
            "partitions": self.partitions,
            "max_message_bytes": self.max_message_bytes,
            "created": list(self.created),
            "existing": list(self.existing),
            "mismatches": [str(m) for m in self.mismatches],
            "replication_warnings": list(self.replication_warnings),
        }


def ensure_retry_topics(
    topology: Topology,
    kafka_config: Mapping[str, Any],
    *,
    replication_factor: int = -1,
    timeout: float = 30.0,
) -> TopicsReport:
    """
    Create the missing retry, DLT, parking (and order) topics of ``topology``, sized after its main topic.

    Each new topic gets the main topic's partition count and, when the main topic reports one, its
    ``max.message.bytes``; the hold and state topics of ``ordering: key`` also their ``cleanup.policy``
    (``policy/topology/order_topics.py``). Existing topics are checked against the same settings (they are
    never altered); every shortfall is in the report's ``mismatches`` (the caller decides whether that fails).

    :raises MainTopicMissingError: the main topic does not exist.
    """
    admin = _admin(kafka_config)
    cluster = admin.list_topics(timeout=timeout)
    metadata = cluster.topics
    main = topology.topic
    info = metadata.get(main)
    if info is None or info.error is not None or not info.partitions:
        check_not_hidden([main], kafka_config, timeout)
        raise MainTopicMissingError(
            f"main topic {main!r} (topology {topology.source}) does not exist on the cluster; create it "
            "first "
            "(its partition count and max.message.bytes size the retry topics)"
        )
    partitions = len(info.partitions)
    wanted = topology_topics(topology)[1:]
    check_not_hidden([t for t in wanted if t not in metadata], kafka_config, timeout)
    existing = [t for t in wanted if t in metadata and metadata[t].error is None]
    settings = _settings(admin, [main, *existing], timeout, principal_of(kafka_config))
    numbers = {t: _number(found.get(MAX_MESSAGE_BYTES)) for t, found in settings.items()}
    limits = {t: n for t, n in numbers.items() if n is not None}
    main_limit = limits.get(main)
    report = TopicsReport(
        main_topic=main, partitions=partitions, max_message_bytes=main_limit, existing=existing
    )
    for topic in existing:
        count = len(metadata[topic].partitions)
        if count < partitions:
            report.mismatches.append(TopicMismatch(topic, "partitions", count, partitions, main))
        limit = limits.get(topic)
        if main_limit is not None and limit is not None and limit < main_limit:
            report.mismatches.append(TopicMismatch(topic, MAX_MESSAGE_BYTES, limit, main_limit, main))
        cleanup = settings.get(topic, {}).get(CLEANUP_POLICY)
        if (problem := cleanup_problem(topology, topic, cleanup)) is not None:
            wanted_policy = order_topic_configs(topology)[topic][CLEANUP_POLICY]
            report.mismatches.append(
                TopicMismatch(topic, CLEANUP_POLICY, str(cleanup), wanted_policy, main, note=problem)
            )
    config = {MAX_MESSAGE_BYTES: str(main_limit)} if main_limit is not None else {}
    missing = [t for t in wanted if t not in existing]
    for topic, outcome in _create(
        admin,
        missing,
        partitions,
        config,
        replication_factor,
        timeout,
        principal=principal_of(kafka_config),
        configs=order_topic_configs(topology),
    ).items():
        (report.created if outcome == "created" else report.existing).append(topic)
    laid_out = admin.list_topics(timeout=timeout) if report.created else cluster  # the new topics' replicas
    report.replication_warnings = replication_warnings(laid_out, [main, *wanted])
    for warning in report.replication_warnings:
        log.warning("%s", warning)
    return report


def _admin(kafka_config: Mapping[str, Any]) -> AdminClient:
    if "bootstrap.servers" not in kafka_config:
        raise KafkaConfigError("the Kafka configuration has no 'bootstrap.servers'")
    return AdminClient({k: v for k, v in kafka_config.items() if k != "group.id"})


def check_not_hidden(topics: list[str], kafka_config: Mapping[str, Any], timeout: float) -> None:
    """
    Raise :class:`NotAuthorized` for those of ``topics`` (absent from a listing) the principal may not see.

    A listing leaves out the topics the principal may not describe; asked by name, Kafka says whether a
    topic is missing or hidden (``TOPIC_AUTHORIZATION_FAILED``), so neither is taken for the other.
    """
    if not topics:
        return
    deadline = time.monotonic() + timeout  # one deadline for all of them
    asking = AdminClient(admin_config(kafka_config))  # never creates a topic by asking for it
    for topic in topics:
        try:
            left = max(0.1, deadline - time.monotonic())
            partition_counts(asking, [topic], left, kafka_config=kafka_config)
        except TopicsMissing:
            continue


def _create(
    admin: AdminClient,
    names: list[str],
    partitions: int,
    config: Mapping[str, str],
    replication_factor: int,
    timeout: float,
    *,
    principal: str,
    configs: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, str]:
    """
    Create ``names``, each with ``config`` and its own ``configs``; ``{name: "created" | "exists"}``.

    A validating request first: when the principal may not create one of them, none is created and the
    error names the principal, every refused topic and the operation.
    """
    if not names:
        return {}
    own = configs or {}
    new = [
        NewTopic(
            n,
            num_partitions=partitions,
            replication_factor=replication_factor,
            config={**config, **own.get(n, {})},
        )
        for n in names
    ]
    _check_creatable(admin, new, timeout, principal)
    result: dict[str, str] = {}
    for name, future in admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout).items():
        try:
            future.result(timeout)
            result[name] = "created"
            configured = {**config, **own.get(name, {})}
            log.info("created topic %s with %s partitions %s", name, partitions, configured)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaConfigError(f"cannot create topic {name!r}: {exc.args[0].str()}") from exc
            result[name] = "exists"  # created meanwhile by someone else
    return result


def _check_creatable(admin: AdminClient, new: list[NewTopic], timeout: float, principal: str) -> None:
    futures = admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout, validate_only=True)
    refused = []
    for name, future in futures.items():
        try:
            future.result(timeout)
        except KafkaException as exc:
            code = exc.args[0].code()
            if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
                refused.append(name)
            # anything else (exists already, a bad setting) is answered by the real request
    if refused:
        raise NotAuthorized(
            f"{principal} lacks CREATE on topic(s) {', '.join(map(repr, refused))} (Kafka: "
            "TOPIC_AUTHORIZATION_FAILED; DESCRIBE too, to find them once they exist): none was created; "
            "grant the setup use the ACLs `airflow-kafka-retry topology acls FILE --role setup` prints",
            refused,
        )


def _number(value: str | None) -> int | None:
    """A reported setting as a number; None when it is none (not reported, or not a number)."""
    return int(value) if value is not None and value.strip().lstrip("-").isdigit() else None


def _settings(
    admin: AdminClient, topics: list[str], timeout: float, principal: str = "this connection's principal"
) -> dict[str, dict[str, str]]:
    """``max.message.bytes`` and ``cleanup.policy`` of each topic, those the broker reports."""
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    found: dict[str, dict[str, str]] = {}
    for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
        try:
            entries = future.result(timeout)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise NotAuthorized(
                    f"{principal} lacks DESCRIBE_CONFIGS on topic {resource.name!r} (Kafka: "
                    "TOPIC_AUTHORIZATION_FAILED): the retry topics are sized after it; grant the setup use "
                    "the ACLs `airflow-kafka-retry topology acls FILE --role setup` prints",
                    [resource.name],
                ) from exc
            raise KafkaConfigError(
                f"cannot describe the configuration of topic {resource.name!r}: {exc.args[0].str()}"
            ) from exc
        found[resource.name] = {
            name: str(value)
            for name in (MAX_MESSAGE_BYTES, CLEANUP_POLICY)
            if (value := getattr(entries.get(name), "value", None)) is not None
        }
    return found
