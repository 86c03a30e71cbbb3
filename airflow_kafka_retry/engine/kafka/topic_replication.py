"""Which topics one broker's loss would stop: those with a single replica on a cluster of several."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka.admin import ClusterMetadata


def replication_warnings(metadata: ClusterMetadata, topics: list[str]) -> list[str]:
    """
    A sentence for each of ``topics`` that one broker's loss would stop, on a cluster of several brokers.

    A topic whose partitions have a single replica on a multi-broker cluster (created with replication
    factor 1, or the broker's default of 1) is offline for as long as the one broker that holds a partition
    is down: its tier's runs fail, and nothing routed to it can be committed.
    """
    brokers = len(metadata.brokers)
    if brokers < 2:
        return []
    warnings = []
    for topic in topics:
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            continue
        replicas = min(len(p.replicas) for p in info.partitions.values())
        if replicas < 2:
            warnings.append(
                f"topic {topic!r} has replication factor {replicas} on a cluster of {brokers} brokers: "
                "losing "
                "the broker that holds one of its partitions stops that partition's tier; recreate it with "
                "replication factor 3 (and min.insync.replicas 2)"
            )
    return warnings
