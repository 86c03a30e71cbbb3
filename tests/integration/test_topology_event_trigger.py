"""The topology watcher (one trigger for every tier and the DLTs of a topology) against the real broker.

Run as the triggerer runs a watcher (``_Running`` from the tier trigger's tests): ``run()`` as a task,
its events collected for a while, then cancelled. Each lane is a tier (its own group) or the DLTs (the
watch group); each keeps its own wave in the asset state store.
"""

from __future__ import annotations

import json
import time
from collections.abc import Hashable, Mapping
from typing import Any, cast
from unittest import mock

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kafka_retry.engine.heads import head_watch, shared_consumer
from airflow_kafka_retry.policy.timing.waves import Wave
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic
from airflow_kafka_retry.triggers import watching
from airflow_kafka_retry.triggers.check_pace import IDLE_SPREAD
from airflow_kafka_retry.triggers.tier_events import STATE_KEY
from airflow_kafka_retry.triggers.topology_events import TopologyDueEventTrigger

from tests.integration.test_tier_event_trigger import FAST, WAIT_S, _Running, _Store
from tests.support.tier_records import commit, produce

pytestmark = pytest.mark.integration

SETUP = "ensure_topics"
HOUR_MS = 3_600_000


def _now() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture(autouse=True, params=["shared", "own"])
def mode(request, monkeypatch) -> str:
    """``[kafka_retry] shared_watch_consumers`` on (the default: the triggerer's one consumer) and off."""
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__SHARED_WATCH_CONSUMERS", str(request.param == "shared"))
    assert watching._shared_watch_consumers() is (request.param == "shared")
    return str(request.param)


def _tier(name: str, topic: str, index: int) -> dict:
    return {"name": name, "topics": [topic], "group": unique_topic(f"g-{name}"), "tier_index": index}


def _dlt(topic: str) -> dict:
    return {"name": "watch_dlt", "topics": [topic], "group": unique_topic("g-watch"), "read_due": False}


def _trigger(
    kafka_conn: str, lanes: list[dict], store: _Store | None = None, **timing
) -> TopologyDueEventTrigger:
    made = TopologyDueEventTrigger(
        topology_topic="orders", lanes=lanes, kafka_conn_id=kafka_conn, setup_task=SETUP, **{**FAST, **timing}
    )
    # what the triggerer injects (_Store has the same async accessors)
    made.asset_state_store = cast("Any", store if store is not None else _Store())
    return made


def _fired(events: list[tuple[int, dict]], lane: str) -> list[tuple[int, dict]]:
    """``(collected at, the lane's part of the event)`` of each event naming ``lane``."""
    return [(at, e["lanes"][lane]) for at, e in events if lane in e["due"]]


def _brief(events: list[tuple[int, dict]]) -> str:
    """The events in short for an assertion's message (a string: pytest shortens other objects)."""
    return "; ".join(
        f"at {at}: {e['due']} " + ", ".join(f"{n} {_heads(p)}" for n, p in e["lanes"].items())
        for at, e in events
    )


def _heads(part: Mapping) -> list[tuple[str, int, int]]:
    return [(h["topic"], h["partition"], h["offset"]) for h in part["heads"]]


def _saved(store: _Store, lane: str) -> Wave | None:
    return Wave.from_state(store.state.get(f"{STATE_KEY}:{lane}"))


