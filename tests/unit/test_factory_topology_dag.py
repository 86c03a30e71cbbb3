"""The default layout of ``build_retry_dags`` in event mode: a topology is one DAG with one watcher."""

from __future__ import annotations

import json
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from airflow_kafka_retry.factory.overrides import TierOverrideError
from airflow_kafka_retry.factory.retry_dags import build_retry_dags
from airflow_kafka_retry.operators.reprocess_base import wave_not_before_ms
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.triggers.topology_events import TOPOLOGY_DUE, TopologyDueEventTrigger

REPO = Path(__file__).parents[2]
ORDERS = REPO / "dags" / "topologies" / "orders.yaml"
HANDLER = "handlers.orders:handle"
LANES = ["main", "retry_1", "retry_2", "retry_3", "watch_dlt"]


def _trigger(dag) -> TopologyDueEventTrigger:
    [watcher] = dag.timetable.asset_condition.watchers
    return watcher.trigger


def test_a_topology_is_one_dag_with_a_task_per_tier_each_a_root():
    dags = build_retry_dags(ORDERS, handler=HANDLER, include_main=True)
    assert list(dags) == ["kafka_retry__orders"]
    dag = dags["kafka_retry__orders"]
    assert {t.task_id for t in dag.tasks} == {"ensure_topics", *LANES}
    assert all(not t.upstream_task_ids for t in dag.tasks)  # the watcher's event starts each at once
    # each task one at a time; runs overlap, so a long retry-2 drain does not hold back retry-1
    assert all(t.max_active_tis_per_dag == 1 for t in dag.tasks)
    assert dag.max_active_runs == 8
    topology = load_topology(ORDERS)
    for index, lane in enumerate(LANES[:4]):
        task = dag.get_task(lane)
        assert task.tier == index
        assert (task.cutoff, task.skip_missing_topic, task.follow_ms) == ("now", True, 10_000)
    assert (dag.get_task("ensure_topics").retries, dag.get_task("ensure_topics").retry_delay) == (
        3,
        timedelta(seconds=20),
    )
    assert type(dag.timetable).__name__ == "AssetOrTimeSchedule"
    assert dag.timetable.asset_condition.uri == "kafka-retry-topology://kafka_default/orders"
    trigger = _trigger(dag)
    assert (trigger.topology_topic, trigger.kafka_conn_id, trigger.setup_task) == (
        "orders",
        "kafka_default",
        "ensure_topics",
    )
    assert [lane["name"] for lane in trigger.lanes] == LANES
    for lane, tier in zip(trigger.lanes, topology.tiers, strict=False):
        assert lane["topics"] == [tier.topic]
        assert lane["group"] == topology.consumer_group(tier)
        assert lane["due_horizon_ms"] == 86_400_000 + tier.delay_ms
        assert lane["tier_index"] == tier.index
    watch = trigger.lanes[-1]
    assert watch["topics"] == [*(t.topic for t in topology.dlt_tiers), topology.parking_topic]
    assert (watch["optional_topics"], watch["group"], watch["read_due"]) == (
        [topology.parking_topic],
        "orders-service-dlt-watch",
        False,
    )
    assert (trigger.timing["fire_ahead"], trigger.timing["refire_after"]) == (3.0, 45.0)
    # the watcher holds the heads a running task takes itself: those due within its follow of a commit
    assert (trigger.timing["follow"], trigger.timing["busy_hold"]) == (10.0, 5.0)
    spark = build_retry_dags(ORDERS, handler=HANDLER, engine="spark")["kafka_retry__orders"]
    assert _trigger(spark).timing["follow"] == 0.0  # a Spark run drains once
    # one weekly sweep for the DAG, at a time of day derived from its id
    spread, day = zlib.crc32(b"kafka_retry__orders"), zlib.crc32(b"orders") % 7
    assert dag.timetable.timetable.expression == f"{spread % 60} {spread // 60 % 24} * * {day}"
    assert dag.start_date is None
    assert "`retry_2` | `orders-retry-2` | 1m" in dag.doc_md


