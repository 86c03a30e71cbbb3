"""A topology whose tiers change: the new watcher says what was added, removed, and left on a removed tier.

The watcher saves its lanes in the asset state store. A watcher built after a tier was removed (the
topology's ``attempts`` lowered) finds the old lanes there: it logs the added ones, forgets the removed
ones' waves, and warns for a removed tier naming its topic, its group and the first records still pending
past the group's committed offsets, which no task drains any more, and how to drain them.
"""

from __future__ import annotations

import asyncio
from unittest import mock

import pytest

from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic
from airflow_kafka_retry.triggers.tier_events import STATE_KEY
from airflow_kafka_retry.triggers.topology_events import TopologyDueEventTrigger
from airflow_kafka_retry.triggers.topology_lanes import LANES_KEY

from tests.integration.test_tier_event_trigger import _Store
from tests.support.tier_records import commit, produce

pytestmark = pytest.mark.integration


def _lanes(main: str, tiers: int) -> list[dict]:
    return [
        {
            "name": f"retry_{i}",
            "topics": [f"{main}-retry-{i}"],
            "group": f"{main}-svc-retry-{i}",
            "tier_index": i,
        }
        for i in range(1, tiers + 1)
    ]


def _noted(trigger: TopologyDueEventTrigger, store: _Store) -> mock.MagicMock:
    trigger.asset_state_store = store  # type: ignore[assignment]
    with mock.patch.object(TopologyDueEventTrigger, "log", new_callable=mock.PropertyMock) as log:
        asyncio.run(trigger._note_lane_changes())
    return log.return_value


def test_a_removed_tier_with_pending_records_is_named_with_its_first_record(kafka_bootstrap, kafka_conn):
    main = unique_topic("lanes")
    topics = [f"{main}-retry-{i}" for i in (1, 2, 3)]
    create_topics(kafka_bootstrap, topics, 2)
    try:
        produce(kafka_bootstrap, topics[2], [(1, None), (1, None), (1, None)])  # retry-3[1]: offsets 0..2
        commit(kafka_bootstrap, f"{main}-svc-retry-3", topics[2], {1: 1})  # the first one was drained
        store = _Store(
            {f"{STATE_KEY}:retry_3": {"positions": [[topics[2], 1, 1]], "fired_ms": 1, "not_before_ms": 1}}
        )
        first = _noted(
            TopologyDueEventTrigger(topology_topic=main, lanes=_lanes(main, 3), kafka_conn_id=kafka_conn),
            store,
        )
        assert first.warning.call_args_list == []  # no earlier watcher: nothing to compare
        assert [lane["name"] for lane in store.state[LANES_KEY]["lanes"]] == ["retry_1", "retry_2", "retry_3"]

        # attempts lowered: retry-3 is gone from the topology, with records still on its topic
        fewer = _noted(
            TopologyDueEventTrigger(topology_topic=main, lanes=_lanes(main, 2), kafka_conn_id=kafka_conn),
            store,
        )
        [warning] = fewer.warning.call_args_list
        line = warning.args[0] % warning.args[1:]
        assert f"retry_3: {topics[2]} (group {main}-svc-retry-3)" in line
        assert "no longer part of the topology" in line
        assert (
            f"pending there from {topics[2]}[1]@1" in line
        )  # partition 0 is empty, partition 1 from offset 1
        assert "airflow-kafka-retry drain --topology OLD.yaml" in line
        assert f"{STATE_KEY}:retry_3" not in store.state, "the removed lane's wave is forgotten"
        assert [lane["name"] for lane in store.state[LANES_KEY]["lanes"]] == ["retry_1", "retry_2"]

        # a tier added back is logged as added; an empty removed tier says nothing is pending
        more = _noted(
            TopologyDueEventTrigger(topology_topic=main, lanes=_lanes(main, 3), kafka_conn_id=kafka_conn),
            store,
        )
        [info] = [c for c in more.info.call_args_list if "added" in c.args[0]]
        assert info.args[2] == ["retry_3"]
        commit(kafka_bootstrap, f"{main}-svc-retry-3", topics[2], {1: 3})
        empty = _noted(
            TopologyDueEventTrigger(topology_topic=main, lanes=_lanes(main, 2), kafka_conn_id=kafka_conn),
            store,
        )
        [warning] = empty.warning.call_args_list
        assert "nothing is pending there" in warning.args[0] % warning.args[1:]
    finally:
        delete_topics(kafka_bootstrap, topics)
