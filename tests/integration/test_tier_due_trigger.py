"""TierDueTrigger.run() against the real broker: it waits for a record to become due, then fires."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from airflow_kafka_retry.sandbox.scratch_topics import unique_topic
from airflow_kafka_retry.triggers.tier_due import TierDueTrigger

from tests.support.tier_records import commit, produce

pytestmark = pytest.mark.integration


def _now() -> int:
    return time.time_ns() // 1_000_000


def _events(trigger: TierDueTrigger, timeout: float = 60) -> list:
    async def collect():
        return [event async for event in trigger.run()]

    return asyncio.run(asyncio.wait_for(collect(), timeout))


def test_fires_when_the_head_becomes_due(kafka_bootstrap, kafka_conn, new_topic):
    topic = new_topic("trig-due", partitions=2)
    group = unique_topic("g")
    due = _now() + 2_000
    produce(kafka_bootstrap, topic, [(0, _now() - 1000), (1, due), (1, due + 3_600_000)])
    commit(kafka_bootstrap, group, topic, {0: 1})  # partition 0 already drained
    trigger = TierDueTrigger(
        topic=topic, consumer_group=group, kafka_conn_id=kafka_conn, deadline_ms=_now() + 60_000
    )
    rebuilt = TierDueTrigger(**trigger.serialize()[1])
    [event] = _events(rebuilt)
    assert _now() >= due  # not before the record was due
    payload = event.payload
    assert payload["status"] == "due"
    assert payload["check"]["due_partitions"] == [1]
    assert payload["check"]["earliest_due_ms"] == due
    assert [(h["partition"], h["offset"]) for h in payload["peek"]["heads"]] == [(1, 0)]
    assert "secret-payload" not in json.dumps(payload)


def test_idle_tier_fires_idle_at_once(kafka_bootstrap, kafka_conn, new_topic):
    topic = new_topic("trig-idle", partitions=2)
    [event] = _events(TierDueTrigger(topic=topic, consumer_group=unique_topic("g"), kafka_conn_id=kafka_conn))
    assert event.payload["status"] == "idle"


def test_not_due_before_the_deadline_fires_skip(kafka_bootstrap, kafka_conn, new_topic):
    topic = new_topic("trig-skip", partitions=1)
    produce(kafka_bootstrap, topic, [(0, _now() + 3_600_000)])
    [event] = _events(
        TierDueTrigger(
            topic=topic,
            consumer_group=unique_topic("g"),
            kafka_conn_id=kafka_conn,
            deadline_ms=_now() + 1_000,
        )
    )
    assert event.payload["status"] == "skip"
    assert event.payload["check"]["pending_partitions"] == [0]


def test_missing_topic_fires_an_error_naming_it(kafka_conn):
    topic = unique_topic("trig-missing")
    [event] = _events(
        TierDueTrigger(topic=topic, consumer_group="g", kafka_conn_id=kafka_conn, peek_timeout=10)
    )
    assert event.payload["status"] == "error"
    assert topic in event.payload["message"]
