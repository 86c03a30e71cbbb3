"""A lane of the topology watcher whose broker does not answer holds none of the other lanes back.

After a rolling restart of a cluster, the committed-offset request of one lane's group timed out again and
again (30 s each) while the others' were answered; the watcher looked at its lanes one after another, so
every lane of the topology waited behind it and no wave fired for minutes. The lanes' broker calls now run
beside each other. Here one lane's committed-offset read blocks until the test releases it: another
lane's due record must fire while it is still blocked (an order of events, not a time).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_kafka_retry.engine.heads.head_watch import HeadWatch
from airflow_kafka_retry.engine.heads.offset_reader import OffsetReader
from airflow_kafka_retry.engine.heads.shared_consumer import Lease
from airflow_kafka_retry.triggers import broker_calls

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


LANES = 20  # half of them frozen: more than asyncio's default executor has threads on 2 cores (6)


class _OnTwoCores(_Running):
    """The trigger run as the triggerer on 2 cores runs it: asyncio's default executor has 6 threads."""

    async def _collect(self) -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=6))
        await super()._collect()


def test_ten_lanes_whose_committed_offset_reads_are_frozen_hold_none_of_ten_healthy_lanes(
    kafka_bootstrap, kafka_conn, new_topic, monkeypatch
):
    """The lanes' calls once queued in asyncio's shared executor: six lanes waiting on a lost coordinator
    (15 + 5 s each) held every other lane's call, and their due records did not fire until those failed.

    Ten lanes' committed-offset reads go to a reader child process of their own, frozen (SIGSTOP) with its
    real admin client in it; the ten others' to the triggerer's. Every lane has a due record: the ten
    healthy lanes must all fire while the frozen reads are still unanswered."""
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__SHARED_WATCH_CONSUMERS", "True")
    lanes = [_tier(f"retry_{i + 1}", new_topic(f"indep-{i}"), i + 1) for i in range(LANES)]
    frozen_lanes, healthy_lanes = lanes[1::2], lanes[0::2]  # interleaved: none opens first by its place
    frozen_groups = {lane["group"] for lane in frozen_lanes}
    for lane in lanes:
        produce(kafka_bootstrap, lane["topics"][0], [(0, _now())])
    frozen_reader = OffsetReader({"bootstrap.servers": kafka_bootstrap})
    frozen_reader.committed(frozen_lanes[0]["group"], [(frozen_lanes[0]["topics"][0], 0)], 30.0)
    frozen_pid = frozen_reader.pid
    assert frozen_pid is not None
    frozen_asked, frozen_answered = threading.Event(), threading.Event()
    real_committed = Lease.committed

    def committed(lease: Lease, group: str, keys, timeout_s: float):
        if group not in frozen_groups:
            return real_committed(lease, group, keys, timeout_s)
        frozen_asked.set()
        try:
            return frozen_reader.committed(group, keys, timeout_s)
        finally:
            frozen_answered.set()  # answered or failed (the frozen child killed at the read's deadline)

    monkeypatch.setattr(Lease, "committed", committed)
    healthy = {lane["name"] for lane in healthy_lanes}
    while_frozen: list[bool] = []

    def all_healthy_fired(events) -> bool:
        if not while_frozen and healthy <= {n for _, e in events for n in e["due"]}:
            while_frozen.append(frozen_asked.is_set() and not frozen_answered.is_set())
        return bool(while_frozen)

    os.kill(frozen_pid, signal.SIGSTOP)
    try:
        events = _OnTwoCores(_trigger(kafka_conn, lanes)).for_seconds(WAIT_S, done=all_healthy_fired)
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed at its read's deadline
            os.kill(frozen_pid, signal.SIGCONT)
        frozen_reader.close()
    fired = {n for _, e in events for n in e["due"]}
    assert healthy <= fired, f"healthy lanes that never fired: {sorted(healthy - fired)}"
    assert while_frozen == [True], "the healthy lanes fired only once the frozen reads had failed"
    assert not fired & {lane["name"] for lane in frozen_lanes}, events  # they never read their offsets


def test_a_lane_whose_call_is_abandoned_backs_off_without_calling_again_until_it_returns(
    kafka_bootstrap, kafka_conn, new_topic, monkeypatch
):
    """A call past its deadline (2 s here) is abandoned: its lane backs off and asks its broker nothing more
    (one abandoned call, one read in flight) until the call returns (the frozen read fails 15 + 5 s after
    it started); then the lane opens again and fires. The other lane fires meanwhile."""
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__SHARED_WATCH_CONSUMERS", "True")
    monkeypatch.setattr(broker_calls, "CALL_DEADLINE_S", 2.0)
    stuck, other = (
        _tier("retry_1", new_topic("abandon-stuck"), 1),
        _tier("retry_2", new_topic("abandon-ok"), 2),
    )
    for lane in (stuck, other):
        produce(kafka_bootstrap, lane["topics"][0], [(0, _now())])
    frozen_reader = OffsetReader({"bootstrap.servers": kafka_bootstrap})
    frozen_reader.committed(stuck["group"], [(stuck["topics"][0], 0)], 30.0)
    frozen_pid = frozen_reader.pid
    assert frozen_pid is not None
    reads: list[str] = []  # "asked" / "ended" of the stuck lane's reads, in order
    real_committed = Lease.committed

    def committed(lease: Lease, group: str, keys, timeout_s: float):
        if group != stuck["group"]:
            return real_committed(lease, group, keys, timeout_s)
        reads.append("asked")
        try:
            return frozen_reader.committed(group, keys, timeout_s)
        finally:
            reads.append("ended")

    monkeypatch.setattr(Lease, "committed", committed)
    abandoned_seen: set[int] = set()

    def both_fired(events) -> bool:
        abandoned_seen.add(broker_calls.abandoned_calls())
        return {"retry_1", "retry_2"} <= {n for _, e in events for n in e["due"]}

    os.kill(frozen_pid, signal.SIGSTOP)
    try:
        events = _Running(_trigger(kafka_conn, [stuck, other])).for_seconds(2 * WAIT_S, done=both_fired)
    finally:
        with contextlib.suppress(ProcessLookupError):  # killed at its read's deadline
            os.kill(frozen_pid, signal.SIGCONT)
        frozen_reader.close()
    assert [e["due"] for _, e in events] == [["retry_2"], ["retry_1"]], events
    assert abandoned_seen == {0, 1}, abandoned_seen  # abandoned once, never more, and returned
    # the frozen read was the only one until it ended (the lane backed off meanwhile); then it read again
    assert reads[:3] == ["asked", "ended", "asked"], reads
