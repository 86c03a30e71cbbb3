"""``ordering: key``: a mark a tier writes to ``<topic>-hold`` starts the task ``main``, on the real broker.

The lanes are the factory's (``build_retry_dags`` on an ordering topology: the ``main`` lane watches the main
topic and the hold topic in main's group); the watcher runs as the triggerer runs it (``_Running``).
"""

from __future__ import annotations

import time
from typing import Any, cast

import pytest
import yaml

from airflow_kafka_retry.factory.retry_dags import build_retry_dags
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic
from airflow_kafka_retry.triggers.topology_events import TopologyDueEventTrigger

from tests.integration.test_tier_event_trigger import FAST, WAIT_S, _Running, _Store
from tests.support.tier_records import produce

pytestmark = pytest.mark.integration


def test_a_mark_in_the_hold_topic_starts_main(kafka_bootstrap, kafka_conn, tmp_path):
    main = unique_topic("ordered")
    path = tmp_path / "ordered.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "topic": main,
                "group_id": f"{main}-g",
                "attempts": 2,
                "backoff": {"delay": "1s"},
                "ordering": "key",
            }
        )
    )
    [dag] = build_retry_dags(path, handler="handlers.orders:handle", kafka_conn_id=kafka_conn).values()
    [watcher] = dag.timetable.asset_condition.watchers
    [lane] = [dict(lane) for lane in watcher.trigger.lanes if lane["name"] == "main"]
    hold = f"{main}-hold"
    assert lane["topics"] == [main, hold]
    create_topics(kafka_bootstrap, [main, hold], 1)
    try:
        trigger = TopologyDueEventTrigger(
            topology_topic=main, lanes=[lane], kafka_conn_id=kafka_conn, setup_task="ensure_topics", **FAST
        )
        trigger.asset_state_store = cast("Any", _Store())
        started = time.monotonic()

        def mark(_events) -> None:  # a tier's mark: no due header, due when written
            produce(kafka_bootstrap, hold, [(0, None)])

        events = _Running(trigger).for_seconds(
            WAIT_S,
            until=lambda _ev: time.monotonic() - started > 2,  # the watch is open, both topics empty
            then=mark,
            done=lambda ev: any("main" in e["due"] for _, e in ev),
        )
        assert [e["due"] for _, e in events] == [["main"]], events
        part = events[0][1]["lanes"]["main"]
        assert part["group"] == f"{main}-g"
        assert [(h["topic"], h["partition"], h["offset"]) for h in part["heads"]] == [(hold, 0, 0)]
    finally:
        delete_topics(kafka_bootstrap, [main, hold])
