"""Unit tests of the view's pure parts: due buckets, topology file patterns, ids, provider config."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.engine.scans.backlog import due_bucket
from airflow_kafka_retry.get_provider_info import get_provider_info
from airflow_kafka_retry.plugin.settings import OPTIONS, ViewSettings
from airflow_kafka_retry.plugin.view_model import topology_id


@pytest.mark.parametrize(
    ("due", "bucket"),
    [
        (None, "now"),
        (999, "now"),
        (1000, "now"),
        (1001, "minute"),
        (61_000, "minute"),
        (61_001, "hour"),
        (1000 + 3_600_000, "hour"),
        (1001 + 3_600_000, "day"),
        (1000 + 86_400_000, "day"),
        (1001 + 86_400_000, "later"),
    ],
)
def test_due_buckets(due, bucket):
    assert due_bucket(due, now_ms=1000) == bucket


def test_topology_files_from_globs_and_paths(tmp_path):
    (tmp_path / "a.yaml").write_text("x")
    (tmp_path / "b.yml").write_text("x")
    (tmp_path / "notes.txt").write_text("x")
    settings = ViewSettings(
        topologies=(
            str(tmp_path / "*.yaml"),
            str(tmp_path / "*.yml"),
            str(tmp_path / "a.yaml"),
            str(tmp_path / "missing.yaml"),
        ),
        kafka_conn_id="k",
        dag_id_template="{topic}",
        replay_dag_id_template="{topic}",
        timeout_s=1,
        runs=1,
    )
    # an explicit path that does not exist is kept, so the page can say it cannot read it
    assert settings.topology_files() == [
        str(tmp_path / "a.yaml"),
        str(tmp_path / "b.yml"),
        str(tmp_path / "missing.yaml"),
    ]


def test_topology_ids_are_stable_and_distinct():
    assert topology_id("/a/orders.yaml") == topology_id("/a/orders.yaml")
    assert topology_id("/a/orders.yaml") != topology_id("/b/orders.yaml")
    assert topology_id("/a/orders.yaml").startswith("orders-")


def test_the_view_options_are_published_as_provider_config():
    info = get_provider_info()
    assert info["plugins"] == [
        {"name": "kafka_retry_tiers", "plugin-class": "airflow_kafka_retry.plugin.plugin.RetryTiersPlugin"}
    ]
    options = info["config"]["kafka_retry"]["options"]
    assert {k: v["default"] for k, v in options.items()} == {k: v[0] for k, v in OPTIONS.items()}


def test_the_triggerer_shares_its_watch_consumer_by_default(monkeypatch):
    """On by default (the published provider config); the setting turns it off."""
    from airflow_kafka_retry.triggers import watching

    assert OPTIONS["shared_watch_consumers"][0] == "True"
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__SHARED_WATCH_CONSUMERS", "False")
    assert watching._shared_watch_consumers() is False
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__SHARED_WATCH_CONSUMERS", "True")
    assert watching._shared_watch_consumers() is True
