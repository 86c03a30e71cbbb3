"""Creating a topology's topics (main, retry tiers, DLTs) where they are missing."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kafka_retry.policy.topology import Topology

log = logging.getLogger(__name__)


def topology_topics(topology: Topology) -> list[str]:
    """Every topic of the retry path, in order: main, retry tiers, DLTs, the parking topic."""
    parking = [topology.parking_topic] if topology.parking_topic is not None else []
    return [t.topic for t in (*topology.tiers, *topology.dlt_tiers)] + parking


def ensure_topics(topology: Topology, kafka_config: Mapping[str, Any], *, partitions: int,
                  replication_factor: int = -1, timeout: float = 30.0) -> dict[str, str]:
    """Create the topology's missing topics; returns ``{topic: "created" | "exists"}``.

    Retry tiers and DLTs should have at least the main topic's partitions so records keep their
    partition (as Spring does); existing topics are left as they are.
    """
    admin = AdminClient({k: v for k, v in kafka_config.items() if k != "group.id"})
    existing = admin.list_topics(timeout=timeout).topics
    wanted = topology_topics(topology)
    result = {name: "exists" for name in wanted if name in existing}
    new = [NewTopic(n, num_partitions=partitions, replication_factor=replication_factor)
           for n in wanted if n not in existing]
    if new:
        for name, future in admin.create_topics(new, operation_timeout=timeout, request_timeout=timeout).items():
            try:
                future.result(timeout)
                result[name] = "created"
                log.info("created topic %s with %s partitions", name, partitions)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
                result[name] = "exists"
    return {name: result[name] for name in wanted}
