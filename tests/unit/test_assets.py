"""Topic assets through the Kafka provider's ``create_asset``."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow.providers.apache.kafka.assets.kafka import create_asset
from airflow.sdk import Asset

from airflow_kafka_retry.assets import reprocess_outlets, topic_asset, topology_assets
from airflow_kafka_retry.policy.topology.file import load_topology

TOPOLOGY = Path(__file__).parents[2] / "dags" / "topologies" / "orders.yaml"


def test_topic_asset_is_the_kafka_providers_asset():
    asset = topic_asset("kafka-1:9092", "orders-dlt")
    assert isinstance(asset, Asset)
    assert asset == create_asset(server="kafka-1:9092", topic="orders-dlt")
    assert asset.uri == "kafka://kafka-1:9092/orders-dlt"


@pytest.mark.parametrize("server", ["", "  ", "a:1,b:2", "kafka://a:1", None])
def test_asset_server_must_be_one_host(server):
    with pytest.raises(ValueError, match="asset server must be one 'host:port'"):
        topic_asset(server, "orders")


def test_topology_assets_cover_the_whole_path_in_order():
    assets = topology_assets(load_topology(TOPOLOGY), "k:9092")
    assert list(assets) == [
        "orders",
        "orders-retry-1",
        "orders-retry-2",
        "orders-retry-3",
        "orders-dlt",
        "orders-validation-dlt",
        "orders-parking",
    ]
    assert all(a.uri == f"kafka://k:9092/{t}" for t, a in assets.items())


@pytest.mark.parametrize(
    ("tier", "expected"),
    [
        (0, ["orders-retry-1", "orders-dlt", "orders-validation-dlt", "orders-parking"]),
        ("orders-retry-2", ["orders-retry-3", "orders-dlt", "orders-validation-dlt", "orders-parking"]),
        (
            3,
            ["orders-dlt", "orders-validation-dlt", "orders-parking"],
        ),  # the last tier only dead-letters (or parks)
    ],
)
def test_reprocess_outlets_are_where_a_tier_can_route(tier, expected):
    assert list(reprocess_outlets(str(TOPOLOGY), tier, "k:9092")) == expected
