"""
Kafka topics of a retry path as Airflow Assets, made with the Kafka provider's own factory.

An asset's URI is ``kafka://<server>/<topic>`` (``create_asset`` of
``airflow.providers.apache.kafka.assets.kafka``), so the assets this provider declares are the same
assets as those of any other DAG or provider naming the same topic on the same server.

``server`` is given explicitly (the operators' ``asset_server``), usually the first host of the
cluster's ``bootstrap.servers``: outlets are declared when a DAG file is parsed, and reading the
Kafka connection then would fetch a credential-bearing secret on every parse of every DAG file, in
every process that parses it, and make the DAG fail to import wherever the connection is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.providers.apache.kafka.assets.kafka import create_asset

if TYPE_CHECKING:
    from airflow.sdk import Asset

    from airflow_kafka_retry.policy.topology.model import Topology


def topic_asset(server: str, topic: str) -> Asset:
    """The asset of one topic: ``kafka://<server>/<topic>``."""
    server = (server or "").strip()
    if not server or "/" in server or "," in server:
        raise ValueError(
            f"asset server must be one 'host:port' (e.g. the first host of bootstrap.servers), got {server!r}"
        )
    return create_asset(server=server, topic=topic)


def topology_assets(topology: Topology, server: str) -> dict[str, Asset]:
    """Every topic of the path (main topic, retry tiers, DLTs, parking), in path order, by topic name."""
    topics = [t.topic for t in (*topology.tiers, *topology.dlt_tiers)]
    topics += [topology.parking_topic] if topology.parking_topic is not None else []
    return {topic: topic_asset(server, topic) for topic in dict.fromkeys(topics)}


def reprocess_outlets(topology_path: str, tier: int | str, server: str) -> dict[str, Asset]:
    """The assets a run of ``tier`` writes to: the next tier (if any), the DLTs and parking, by topic name."""
    from airflow_kafka_retry.policy.topology.file import load_topology_from

    topology = load_topology_from(str(topology_path))  # a local file, or an fsspec URL (a Spark deployment's)
    # only the assets it declares: a DAG file makes them for every tier's task at every parse
    return {topic: topic_asset(server, topic) for topic in topology.destinations_from(topology.select(tier))}
