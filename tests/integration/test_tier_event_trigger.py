"""The event triggers of event-driven tiers against the real broker (run as the triggerer runs a watcher).

A watcher trigger never ends: each test runs ``run()`` as a task, collects its events for a while,
then cancels it, as the triggerer does when a DAG stops using the watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import pytest

from airflow_kafka_retry.policy.timing.waves import Wave
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic
from airflow_kafka_retry.triggers.tier_events import STATE_KEY, DltArrivalEventTrigger, TierDueEventTrigger

from tests.support.tier_records import commit, produce

pytestmark = pytest.mark.integration

FAST = {"poll_interval": 0.1, "commit_check": 0.2, "idle_check": 0.5, "retry_after": 0.5}


def _now() -> int:
    return time.time_ns() // 1_000_000


class _Store:
    """The asset state store the triggerer injects into a watcher (same async accessors)."""

    def __init__(self, state: dict | None = None) -> None:
        self.state = dict(state or {})

    async def aget(self, key, default=None):
        return self.state.get(key, default)

    async def aset(self, key, value):
        self.state[key] = json.loads(json.dumps(value))  # what the API stores: JSON

    async def adelete(self, key):
        self.state.pop(key, None)


QUIET_S = 1.0  # how long a watch goes on once the expected events arrived
#: the longest wait for expected events: a watch ends QUIET_S after they arrive, so a long bound costs a
#: healthy run nothing and a loaded machine (a 3-s bound failed in a CI run) no flaky failure
WAIT_S = 30.0


class _Running:
    """A trigger's ``run()`` as a background task in its own event loop thread, events collected with
    times."""

    def __init__(self, trigger) -> None:
        self.trigger = trigger
        self.events: list[tuple[int, dict]] = []

    async def _collect(self) -> None:
        async for event in self.trigger.run():
            self.events.append((_now(), event.payload))

    def for_seconds(
        self, seconds: float, *, until=None, then=None, done=None, quiet: float = QUIET_S
    ) -> list[tuple[int, dict]]:
        """Run the trigger ``seconds`` (``then(events)`` is called in a thread when ``until(events)`` holds).

        The time ``then`` takes is added to the deadline, so the trigger is watched as long after the action
        as before it, however slow the machine is. With ``done``, the watch ends ``quiet`` seconds after
        ``done(events)`` first holds (the expected events arrived; a stray one in the quiet period is still
        seen); without it (a test that checks nothing fires) it lasts the whole ``seconds``.
        """

        async def main():
            task = asyncio.create_task(self._collect())
            deadline = time.monotonic() + seconds
            acted = settled = False
            while time.monotonic() < deadline and not task.done():
                if not settled and done is not None and (until is None or acted) and done(self.events):
                    settled = True
                    deadline = min(deadline, time.monotonic() + quiet)
                if not acted and until is not None and until(self.events):
                    acted = True
                    if then is not None:
                        started = time.monotonic()
                        await asyncio.to_thread(then, list(self.events))
                        deadline += (
                            time.monotonic() - started
                        )  # a loaded machine's slow action is not watch time
                await asyncio.sleep(0.05)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if task.done() and not task.cancelled() and task.exception():
                raise task.exception()

        asyncio.run(main())
        return self.events


def test_fires_once_ahead_of_the_due_time_and_again_only_after_the_group_commits(
    kafka_bootstrap, kafka_conn, new_topic
):
    topic = new_topic("evt-due", partitions=2)
    group = unique_topic("g")
    due = _now() + 3_000
    produce(kafka_bootstrap, topic, [(0, due), (0, due + 1_000), (1, _now() + 3_600_000)])
    trigger = TierDueEventTrigger(
        topic=topic, consumer_group=group, kafka_conn_id=kafka_conn, fire_ahead=1.0, **FAST
    )
    rebuilt = TierDueEventTrigger(**trigger.serialize()[1])
    assert rebuilt.serialize() == trigger.serialize()
    assert "bootstrap" not in json.dumps(trigger.serialize())  # the connection id travels, not the config
    store = _Store()
    rebuilt.asset_state_store = store

    # the run that takes the first wave commits past partition 0's head (offset 0) once it fired
    events = _Running(rebuilt).for_seconds(
        9,
        until=lambda ev: len(ev) == 1,
        then=lambda ev: (time.sleep(1), commit(kafka_bootstrap, group, topic, {0: 1})),
    )
    assert len(events) == 2, events
    (first_at, first), (second_at, second) = events
    assert due - 1_000 - 300 <= first_at < due, first_at - due  # fired about fire_ahead before the due time
    assert first["kind"] == "tier_due"
    assert first["not_before_ms"] == due
    assert first["earliest_due_ms"] == due
    assert first["heads"] == [{"topic": topic, "partition": 0, "offset": 0}]
    assert "secret-payload" not in json.dumps(first)
    # the second wave (offset 1, due a second later) only after the commit, never for the same head again
    assert second["heads"] == [{"topic": topic, "partition": 0, "offset": 1}]
    # its due time, or (when a loaded machine saw the commit only after that) the time it was planned
    assert due + 1_000 <= second["not_before_ms"] <= max(due + 1_000, second_at), second_at - due
    # the fired wave is in the asset state store until the group commits past it
    assert Wave.from_state(store.state[STATE_KEY]).positions == ((topic, 0, 1),)


def test_a_restarted_trigger_does_not_fire_a_wave_it_already_fired(kafka_bootstrap, kafka_conn, new_topic):
    topic = new_topic("evt-restart", partitions=1)
    group = unique_topic("g")
    produce(kafka_bootstrap, topic, [(0, _now() - 1_000)])
    store = _Store()
    first = TierDueEventTrigger(topic=topic, consumer_group=group, kafka_conn_id=kafka_conn, **FAST)
    first.asset_state_store = store
    assert len(_Running(first).for_seconds(WAIT_S, done=lambda ev: len(ev) == 1)) == 1
    # the triggerer dies and starts the watcher again: same kwargs, the same asset state store
    again = TierDueEventTrigger(**first.serialize()[1])
    again.asset_state_store = store
    assert _Running(again).for_seconds(3) == []
    # the run commits past the wave: the state is cleared and the next record fires
    commit(kafka_bootstrap, group, topic, {0: 1})
    produce(kafka_bootstrap, topic, [(0, _now() - 1_000)])
    third = TierDueEventTrigger(**first.serialize()[1])
    third.asset_state_store = store
    [(_, event)] = _Running(third).for_seconds(WAIT_S, done=lambda ev: len(ev) == 1)
    assert event["heads"] == [{"topic": topic, "partition": 0, "offset": 1}]


def test_an_unanswered_wave_fires_again_after_refire_after(kafka_bootstrap, kafka_conn, new_topic):
    topic = new_topic("evt-refire", partitions=1)
    produce(kafka_bootstrap, topic, [(0, _now() - 1_000)])
    trigger = TierDueEventTrigger(
        topic=topic, consumer_group=unique_topic("g"), kafka_conn_id=kafka_conn, refire_after=2.0, **FAST
    )
    events = _Running(trigger).for_seconds(5, done=lambda ev: len(ev) >= 2, quiet=0)
    assert len(events) >= 2, events
    assert all(e["heads"] == [{"topic": topic, "partition": 0, "offset": 0}] for _, e in events)
    assert all(later - earlier >= 2_000 for (earlier, _), (later, _) in zip(events, events[1:]))


def test_an_idle_tier_fires_nothing_and_a_new_record_wakes_it(kafka_bootstrap, kafka_conn, new_topic):
    topic = new_topic("evt-idle", partitions=2)
    trigger = TierDueEventTrigger(
        topic=topic, consumer_group=unique_topic("g"), kafka_conn_id=kafka_conn, **FAST
    )
    produced: list[int] = []

    def produce_later(_events):
        time.sleep(2)
        produced.append(_now())
        produce(kafka_bootstrap, topic, [(1, None)])  # no due header (a main-topic record): due at once

    events = _Running(trigger).for_seconds(
        WAIT_S, until=lambda ev: True, then=produce_later, done=lambda ev: len(ev) == 1
    )
    assert len(events) == 1, events
    fired_at, payload = events[0]
    assert fired_at >= produced[0]
    assert payload["heads"] == [{"topic": topic, "partition": 1, "offset": 0}]


def test_a_missing_topic_is_logged_and_watched_again(kafka_bootstrap, kafka_conn, capsys, request):
    topic = unique_topic("evt-missing")
    request.addfinalizer(lambda: delete_topics(kafka_bootstrap, [topic]))
    trigger = TierDueEventTrigger(
        topic=topic, consumer_group=unique_topic("g"), kafka_conn_id=kafka_conn, **FAST
    )

    def create_later(_events):
        time.sleep(1.5)
        create_topics(kafka_bootstrap, [topic], 1)
        produce(kafka_bootstrap, topic, [(0, None)])

    events = _Running(trigger).for_seconds(
        WAIT_S, until=lambda ev: True, then=create_later, done=lambda ev: len(ev) == 1
    )
    assert f"topic(s) {topic} do not exist" in capsys.readouterr().out
    assert [e["heads"] for _, e in events] == [[{"topic": topic, "partition": 0, "offset": 0}]]


def test_the_dlt_trigger_fires_for_any_new_dead_letter(kafka_bootstrap, kafka_conn, new_topic):
    dlt, dlt2 = new_topic("evt-dlt", partitions=1), new_topic("evt-dlt-x", partitions=1)
    group = unique_topic("watch")
    produce(kafka_bootstrap, dlt, [(0, None)])
    commit(kafka_bootstrap, group, dlt, {0: 1})  # already reported
    produce(kafka_bootstrap, dlt2, [(0, _now() + 3_600_000)])  # a due header means nothing in a DLT
    trigger = DltArrivalEventTrigger(
        topics=[dlt, dlt2], consumer_group=group, kafka_conn_id=kafka_conn, **FAST
    )
    [(_, payload)] = _Running(DltArrivalEventTrigger(**trigger.serialize()[1])).for_seconds(
        WAIT_S, done=lambda ev: len(ev) == 1
    )
    assert payload["kind"] == "dlt_arrival"
    assert payload["heads"] == [{"topic": dlt2, "partition": 0, "offset": 0}]


def test_sends_the_tiers_backlog_gauges_as_records_arrive_and_zeros_once_drained(
    kafka_bootstrap, kafka_conn, new_topic, monkeypatch
):
    """Event mode has no sensor: the watcher sends the backlog gauges. Records arriving behind a head the
    watch paused at still count (the log end is asked for), and a drained tier reports zeros again."""
    from airflow_kafka_retry.observability import metrics

    sent: list[tuple[int, dict[str, float]]] = []

    def capture(batch):
        batch = list(batch)
        sent.append((_now(), {m.name.rsplit(".", 1)[-1]: m.value for m in batch}))
        assert all(
            m.kind == "gauge" and dict(m.tags) == {"topology": "orders", "tier_topic": topic, "tier": "1"}
            for m in batch
        ), batch
        return len(batch)

    monkeypatch.setattr(metrics, "emit", capture)
    topic = new_topic("evt-gauges", partitions=1)
    group = unique_topic("g")
    due = _now() - 2_000
    produce(kafka_bootstrap, topic, [(0, due), (0, due), (0, due)])
    trigger = TierDueEventTrigger(
        topic=topic,
        consumer_group=group,
        kafka_conn_id=kafka_conn,
        topology_topic="orders",
        tier_index=1,
        gauge_interval=0.3,
        **FAST,
    )
    assert TierDueEventTrigger(**trigger.serialize()[1]).serialize() == trigger.serialize()
    marks: dict[str, int] = {}

    def later(_events):
        time.sleep(1)
        for _ in range(2):  # one batch each: an exact log end from ListOffsets on every broker
            produce(kafka_bootstrap, topic, [(0, due)])
        time.sleep(2)
        marks["drained"] = _now()
        commit(kafka_bootstrap, group, topic, {0: 5})

    _Running(trigger).for_seconds(
        8,
        until=lambda ev: len(ev) == 1,
        then=later,
        done=lambda _ev: any(at > marks["drained"] + 1_500 for at, _ in sent),
    )
    before = [g for at, g in sent if at < marks["drained"]]
    after = [g for at, g in sent if at > marks["drained"] + 1_500]
    assert before, sent
    assert before[0]["backlog"] == 3, sent
    assert before[0]["oldest_due_age_ms"] >= 2_000, sent
    assert before[-1]["backlog"] == 5, sent  # the two behind the paused head
    assert after, sent
    assert after[-1] == {"backlog": 0, "oldest_due_age_ms": 0}, sent