def test_windows_reach_the_lane_and_the_task_and_a_tier_schedule_is_refused():
    dag = build_retry_dags(
        ORDERS,
        handler=HANDLER,
        tier_overrides={
            "orders-retry-3": {
                "window": "01:00-05:00",
                "timezone": "Europe/Berlin",
                "max_run": "2h",
                "pool": "night_batch",
            }
        },
    )["kafka_retry__orders"]
    lane = next(lane for lane in _trigger(dag).lanes if lane["name"] == "retry_3")
    assert (lane["window"], lane["timezone"]) == ("01:00-05:00", "Europe/Berlin")
    task = dag.get_task("retry_3")
    assert (task.window, task.timezone, task.max_run) == ("01:00-05:00", "Europe/Berlin", timedelta(hours=2))
    assert (task.pool, dag.get_task("retry_1").pool) == ("night_batch", "default_pool")  # a pool per tier
    with pytest.raises(
        TierOverrideError, match=r"\['orders-retry-1'\]\['pool'\]: must be the name of an Airflow pool"
    ):
        build_retry_dags(ORDERS, handler=HANDLER, tier_overrides={"orders-retry-1": {"pool": ""}})
    with pytest.raises(
        TierOverrideError, match=r"\['orders-retry-3'\]\['schedule'\]: a topology DAG has one"
    ):
        build_retry_dags(
            ORDERS, handler=HANDLER, tier_overrides={"orders-retry-3": {"schedule": "0 1 * * *"}}
        )


def test_layout_arguments_are_checked():
    assert next(iter(build_retry_dags(ORDERS, handler=HANDLER, trigger="schedule"))) == (
        "kafka_retry__orders-retry-1"
    )
    with pytest.raises(ValueError, match="schedule mode has a schedule per tier, so it needs layout='tiers'"):
        build_retry_dags(ORDERS, handler=HANDLER, trigger="schedule", layout="topology")
    with pytest.raises(ValueError, match="layout must be one of topology, tiers, got 'dag'"):
        build_retry_dags(ORDERS, handler=HANDLER, layout="dag")
    with pytest.raises(ValueError, match="max_active_runs must be a positive int, got 0"):
        build_retry_dags(ORDERS, handler=HANDLER, max_active_runs=0)
    assert (
        build_retry_dags(ORDERS, handler=HANDLER, max_active_runs=2)["kafka_retry__orders"].max_active_runs
        == 2
    )
    swept = build_retry_dags(ORDERS, handler=HANDLER, sweep=timedelta(minutes=10))["kafka_retry__orders"]
    assert swept.timetable.timetable.delta == timedelta(minutes=10)


def test_no_dlt_watch_lane_without_a_dlt(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"topic": "pay", "group_id": "pay-svc", "dlt_strategy": "no_dlt"}))
    for dags in (
        build_retry_dags(path, handler=HANDLER),
        build_retry_dags(ORDERS, handler=HANDLER, dlt_watch=False),
    ):
        [dag] = dags.values()
        assert "watch_dlt" not in dag.task_ids
        assert "watch_dlt" not in [lane["name"] for lane in _trigger(dag).lanes]


def test_a_topology_without_a_dlt_watches_the_queues_it_names(tmp_path):
    """``no_dlt`` with ``dead_letter_queues``: the watch lane and task read those queues (once they exist)."""
    path = tmp_path / "t.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "topic": "pay",
                "group_id": "pay-svc",
                "dlt_strategy": "no_dlt",
                "dead_letter_queues": ["dlq.pay"],
            }
        )
    )
    [dag] = build_retry_dags(path, handler=HANDLER).values()
    assert "watch_dlt" in dag.task_ids
    [lane] = [lane for lane in _trigger(dag).lanes if lane["name"] == "watch_dlt"]
    assert (lane["topics"], lane["optional_topics"]) == (["dlq.pay"], ["dlq.pay"])
    tiered = build_retry_dags(path, handler=HANDLER, layout="tiers")
    assert "kafka_retry__dlq.pay" in tiered  # the tier layout's DLT-watch DAG, named by its one queue


