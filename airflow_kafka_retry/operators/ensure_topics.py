"""
``EnsureRetryTopicsOperator``: create a topology's missing retry and DLT topics.

It checks the existing ones.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowException
from airflow.sdk import BaseOperator

from airflow_kafka_retry.hooks import DEFAULT_KAFKA_CONN_ID
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.policy.topology.order_topics import order_topics

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_kafka_retry.engine.kafka.topic_admin import TopicMismatch

ON_MISMATCH = ("auto", "fail", "warn")


class EnsureRetryTopicsOperator(BaseOperator):
    """
    Create the retry tier, DLT and parking topics of a topology that do not exist yet.

    They are sized after the main topic (so are the hold and state topics under ``ordering: key``).

    Every new topic gets the main topic's partition count (so a record keeps its partition on the
    way through the tiers, as Spring does) and, when the broker reports one for the main topic, its
    ``max.message.bytes`` (so a record the main topic accepted is accepted by every tier and DLT).
    The main topic itself must exist; it is never created here.

    Topics that already exist are checked against the same two settings. Each shortfall is reported
    by topic name: fewer partitions than the main topic (records of the higher partitions are
    spread by the producer instead, so per-key order across retries is lost), or a smaller
    ``max.message.bytes`` (a large record can be refused by the tier and stop its partition). A
    mismatch fails the task, naming every mismatched topic, before any record is reprocessed;
    ``on_mismatch="warn"`` logs each one as a warning instead. Topics are never altered.

    ``on_mismatch="auto"`` (default) is ``fail``, except for partition shortfalls under a Spring
    ``compat:`` preset, which are warnings: ``@RetryableTopic`` creates its retry and DLT topics with
    ``numPartitions = "1"`` by default, and Spring then lets the producer place the records of the
    higher partitions, as this provider does (measured in tests/interop), so a Spring service's
    existing topics are taken over as they are. Under ``ordering: key`` the hold and state topics
    (``<topic>-hold``: ``cleanup.policy=delete``, ``retention.ms=-1``; ``<topic>-order-state``:
    ``cleanup.policy=compact``) are created the same way; an existing one with fewer partitions than the
    main topic or another ``cleanup.policy`` fails the task under ``auto`` whatever ``compat`` says (the
    keeper could not keep a key's order), naming the ``kafka-configs.sh`` command that fixes the policy.

    Every consumer group with members on the topology's topics or in its groups (a Spring peer: the
    provider's own consumers join no group) is logged as a warning asking for ``read_committed``; see
    ``engine/scans/peer_consumers.py`` for what the broker shows and what it does not.

    The result (XCom) lists the created and existing topics, the mismatches and those groups.

    :param topology: the topology: a path to its YAML file, or a ``Topology``. (templated)
    :param kafka_conn_id: the Kafka connection (librdkafka configuration in its extra). (templated)
    :param replication_factor: replication factor of new topics; -1 uses the broker's default.
    :param on_mismatch: ``auto`` (default), ``fail`` or ``warn`` when an existing topic is smaller than
        the main topic (see above).
    """

    template_fields: Sequence[str] = ("topology", "kafka_conn_id")
    ui_color = "#e9f5db"

    def __init__(
        self,
        *,
        topology: str | Topology,
        kafka_conn_id: str = DEFAULT_KAFKA_CONN_ID,
        replication_factor: int = -1,
        on_mismatch: str = "auto",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if on_mismatch not in ON_MISMATCH:
            raise ValueError(f"on_mismatch must be one of {', '.join(ON_MISMATCH)}, got {on_mismatch!r}")
        self.topology = topology
        self.kafka_conn_id = kafka_conn_id
        self.replication_factor = replication_factor
        self.on_mismatch = on_mismatch

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_kafka_retry.engine.kafka.topic_admin import (
            ensure_retry_topics,  # not when the DAG file is parsed
        )
        from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook

        topology = self.topology if isinstance(self.topology, Topology) else load_topology(self.topology)
        kafka_config = KafkaRetryHook(kafka_config_id=self.kafka_conn_id).kafka_config()
        report = ensure_retry_topics(topology, kafka_config, replication_factor=self.replication_factor)
        if report.created:
            self.log.info(
                "created %s with %s partitions (max.message.bytes %s)",
                ", ".join(report.created),
                report.partitions,
                report.max_message_bytes,
            )
        if report.existing:
            self.log.info("already there: %s", ", ".join(report.existing))
        for mismatch in report.mismatches:
            self.log.warning("%s", mismatch)
        for warning in report.replication_warnings:
            self.log.warning("%s", warning)
        peers = self._peer_consumers(topology, kafka_config)
        fatal = fatal_mismatches(
            report.mismatches, self.on_mismatch, topology.compat, strict=order_topics(topology)
        )
        if fatal:
            raise AirflowException(
                f"{len(fatal)} retry topic mismatch(es) with main topic {report.main_topic!r}: "
                + "; ".join(str(m) for m in fatal)
                + ". Recreate or enlarge those topics, or set on_mismatch='warn'."
            )
        return {**report.to_dict(), "peer_consumers": peers}

    def _peer_consumers(self, topology: Topology, kafka_config: dict[str, Any]) -> list[dict] | None:
        """Warn about each group with other consumers (a Spring peer) on the topics; None if not checked."""
        from confluent_kafka import KafkaException

        from airflow_kafka_retry.engine.scans.peer_consumers import peer_consumers, warnings

        try:
            peers = peer_consumers(topology, kafka_config)
        except (KafkaException, TimeoutError) as exc:
            self.log.warning("consumer groups not checked for Spring peers: %s", exc)
            return None
        for line in warnings(peers):
            self.log.warning("%s", line)
        return [p.to_dict() for p in peers]


def fatal_mismatches(
    mismatches: list[TopicMismatch], on_mismatch: str, compat: str, *, strict: Collection[str] = ()
) -> list[TopicMismatch]:
    """
    The mismatches that fail the task under ``on_mismatch`` for a topology with ``compat``.

    ``strict``: topics whose every mismatch fails under ``auto`` (the hold and state topics).
    """
    if on_mismatch == "warn":
        return []
    if on_mismatch == "fail" or compat == "none":
        return list(mismatches)
    return [m for m in mismatches if m.setting != "partitions" or m.topic in strict]