def _commit_timed(bootstrap: str, group: str, topic: str, offsets: Mapping[int, int]) -> tuple[int, int]:
    """Commit as a consumer of ``group`` does; returns when the commit was sent and when it was answered.

    The group's coordinator is found first, so the commit itself is one request: the trigger cannot see
    the new offsets before the first time, nor (by more than its commit check) after the second.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(topic, p, o) for p, o in offsets.items()]
        consumer.committed([TopicPartition(topic, p) for p in offsets], timeout=30)
        sent = _now()
        consumer.commit(offsets=tps, asynchronous=False)
        return sent, _now()
    finally:
        consumer.close()


def _check_event(payload: dict, lanes: list[dict]) -> None:
    """What every event of the trigger looks like: the lanes it names, their parts, no record payload."""
    assert payload["kind"] == "topology_due"
    # one time for the event and its lanes' waves (the first task compares it with the saved waves)
    assert {part["fired_ms"] for part in payload["lanes"].values()} <= {payload["fired_ms"]}, payload
    assert payload["topology"] == "orders"
    assert [n for n in payload["due"] if n != SETUP] == list(payload["lanes"]), payload
    by_name = {lane["name"]: lane for lane in lanes}
    for name, part in payload["lanes"].items():
        assert part["topics"] == by_name[name]["topics"], payload
        assert part["group"] == by_name[name]["group"], payload
        assert part["partitions"] == [f"{t}[{p}]" for t, p, _ in _heads(part)], payload
    assert "secret-payload" not in json.dumps(payload)  # tier_records.produce's values


def test_an_event_names_only_the_due_lanes_with_their_heads(kafka_bootstrap, kafka_conn, new_topic):
    tier_a, tier_b, dlt = new_topic("topo-a", partitions=2), new_topic("topo-b"), new_topic("topo-dlt")
    lanes = [_tier("retry_1", tier_a, 1), _tier("retry_2", tier_b, 2), _dlt(dlt)]
    due = _now() + 5_000  # time for the trigger to start and learn the heads first
    produce(kafka_bootstrap, tier_a, [(0, _now() + HOUR_MS), (1, due), (1, due + 500)])
    produce(kafka_bootstrap, tier_b, [(0, _now() + HOUR_MS)])
    trigger = _trigger(kafka_conn, lanes, fire_ahead=1.0)
    dead: list[int] = []

    def dead_letter(_events) -> None:  # a due header means nothing in a DLT: due when it arrives
        dead.append(_now())
        produce(kafka_bootstrap, dlt, [(0, _now() + HOUR_MS)])

    events = _Running(trigger).for_seconds(
        WAIT_S, until=lambda ev: len(ev) == 1, then=dead_letter, done=lambda ev: len(ev) >= 2
    )
    assert [e["due"] for _, e in events] == [["retry_1"], ["watch_dlt"]], _brief(events)
    for _, payload in events:
        _check_event(payload, lanes)
    (first_at, first), (second_at, second) = events
    tier = first["lanes"]["retry_1"]
    assert _heads(tier) == [(tier_a, 1, 0)]  # partition 0's head is due in an hour
    assert tier["not_before_ms"] == due  # fired fire_ahead early, the run waits until then
    assert tier["earliest_due_ms"] == due
    assert due - 1_000 - 300 <= first_at < due, first_at - due
    watch = second["lanes"]["watch_dlt"]
    assert _heads(watch) == [(dlt, 0, 0)]
    assert watch["earliest_due_ms"] is None  # a DLT lane does not read due times
    assert dead[0] <= watch["fired_ms"] == watch["not_before_ms"] <= second_at
    assert _saved(trigger.asset_state_store, "retry_1").positions == ((tier_a, 1, 0),)  # not taken yet
    assert _saved(trigger.asset_state_store, "watch_dlt").positions == ((dlt, 0, 0),)
    assert _saved(trigger.asset_state_store, "retry_2") is None


def test_the_lanes_read_through_the_shared_consumer_or_one_of_their_own(
    kafka_bootstrap, kafka_conn, new_topic, monkeypatch, mode
):
    tier_a, tier_b, dlt = (
        new_topic("topo-one-a", partitions=2),
        new_topic("topo-one-b"),
        new_topic("topo-one-d"),
    )
    lanes = [_tier("retry_1", tier_a, 1), _tier("retry_2", tier_b, 2), _dlt(dlt)]
    produce(kafka_bootstrap, tier_a, [(0, _now() - 1_000), (1, _now() + HOUR_MS)])
    produce(kafka_bootstrap, tier_b, [(0, _now() - 1_000)])
    produce(kafka_bootstrap, dlt, [(0, None)])
    made: list[
        tuple[str, Hashable]
    ] = []  # every consumer a watch of the trigger made: shared ones and private ones

    class Shared(shared_consumer.SharedConsumer):
        def __init__(self, key, kafka_config) -> None:
            made.append(("shared", key))
            super().__init__(key, kafka_config)

    class Private(head_watch.PrivateConsumer):
        def __init__(self, kafka_config, group) -> None:
            made.append(("private", group))
            super().__init__(kafka_config, group)

    monkeypatch.setattr(shared_consumer, "SharedConsumer", Shared)
    monkeypatch.setattr(head_watch, "PrivateConsumer", Private)
    trigger = _trigger(kafka_conn, lanes)
    shared_then: list[dict[Hashable, dict]] = []  # while it ran: each shared consumer's partition owners

    def look(_events) -> None:
        shared_then.append({s.key: dict(s.owners) for s in shared_consumer.shared_consumers()})

    events = _Running(trigger).for_seconds(
        WAIT_S,
        until=lambda ev: {"retry_1", "retry_2", "watch_dlt"} <= {n for _, e in ev for n in e["due"]},
        then=look,
        done=lambda ev: bool(shared_then),
        quiet=0.5,
    )
    assert {n for _, e in events for n in e["due"]} == {"retry_1", "retry_2", "watch_dlt"}, _brief(events)
    if mode == "shared":  # every lane leases the triggerer's one consumer, each its own partitions
        assert [kind for kind, _ in made] == ["shared"], made
        owners = shared_then[0][made[0][1]]
        assert set(owners) == {(tier_a, 0), (tier_a, 1), (tier_b, 0), (dlt, 0)}
        assert len(set(owners.values())) == 3  # a lease per lane
        return
    # a consumer of its own per lane, which reads its group's committed offsets with committed()
    assert sorted(kind for kind, _ in made) == ["private"] * 3, made
    assert {group for _, group in made} == {lane["group"] for lane in lanes}
    assert shared_then == [{}], shared_then  # no shared consumer while it ran


def test_a_lane_fires_its_next_wave_only_after_its_group_committed_and_busy_hold(
    kafka_bootstrap, kafka_conn, new_topic
):
    tier_a, tier_b = new_topic("topo-wave-a"), new_topic("topo-wave-b")
    lanes = [_tier("retry_1", tier_a, 1), _tier("retry_2", tier_b, 2)]
    past = _now() - 1_000
    produce(kafka_bootstrap, tier_a, [(0, past), (0, past)])
    produce(kafka_bootstrap, tier_b, [(0, past)])
    trigger = _trigger(kafka_conn, lanes, busy_hold=1.0)
    commits: list[tuple[int, int]] = []

    def run_takes_a(_events) -> None:
        time.sleep(0.5)
        # retry_1's run drained offset 0 and commits past it; retry_2's run has not committed
        commits.append(_commit_timed(kafka_bootstrap, lanes[0]["group"], tier_a, {0: 1}))
        produce(kafka_bootstrap, tier_b, [(0, _now() - 1_000)])  # due, behind retry_2's unanswered wave

    events = _Running(trigger).for_seconds(
        WAIT_S,
        until=lambda ev: {"retry_1", "retry_2"} <= {n for _, e in ev for n in e["due"]},
        then=run_takes_a,
        done=lambda ev: len(_fired(ev, "retry_1")) >= 2,
        quiet=1.5,
    )
    for _, payload in events:
        _check_event(payload, lanes)
    fired_a, fired_b = _fired(events, "retry_1"), _fired(events, "retry_2")
    assert [_heads(p) for _, p in fired_a] == [[(tier_a, 0, 0)], [(tier_a, 0, 1)]], _brief(events)
    assert [_heads(p) for _, p in fired_b] == [[(tier_b, 0, 0)]], _brief(
        events
    )  # its wave still waits for its run
    [(sent, answered)] = commits
    again = fired_a[1][1]["fired_ms"]
    # the trigger saw the commit at `sent` at the earliest; its run drains on for busy_hold from then
    assert again >= sent + 1_000, (again - sent, answered - sent)
    store = trigger.asset_state_store
    assert _saved(store, "retry_1").positions == ((tier_a, 0, 1),)
    assert _saved(store, "retry_2").positions == ((tier_b, 0, 0),)


def test_missing_topics_fire_the_setup_task_once_while_the_other_lanes_work(
    kafka_bootstrap, kafka_conn, new_topic, request, capsys
):
    tier_a, missing = new_topic("topo-there"), unique_topic("topo-missing")
    request.addfinalizer(lambda: delete_topics(kafka_bootstrap, [missing]))
    lanes = [_tier("retry_1", tier_a, 1), _tier("retry_2", missing, 2)]
    produce(kafka_bootstrap, tier_a, [(0, _now() + 2_000)])  # due once the setup event is out
    trigger = _trigger(kafka_conn, lanes)
    created: list[int] = []

    def setup_task(_events) -> None:  # what the setup task does, a while after its event
        time.sleep(2.5)
        create_topics(kafka_bootstrap, [missing], 1)
        produce(kafka_bootstrap, missing, [(0, None)])
        created.append(_now())

    events = _Running(trigger).for_seconds(
        WAIT_S,
        until=lambda ev: len(ev) >= 1,
        then=setup_task,
        done=lambda ev: bool(_fired(ev, "retry_2")),
        quiet=1.5,
    )
    for _, payload in events:
        _check_event(payload, lanes)
    assert [e["due"] for _, e in events if SETUP in e["due"]] == [[SETUP]], _brief(events)  # once, on its own
    at, first = events[0]
    assert first == {
        "kind": "topology_due",
        "topology": "orders",
        "due": [SETUP],
        "lanes": {},
        "fired_ms": mock.ANY,
    }
    assert first["fired_ms"] <= at
    assert [_heads(p) for _, p in _fired(events, "retry_1")] == [[(tier_a, 0, 0)]], _brief(events)
    assert [_heads(p) for _, p in _fired(events, "retry_2")] == [[(missing, 0, 0)]], _brief(events)
    assert _fired(events, "retry_1")[0][0] < created[0]  # the existing lane did not wait for the setup
    out = capsys.readouterr().out
    assert out.count(f"topic(s) {missing} do not exist") >= 2, out  # looked for again, no second setup event


REFIRE_S = 6.0


class _Crash(Exception):
    """The triggerer process dies here."""


def test_a_restarted_trigger_refires_a_saved_wave_only_after_refire_after(
    kafka_bootstrap, kafka_conn, new_topic
):
    tier_a, tier_b = new_topic("topo-restart-a"), new_topic("topo-restart-b")
    lanes = [_tier("retry_1", tier_a, 1), _tier("retry_2", tier_b, 2)]
    produce(kafka_bootstrap, tier_a, [(0, _now() - 1_000)])
    store = _Store()
    first = _trigger(kafka_conn, lanes, store, refire_after=REFIRE_S)

    def crash(step: str) -> None:
        if step == "after_save":
            raise _Crash(step)

    first.fault_hook = crash
    lost = _Running(first)
    with pytest.raises(_Crash):  # the wave is saved, the triggerer dies before the event is out
        lost.for_seconds(WAIT_S)
    assert lost.events == []
    wave = _saved(store, "retry_1")
    assert wave is not None
    assert wave.positions == ((tier_a, 0, 0),)
    refire_at = wave.expires_ms(int(REFIRE_S * 1000))
    produce(kafka_bootstrap, tier_b, [(0, _now() - 1_000)])  # the other lane has a wave of its own to fire

    restarted = TopologyDueEventTrigger(**first.serialize()[1])  # the triggerer starts the watcher again
    restarted.asset_state_store = store
    started = _now()
    assert started < refire_at - 2_000, (
        f"restarted {refire_at - started} ms before the refire: too late to check"
    )
    events = _Running(restarted).for_seconds(
        WAIT_S,
        until=lambda ev: bool(_fired(ev, "retry_2")),
        # retry_2's run takes its wave (else it fires again refire_after later, maybe within the watch)
        then=lambda _ev: commit(kafka_bootstrap, lanes[1]["group"], tier_b, {0: 1}),
        done=lambda ev: bool(_fired(ev, "retry_1")),
    )
    for _, payload in events:
        _check_event(payload, lanes)
    assert [_heads(p) for _, p in _fired(events, "retry_2")] == [[(tier_b, 0, 0)]], _brief(events)
    [(again_at, again)] = _fired(events, "retry_1")  # once, and not before refire_after
    assert _heads(again) == [(tier_a, 0, 0)]
    assert again["fired_ms"] >= refire_at, again["fired_ms"] - refire_at
    assert again_at < refire_at + 3_000, again_at - refire_at  # and soon after
    other_at = _fired(events, "retry_2")[0][0]
    assert other_at < refire_at, (other_at - started, refire_at - started)  # the wave held only its own lane
    assert _saved(store, "retry_1").fired_ms == again["fired_ms"]


@pytest.mark.parametrize("after_s", [0.0, 0.05, 0.2])
def test_a_trigger_cancelled_while_its_watches_open_leaves_no_consumer(
    kafka_bootstrap, kafka_conn, after_s, monkeypatch
):
    """The triggerer cancels a watcher when its DAG changes: a watch still opening in its thread is closed."""
    import asyncio

    made: list[head_watch.PrivateConsumer | shared_consumer.Lease] = []
    closed: list[head_watch.PrivateConsumer | shared_consumer.Lease] = []

    class Private(head_watch.PrivateConsumer):
        def __init__(self, kafka_config, group) -> None:
            super().__init__(kafka_config, group)
            made.append(self)

        def close(self) -> None:
            closed.append(self)
            super().close()

    class Lease(shared_consumer.Lease):
        def __init__(self, sharing, ident) -> None:
            super().__init__(sharing, ident)
            made.append(self)

        def close(self) -> None:
            closed.append(self)
            super().close()

    monkeypatch.setattr(head_watch, "PrivateConsumer", Private)
    monkeypatch.setattr(shared_consumer, "Lease", Lease)

    topics = [unique_topic("cancel") for _ in range(3)]
    create_topics(kafka_bootstrap, topics, 1)
    try:
        lanes = [{"name": f"l{i}", "topics": [t], "group": unique_topic("g")} for i, t in enumerate(topics)]
        trigger = TopologyDueEventTrigger(
            topology_topic="o", lanes=lanes, kafka_conn_id=kafka_conn, poll_interval=0.1
        )

        async def cancelled() -> None:
            async def watch() -> None:
                async for _ in trigger.run():
                    pass

            task = asyncio.create_task(watch())
            await asyncio.sleep(after_s)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancelled())
        # a watch's opening goes on in its own thread (broker_calls.py) and closes what it opened at its end
        deadline = time.monotonic() + WAIT_S
        while (left := [c for c in made if c not in closed]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left == [], f"{len(left)} of {len(made)} consumer(s) of the cancelled trigger left open"
    finally:
        delete_topics(kafka_bootstrap, topics)


def test_a_lane_backed_off_while_idle_fires_a_new_record_on_time(
    kafka_bootstrap, kafka_conn, new_topic, monkeypatch
):
    """An idle lane's checks back off; a record then written is seen by the fetch and fires when due."""
    tier = new_topic("topo-idle")
    checks: list[int] = []
    sync = head_watch.HeadWatch.sync_committed

    def counted(self):
        checks.append(_now())
        return sync(self)

    monkeypatch.setattr(head_watch.HeadWatch, "sync_committed", counted)
    trigger = _trigger(kafka_conn, [_tier("retry_1", tier, 1)], idle_check=0.1, idle_check_max=30.0)
    written: list[int] = []

    def write(_events) -> None:
        written.append(_now() + 1_000)
        produce(kafka_bootstrap, tier, [(0, written[0])])

    events = _Running(trigger).for_seconds(
        WAIT_S, until=lambda _: len(checks) >= 7, then=write, done=lambda ev: len(ev) >= 1, quiet=0.5
    )
    gaps = [b - a for a, b in zip(checks[:6], checks[1:6], strict=False)]
    # 0.1, 0.2, 0.4, 0.8, 1.6 s, each cut by up to IDLE_SPREAD at random
    assert all(gap >= (1 - IDLE_SPREAD) * 100 * 2**i - 20 for i, gap in enumerate(gaps)), gaps
    [(_, payload)] = events
    fired, due = payload["lanes"]["retry_1"]["fired_ms"], written[0]
    # the lane's next idle check was at least 6.4 s (less the spread) after the seventh and the record fell
    # due 1 s after it was written: it fired before that check, so the fetch that saw the record woke the lane
    assert due <= fired < checks[6] + (1 - IDLE_SPREAD) * 6_400, (fired - due, fired - checks[6])
