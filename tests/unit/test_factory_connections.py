"""A Kafka connection per role: ``build_retry_dags(conn_ids=...)`` gives each task and watcher its role's."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest

from airflow_kafka_retry.factory.connections import ROLES, role_connections
from airflow_kafka_retry.factory.folder import build_retry_dags_from_folder
from airflow_kafka_retry.factory.retry_dags import build_retry_dags
from airflow_kafka_retry.triggers.tier_events import DltArrivalEventTrigger, TierDueEventTrigger
from airflow_kafka_retry.triggers.topology_events import TopologyDueEventTrigger

REPO = Path(__file__).parents[2]
ORDERS = REPO / "dags" / "topologies" / "orders.yaml"
HANDLER = "handlers.orders:handle"
BASE = "kafka_base"
CONNS = {"setup": "kafka_setup", "tiers": "kafka_tiers", "dlt_watch": "kafka_dlt_watch", "watcher": "kafka_w"}
TIER_TASKS = ("main", "retry_1", "retry_2", "retry_3")


def _watchers(dag) -> list:
    return [w.trigger for w in dag.timetable.asset_condition.watchers]


def _conns(dag) -> dict[str, str]:
    """Each task's connection id (tasks that have one)."""
    return {t.task_id: t.kafka_conn_id for t in dag.tasks if hasattr(t, "kafka_conn_id")}


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_each_task_and_the_watcher_of_a_topology_dag_get_their_roles_connection(engine):
    [dag] = build_retry_dags(
        ORDERS, handler=HANDLER, engine=engine, include_main=True, kafka_conn_id=BASE, conn_ids=CONNS
    ).values()
    assert _conns(dag) == {
        "ensure_topics": "kafka_setup",
        **dict.fromkeys(TIER_TASKS, "kafka_tiers"),
        "watch_dlt": "kafka_dlt_watch",
    }
    if engine == "spark":  # the tier tasks' connection is the configuration spark-submit gets
        assert {type(dag.get_task(t)).__name__ for t in TIER_TASKS} == {"SparkReprocessTierOperator"}
    [trigger] = _watchers(dag)
    assert (type(trigger), trigger.kafka_conn_id) == (TopologyDueEventTrigger, "kafka_w")
    # the asset stays keyed by the base connection: the same asset, the same saved waves, as without roles
    uri = "kafka-retry-topology://kafka_base/orders"
    assert dag.timetable.asset_condition.uri == uri
    assert {t._pre_execute_hook.watched_asset for t in dag.tasks} == {uri}  # the lanes' gate


def test_the_tier_layout_and_schedule_mode_give_each_role_its_connection():
    dags = build_retry_dags(ORDERS, handler=HANDLER, layout="tiers", kafka_conn_id=BASE, conn_ids=CONNS)
    for topic in ("orders-retry-1", "orders-retry-2", "orders-retry-3"):
        dag = dags[f"kafka_retry__{topic}"]
        assert _conns(dag) == {"reprocess": "kafka_tiers"}
        [trigger] = _watchers(dag)
        assert (type(trigger), trigger.kafka_conn_id) == (TierDueEventTrigger, "kafka_w")
        assert dag.timetable.asset_condition.uri == f"kafka-retry-due://kafka_base/{topic}"
    watch = dags["kafka_retry__orders-dlt"]
    assert _conns(watch) == {"watch_dlt": "kafka_dlt_watch"}
    [trigger] = _watchers(watch)
    assert (type(trigger), trigger.kafka_conn_id) == (DltArrivalEventTrigger, "kafka_w")
    assert watch.timetable.asset_condition.uri == "kafka-retry-dead-letters://kafka_base/orders"
    assert _conns(dags["kafka_retry__orders__ensure_topics"]) == {"ensure_topics": "kafka_setup"}

    polled = build_retry_dags(ORDERS, handler=HANDLER, trigger="schedule", kafka_conn_id=BASE, conn_ids=CONNS)
    for topic in ("orders-retry-1", "orders-retry-2", "orders-retry-3"):
        # the due sensor watches the tier as the watchers do (and defers to a trigger in the triggerer)
        assert _conns(polled[f"kafka_retry__{topic}"]) == {
            "ensure_topics": "kafka_setup",
            "wait_for_due": "kafka_w",
            "reprocess": "kafka_tiers",
        }
    assert _conns(polled["kafka_retry__orders-dlt"]) == {"watch_dlt": "kafka_dlt_watch"}