def test_the_topology_dag_and_its_trigger_serialize():
    from airflow.serialization.serialized_objects import DagSerialization

    [dag] = build_retry_dags(ORDERS, handler=HANDLER, include_main=True).values()
    back = DagSerialization.from_dict(json.loads(json.dumps(DagSerialization.to_dict(dag))))
    assert sorted(back.task_ids) == sorted(dag.task_ids)
    classpath, kwargs = _trigger(dag).serialize()
    assert classpath == "airflow_kafka_retry.triggers.topology_events.TopologyDueEventTrigger"
    assert TopologyDueEventTrigger(**json.loads(json.dumps(kwargs))).serialize() == (classpath, kwargs)
    # the watcher's identity in the metadata DB (the trigger's hash) is the same at every parse
    from airflow.serialization.encoders import encode_trigger
    from airflow.triggers.base import BaseEventTrigger

    built = encode_trigger(_trigger(dag))
    stored = encode_trigger(back.timetable.asset_condition.watchers[0].trigger)
    assert BaseEventTrigger.hash(built["classpath"], built["kwargs"]) == BaseEventTrigger.hash(
        stored["classpath"], stored["kwargs"]
    )


def test_an_idle_topology_dag_sweeps_once_a_week():
    from croniter import croniter

    [dag] = build_retry_dags(ORDERS, handler=HANDLER, include_main=True).values()
    start = datetime(2026, 3, 2, 0, 0, 30, tzinfo=UTC)
    ticks = croniter(dag.timetable.timetable.expression, start)
    runs = []
    while (when := ticks.get_next(datetime)) < start + timedelta(days=28):
        runs.append(when)
    assert len(runs) == 4


def _event(payload: dict) -> SimpleNamespace:
    return SimpleNamespace(extra={"payload": payload})


def _context(*payloads: dict, task_id: str) -> dict:
    events = {"kafka-retry-topology://kafka_default/orders": [_event(p) for p in payloads]}
    return {"triggering_asset_events": events, "ti": SimpleNamespace(task_id=task_id)}


def test_a_tier_task_waits_for_its_own_lanes_wave():
    payload = {
        "kind": TOPOLOGY_DUE,
        "due": ["retry_1", "retry_2"],
        "lanes": {"retry_1": {"not_before_ms": 1_000}, "retry_2": {"not_before_ms": 5_000}},
    }
    later = {"kind": TOPOLOGY_DUE, "due": ["retry_1"], "lanes": {"retry_1": {"not_before_ms": 2_000}}}
    assert wave_not_before_ms(_context(payload, later, task_id="retry_1")) == 2_000
    assert wave_not_before_ms(_context(payload, task_id="retry_2")) == 5_000
    assert wave_not_before_ms(_context(payload, task_id="watch_dlt")) is None
    assert wave_not_before_ms(_context(payload, task_id="retry_3")) is None


def test_lane_changes_name_what_was_added_and_removed():
    from airflow_kafka_retry.triggers.topology_lanes import lane_changes, lanes_state

    old = [
        {"name": "retry_1", "topics": ["a"], "group": "g1"},
        {"name": "retry_2", "topics": ["b"], "group": "g2"},
    ]
    new = [
        {"name": "retry_1", "topics": ["a"], "group": "g1", "window": "01:00-02:00"},
        {"name": "watch_dlt", "topics": ["d"], "group": "w"},
    ]
    assert lane_changes(lanes_state(old), new) == (["watch_dlt"], [old[1]])
    # a tier whose topic changed under the same task id: its old topic is left to no task
    moved = [{"name": "retry_1", "topics": ["a2"], "group": "g1"}, old[1]]
    assert lane_changes(lanes_state(old), moved) == (["retry_1"], [old[0]])
    assert lane_changes(None, new) == ([], [])
    assert lane_changes({"lanes": "garbled"}, new) == ([], [])
    assert lanes_state(new) == {
        "lanes": [
            {"name": "retry_1", "topics": ["a"], "group": "g1"},
            {"name": "watch_dlt", "topics": ["d"], "group": "w"},
        ]
    }
