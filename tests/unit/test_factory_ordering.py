"""``build_retry_dags`` on a topology with ``ordering: key`` (docs/ordering.md): its ``main``, its lanes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from airflow_kafka_retry.factory.retry_dags import build_retry_dags
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.topology.acl import AclScope, acl_bindings
from airflow_kafka_retry.policy.topology.model import Topology

HANDLER = "handlers.orders:handle"


def _write(folder: Path, name: str = "orders.yaml", **fields) -> Path:
    data = {
        "topic": "orders",
        "group_id": "orders-svc",
        "attempts": 3,
        "backoff": {"kind": "fixed", "delay": "5s"},
        "ordering": "key",
        **fields,
    }
    path = folder / name
    path.write_text(yaml.safe_dump(data))
    return path


def _lanes(dag) -> dict[str, dict]:
    [watcher] = dag.timetable.asset_condition.watchers
    return {lane["name"]: lane for lane in watcher.trigger.lanes}


def test_ordering_drains_the_main_topic_unasked_and_its_lane_watches_the_hold_topic(tmp_path):
    [dag] = build_retry_dags(_write(tmp_path), handler=HANDLER).values()
    assert {"main", "retry_1", "retry_2"} <= set(dag.task_ids)
    lanes = _lanes(dag)
    # a tier's mark in the hold topic starts main, in main's group; the hold topic is the setup task's
    # to create (not optional: a missing one fires ensure_topics)
    assert lanes["main"]["topics"] == ["orders", "orders-hold"]
    assert lanes["main"]["group"] == "orders-svc"
    assert "optional_topics" not in lanes["main"]
    assert lanes["main"]["order_state_topic"] == "orders-order-state"  # its key-order gauges
    assert "order_state_topic" not in lanes["retry_1"]
    assert lanes["retry_1"]["topics"] == ["orders-retry-1"]
    # the watcher's principal is granted what the tiers' lanes read
    topology = Topology.from_mapping(yaml.safe_load(_write(tmp_path, "again.yaml").read_text()))
    granted = {b.name for b in acl_bindings(topology, AclScope(), roles=["watcher"]) if b.operation == "READ"}
    assert {t for name in ("main", "retry_1", "retry_2") for t in lanes[name]["topics"]} <= granted
    assert json.dumps(list(lanes.values()))  # the lanes serialize


def test_without_ordering_the_main_lane_watches_the_main_topic_only(tmp_path):
    [dag] = build_retry_dags(_write(tmp_path, ordering="none"), handler=HANDLER, include_main=True).values()
    assert _lanes(dag)["main"]["topics"] == ["orders"]


@pytest.mark.parametrize(
    ("fields", "kwargs", "words"),
    [
        ({}, {"include_main": False}, "the task 'main' (the keeper)"),
        # a Spring service left on the main topic does not know which keys are held
        ({"compat": "spring-3.2"}, {"include_main": False}, "does not know which keys are held"),
        ({}, {"layout": "tiers"}, "needs layout='topology'"),
        ({}, {"trigger": "schedule"}, "needs layout='topology'"),
    ],
)
def test_what_ordering_refuses_names_the_file_the_field_and_why(tmp_path, fields, kwargs, words):
    path = _write(tmp_path, **fields)
    with pytest.raises(TopologyError) as caught:
        build_retry_dags(path, handler=HANDLER, **kwargs)
    message = str(caught.value)
    assert str(path) in message
    assert "field 'ordering'" in message
    assert words in message
