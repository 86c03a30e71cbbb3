"""A lane of the topology watcher whose broker does not answer holds none of the other lanes back.

After a rolling restart of a cluster, the committed-offset request of one lane's group timed out again and
again (30 s each) while the others' were answered; the watcher looked at its lanes one after another, so
every lane of the topology waited behind it and no wave fired for minutes. The lanes' broker calls now run
beside each other. Here one lane's committed-offset read blocks until the test releases it: another
lane's due record must fire while it is still blocked (an order of events, not a time).
"""

from __future__ import annotations

import threading

import pytest

from airflow_kafka_retry.engine.head_watch import HeadWatch

from tests.integration.test_tier_event_trigger import WAIT_S, _Running
from tests.integration.test_topology_event_trigger import HOUR_MS, _now, _tier, _trigger
from tests.support.tier_records import produce

pytestmark = pytest.mark.integration

BLOCK_S = 60.0  # the blocked read's own bound, should the test not release it


def test_a_lane_whose_committed_offsets_do_not_come_holds_none_of_the_others(
    kafka_bootstrap, kafka_conn, new_topic, monkeypatch
):
    slow_topic, fast_topic = new_topic("indep-slow"), new_topic("indep-fast")
    slow, fast = _tier("retry_2", slow_topic, 2), _tier("retry_1", fast_topic, 1)
    blocked, release = threading.Event(), threading.Event()
    real_sync = HeadWatch.sync_committed

    def sync_committed(watch: HeadWatch):
        if watch.group == slow["group"] and watch.committed:  # its first read (at open) is answered
            blocked.set()
            release.wait(BLOCK_S)
        return real_sync(watch)

    monkeypatch.setattr(HeadWatch, "sync_committed", sync_committed)
    # a head not due for an hour: its lane reads its group's offsets every commit_check
    produce(kafka_bootstrap, slow_topic, [(0, _now() + HOUR_MS)])
    trigger = _trigger(kafka_conn, [slow, fast])
    released_with: list[int] = []

    def produce_due(_events) -> None:
        assert blocked.wait(WAIT_S), "the slow lane's committed-offset read never started"
        produce(kafka_bootstrap, fast_topic, [(0, _now())])

    def fired(events) -> bool:
        if any("retry_1" in e["due"] for _, e in events) and not release.is_set():
            released_with.append(len(events))
            release.set()
        return bool(released_with)

    try:
        events = _Running(trigger).for_seconds(WAIT_S, until=lambda ev: True, then=produce_due, done=fired)
    finally:
        release.set()
    assert released_with, f"retry_1's due record did not fire while retry_2's read was blocked: {events}"
    assert [e["due"] for _, e in events[: released_with[0]]] == [["retry_1"]], events
