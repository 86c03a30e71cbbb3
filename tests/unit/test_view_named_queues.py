"""The "Retry tiers" view has a DLT card for each dead-letter queue a topology names (``dead_letter_queues``),
read as the queue's family where a record carries no family's headers."""

from __future__ import annotations

from typing import Any

from airflow_kafka_retry.engine.scans.dead_letter_counts import DeadLetterCounts
from airflow_kafka_retry.plugin import scans
from airflow_kafka_retry.plugin.settings import ViewSettings
from airflow_kafka_retry.plugin.view_model import topology_view
from airflow_kafka_retry.policy.topology.model import Topology

from tests.unit.test_view_dead_letters import message

TOPOLOGY = Topology.from_mapping(
    {
        "topic": "orders",
        "group_id": "svc",
        "attempts": 2,
        "dead_letter_queues": [{"topic": "connect-dlq", "family": "kafka-connect"}, "dlq.orders-share"],
    }
)
SETTINGS = ViewSettings(
    topologies=(),
    kafka_conn_id="kafka_default",
    dag_id_template="{topic}",
    replay_dag_id_template="replay_{topic}",
    timeout_s=5,
    runs=1,
)


class _Backlog:
    def to_dict(self) -> dict[str, Any]:
        return {"topic": "orders", "totals": {"backlog": 0}}


def test_each_named_queue_is_scanned_with_its_family(monkeypatch):
    asked: dict[str, Any] = {}

    def count(kafka_config, topic, *, timeout_s, assume=None):
        asked[topic] = assume
        counts = DeadLetterCounts(topic, assume=assume)
        counts.add(message(0, 0, [("trace-id", b"t")]))  # no family's headers
        return counts

    monkeypatch.setattr(scans, "count_dead_letters", count)
    monkeypatch.setattr(scans, "scan_backlog", lambda *args, **kwargs: _Backlog())

    scan = scans.read_topology(TOPOLOGY, SETTINGS, {}, now_ms=0)

    assert asked == {
        "orders-dlt": None,
        "orders-parking": None,
        "connect-dlq": "kafka-connect",
        "dlq.orders-share": None,
    }
    assert scan.dead["connect-dlq"]["by_family"] == {"kafka-connect": 1}
    assert scan.dead["connect-dlq"]["assumed_family"] == "kafka-connect"
    assert scan.dead["dlq.orders-share"]["by_family"] == {"unknown": 1}
    assert set(scans.busy_scan(TOPOLOGY, now_ms=0).dead) == set(asked)  # a busy page names them too


def test_the_cards_say_which_are_other_frameworks_queues_and_their_family():
    scan = scans.TopologyScan(
        0,
        {t.topic: {"topic": t.topic} for t in TOPOLOGY.tiers},
        {topic: {"topic": topic} for topic in scans.dead_topics(TOPOLOGY)},
    )
    view = topology_view(
        "orders.yaml", TOPOLOGY, SETTINGS, scan, runs_reader=lambda *a: [], can_trigger=lambda d: True
    )
    cards = [(d["topic"], d["kind"], d["family"], d["replay_dag_id"]) for d in view["dead_letter_topics"]]
    assert cards == [
        ("orders-dlt", "dlt", None, "replay_orders"),
        ("orders-parking", "parking", None, "replay_orders"),
        ("connect-dlq", "dlq", "kafka-connect", "replay_orders"),
        ("dlq.orders-share", "dlq", None, "replay_orders"),
    ]