def test_a_role_not_given_uses_kafka_conn_id():
    [dag] = build_retry_dags(
        ORDERS, handler=HANDLER, kafka_conn_id=BASE, conn_ids={"tiers": "kafka_tiers"}
    ).values()
    assert _conns(dag) == {
        "ensure_topics": BASE,
        **dict.fromkeys(TIER_TASKS[1:], "kafka_tiers"),
        "watch_dlt": BASE,
    }
    assert _watchers(dag)[0].kafka_conn_id == BASE
    [plain] = build_retry_dags(ORDERS, handler=HANDLER).values()
    assert set(_conns(plain).values()) == {"kafka_default"}
    assert _watchers(plain)[0].kafka_conn_id == "kafka_default"
    assert plain.timetable.asset_condition.uri == "kafka-retry-topology://kafka_default/orders"
    roles = role_connections("kafka_default", {})
    assert [getattr(roles, role) for role in ROLES] == ["kafka_default"] * 5


@pytest.mark.parametrize(
    ("conn_ids", "message"),
    [
        (
            {"tier": "x"},
            r"conn_ids: unknown role 'tier'; the roles are tiers, watcher, dlt_watch, setup, replay",
        ),
        ({"view": "x"}, r"conn_ids\['view'\]: .*\[kafka_retry\] kafka_conn_id setting"),
        ({"setup": ""}, r"conn_ids\['setup'\] must be an Airflow connection id .*got ''"),
        ({"watcher": None}, r"conn_ids\['watcher'\] must be an Airflow connection id .*got None"),
        (
            ["tiers"],
            r"conn_ids must map a role \(tiers, watcher, dlt_watch, setup, replay\) to a connection id, got",
        ),
    ],
)
def test_a_wrong_role_or_id_is_refused_naming_it_and_the_roles(conn_ids, message):
    with pytest.raises(ValueError, match=message):
        build_retry_dags(ORDERS, handler=HANDLER, conn_ids=conn_ids)


def test_the_watchers_with_a_role_connection_round_trip_through_their_own_serialize():
    from airflow.serialization.serialized_objects import DagSerialization

    [dag] = build_retry_dags(ORDERS, handler=HANDLER, kafka_conn_id=BASE, conn_ids=CONNS).values()
    tiered = build_retry_dags(ORDERS, handler=HANDLER, layout="tiers", kafka_conn_id=BASE, conn_ids=CONNS)
    triggers = [
        *_watchers(dag),
        *_watchers(tiered["kafka_retry__orders-retry-1"]),
        *_watchers(tiered["kafka_retry__orders-dlt"]),
    ]
    for trigger in triggers:
        classpath, kwargs = trigger.serialize()
        assert kwargs["kafka_conn_id"] == "kafka_w"
        assert not any(isinstance(v, dict) for v in kwargs.values())  # ids only, never a configuration
        again = type(trigger)(**json.loads(json.dumps(kwargs)))
        assert again.serialize() == (classpath, kwargs)
    # and through the DAG's serialization (what the DAG processor stores and the triggerer runs)
    back = DagSerialization.from_dict(json.loads(json.dumps(DagSerialization.to_dict(dag))))
    [stored] = back.timetable.asset_condition.watchers
    assert stored.trigger["kwargs"]["kafka_conn_id"] == "kafka_w"
    rebuilt = TopologyDueEventTrigger(**stored.trigger["kwargs"])
    assert (rebuilt.kafka_conn_id, back.timetable.asset_condition.uri) == (
        "kafka_w",
        "kafka-retry-topology://kafka_base/orders",
    )
    assert {t.task_id: t.kafka_conn_id for t in back.tasks} == _conns(dag)


def test_building_with_roles_reads_no_connection():
    from airflow.sdk import BaseHook

    from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook

    with (
        mock.patch.object(BaseHook, "get_connection", side_effect=AssertionError("read a connection")),
        mock.patch.object(KafkaRetryHook, "kafka_config", side_effect=AssertionError("read a connection")),
    ):
        for layout in ("topology", "tiers"):
            build_retry_dags(ORDERS, handler=HANDLER, layout=layout, kafka_conn_id=BASE, conn_ids=CONNS)
        build_retry_dags(ORDERS, handler=HANDLER, trigger="schedule", kafka_conn_id=BASE, conn_ids=CONNS)


def test_the_folder_passes_conn_ids_through_and_refuses_a_wrong_role(tmp_path):
    (tmp_path / "pay.yaml").write_text(
        "topic: pay\ngroup_id: pay-svc\nattempts: 3\nbackoff: {kind: custom, delays: [30s, 60s]}\n"
    )
    dags = build_retry_dags_from_folder(tmp_path, handler=HANDLER, kafka_conn_id=BASE, conn_ids=CONNS)
    dag = dags["kafka_retry__pay"]
    assert _conns(dag) == {
        "ensure_topics": "kafka_setup",
        "retry_1": "kafka_tiers",
        "retry_2": "kafka_tiers",
        "watch_dlt": "kafka_dlt_watch",
    }
    assert _watchers(dag)[0].kafka_conn_id == "kafka_w"
    # a mistake of the DAG file, not of one topology: an error, not every topology logged and skipped
    with pytest.raises(ValueError, match="unknown role 'dlt'"):
        build_retry_dags_from_folder(tmp_path, handler=HANDLER, conn_ids={"dlt": "x"})
