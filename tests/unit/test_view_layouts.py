"""The Retry tiers view finds each tier's DAG and task as ``build_retry_dags`` laid them out."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_kafka_retry.plugin.scans import TopologyScan
from airflow_kafka_retry.plugin.settings import ViewSettings
from airflow_kafka_retry.plugin.view_model import tier_dag_ids, topology_view
from airflow_kafka_retry.policy.topology.file import load_topology

ORDERS = Path(__file__).parents[2] / "dags" / "topologies" / "orders.yaml"


def _settings(layout: str) -> ViewSettings:
    return ViewSettings(
        topologies=(str(ORDERS),),
        kafka_conn_id="kafka_default",
        dag_id_template="kafka_retry__{topic}",
        replay_dag_id_template="kafka_dlt_replay__{topic}",
        timeout_s=1,
        runs=3,
        layout=layout,
    )


def _view(layout: str) -> tuple[dict, list[tuple]]:
    topology = load_topology(ORDERS)
    scan = TopologyScan(0, {t.topic: {"topic": t.topic} for t in topology.tiers}, {})
    asked: list[tuple] = []

    def runs(dag_id: str, limit: int, task_id: str | None) -> list[dict]:
        asked.append((dag_id, limit, task_id))
        return []

    view = topology_view(
        str(ORDERS), topology, _settings(layout), scan, runs_reader=runs, can_trigger=lambda d: True
    )
    return view, asked


def test_one_topology_dag_each_tier_a_task_its_button_runs_only_that_tier():
    view, asked = _view("topology")
    tiers = [(t["dag_id"], t["task_id"], t["trigger_conf"]) for t in view["tiers"]]
    assert tiers == [
        ("kafka_retry__orders", "main", {"lanes": ["main"]}),
        ("kafka_retry__orders", "retry_1", {"lanes": ["retry_1"]}),
        ("kafka_retry__orders", "retry_2", {"lanes": ["retry_2"]}),
        ("kafka_retry__orders", "retry_3", {"lanes": ["retry_3"]}),
    ]
    # each tier lists the runs its task ran in (not those it was skipped in)
    assert asked == [("kafka_retry__orders", 3, t) for t in ("main", "retry_1", "retry_2", "retry_3")]
    assert set(tier_dag_ids(load_topology(ORDERS), _settings("topology"))) == {"kafka_retry__orders"}


@pytest.mark.parametrize("layout", ["tiers"])
def test_a_dag_per_tier(layout):
    view, asked = _view(layout)
    assert [(t["dag_id"], t["task_id"], t["trigger_conf"]) for t in view["tiers"]][1] == (
        "kafka_retry__orders-retry-1",
        "reprocess",
        {},
    )
    assert asked[1] == ("kafka_retry__orders-retry-1", 3, None)
