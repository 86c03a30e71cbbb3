"""TopologyDueEventTrigger's arguments: the serialized form rebuilds the same trigger, bad lanes are named."""

from __future__ import annotations

import json
import re

import pytest
from airflow.triggers.base import BaseEventTrigger

from airflow_kafka_retry.triggers.topology_events import TopologyDueEventTrigger, check_lanes

LANES = [
    {
        "name": "retry_1",
        "topics": ["orders-retry-1"],
        "group": "orders-retry-1-group",
        "due_horizon_ms": 123_456,
        "tier_index": 1,
        "window": "01:00-05:00",
        "timezone": "Europe/Berlin",
    },
    {"name": "retry_2", "topics": ["orders-retry-2"], "group": "orders-retry-2-group", "tier_index": 2},
    {
        "name": "watch_dlt",
        "topics": ["orders-dlt", "orders-parking"],
        "optional_topics": ["orders-parking"],
        "group": "orders-dlt-watch",
        "read_due": False,
    },
]


def test_the_serialized_kwargs_rebuild_an_equal_trigger():
    trigger = TopologyDueEventTrigger(
        topology_topic="orders",
        lanes=LANES,
        kafka_conn_id="kafka_other",
        setup_task="ensure_topics",
        fire_ahead=1.5,
        refire_after=30,
        busy_hold=2.0,
        poll_interval=0.25,
        commit_check=0.75,
        idle_check=10,
        retry_after=3,
        gauge_interval=15,
        idle_check_max=120,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_kafka_retry.triggers.topology_events.TopologyDueEventTrigger"
    assert json.loads(kwargs["lanes"]) == LANES  # the lanes travel as JSON
    assert {k: v for k, v in kwargs.items() if k != "lanes"} == {
        "topology_topic": "orders",
        "kafka_conn_id": "kafka_other",
        "setup_task": "ensure_topics",
        "fire_ahead": 1.5,
        "refire_after": 30,
        "busy_hold": 2.0,
        "follow": 0.0,
        "poll_interval": 0.25,
        "commit_check": 0.75,
        "idle_check": 10,
        "retry_after": 3,
        "gauge_interval": 15,
        "idle_check_max": 120,
    }
    # what the triggerer does: build it again from the stored kwargs (JSON in the database)
    rebuilt = TopologyDueEventTrigger(**json.loads(json.dumps(kwargs)))
    assert rebuilt.serialize() == (classpath, kwargs)
    assert rebuilt.lanes == trigger.lanes == LANES
    # the same watcher for Airflow (it matches an asset's watchers by this hash across DAG parses)
    assert BaseEventTrigger.hash(*rebuilt.serialize()) == BaseEventTrigger.hash(classpath, kwargs)
    assert "bootstrap" not in json.dumps(kwargs)  # the connection id travels, never the Kafka configuration


def test_the_serialized_lanes_do_not_depend_on_the_order_of_a_lanes_keys():
    reordered = [dict(reversed(list(lane.items()))) for lane in LANES]
    assert [list(lane) for lane in reordered] != [list(lane) for lane in LANES]
    assert (
        TopologyDueEventTrigger(topology_topic="orders", lanes=reordered).serialize()
        == TopologyDueEventTrigger(topology_topic="orders", lanes=LANES).serialize()
    )


def test_the_defaults_round_trip_and_the_lanes_are_copies():
    lanes = [dict(lane) for lane in LANES]
    trigger = TopologyDueEventTrigger(topology_topic="orders", lanes=lanes)
    kwargs = trigger.serialize()[1]
    assert kwargs["kafka_conn_id"] == "kafka_default"
    assert kwargs["setup_task"] is None
    assert TopologyDueEventTrigger(**kwargs).serialize()[1] == kwargs
    lanes[0]["name"] = "changed later"  # the caller's dicts are not the trigger's
    assert trigger.lanes[0]["name"] == "retry_1"
    assert json.loads(trigger.serialize()[1]["lanes"])[0]["name"] == "retry_1"


@pytest.mark.parametrize(
    ("lanes", "message"),
    [
        ([], "TopologyDueEventTrigger needs at least one lane"),
        ("[", "TopologyDueEventTrigger: lanes are not valid JSON"),
        ("[]", "TopologyDueEventTrigger needs at least one lane"),
        (json.dumps([{**LANES[1], "topics": []}]), "lane 'retry_2' needs topics and a group"),
        (["retry_1"], "TopologyDueEventTrigger: lane 0 must be a mapping, got 'retry_1'"),
        (
            [LANES[0], {**LANES[1], "delay": 5}],
            "TopologyDueEventTrigger: lane 1 has unknown key(s) ['delay']",
        ),
        ([LANES[0], {**LANES[1], "name": "retry_1"}], "lane 1 needs a unique name, got 'retry_1'"),
        ([{**LANES[1], "name": ""}], "lane 0 needs a unique name, got ''"),
        ([{**LANES[1], "topics": []}], "lane 'retry_2' needs topics and a group"),
        ([{**LANES[1], "topics": ["orders-retry-2", ""]}], "lane 'retry_2' needs topics and a group"),
        ([{**LANES[1], "topics": "orders-retry-2"}], "lane 'retry_2' needs topics and a group"),
        ([{k: v for k, v in LANES[1].items() if k != "group"}], "lane 'retry_2' needs topics and a group"),
        (
            [{**LANES[2], "optional_topics": ["orders-elsewhere"]}],
            "lane 'watch_dlt': optional_topics must be among its topics",
        ),
    ],
)
def test_a_bad_lane_is_refused_naming_it(lanes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_lanes(lanes)
    with pytest.raises(ValueError, match="lane"):
        TopologyDueEventTrigger(topology_topic="orders", lanes=lanes)


@pytest.mark.parametrize(
    "name", ["busy_hold", "refire_after", "poll_interval", "gauge_interval", "idle_check_max"]
)
@pytest.mark.parametrize("value", [-1, True, "5"])
def test_a_bad_timing_is_refused_naming_it(name, value):
    with pytest.raises(ValueError, match=f"{name} must be a number of seconds >= 0, got {value!r}"):
        TopologyDueEventTrigger(topology_topic="orders", lanes=LANES, **{name: value})


def test_a_bad_window_fails_when_the_trigger_is_made():
    with pytest.raises(ValueError, match="25:00 is not a time of day"):
        TopologyDueEventTrigger(topology_topic="orders", lanes=[{**LANES[1], "window": "25:00-26:00"}])
