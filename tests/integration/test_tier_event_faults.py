"""A triggerer crash at each step of the fire path, or a lost run, delays due records by at most 60 s.

Issue 29, item 1. The event trigger (real broker, the asset state store as the triggerer injects it,
default ``refire_after``) is crashed through its fault hook before the wave is saved, after it is
saved, or after the event was yielded (the event is lost with the triggerer), then started again
with the same store; or its event is lost with the run (no commit). Each event the restarted trigger
fires is answered by a real tier run (the local engine, which commits past the wave). Every record
is handled exactly once, and within 60 s of the later of the restart (or the lost run) and the
records' due time (here a run starts at once; Airflow's start-up is within the 15 s the default
``refire_after`` of 45 s leaves).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.triggers.tier_events import TierDueEventTrigger

from tests.integration.test_tier_event_trigger import _Store
from tests.support import ledger

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RECORDS = 5
BOUND_MS = 60_000
#: the default poll_interval and commit_check (what a deployment runs; three of the four cases wait out the
#: default refire_after, and a faster loop only costs CPU meanwhile), a quick idle check and retry
CHECK = {"poll_interval": 0.5, "commit_check": 1.0, "idle_check": 0.5, "retry_after": 0.5}
WATCH_S = 90.0


class _Crash(Exception):
    """The triggerer process dies here."""


def _now() -> int:
    return time.time_ns() // 1_000_000


def _produce_due(bootstrap: str, topic: str, due_ms: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(RECORDS):
        headers = [(H.ATTEMPTS, H.encode_int32(2)), (H.BACKOFF_TIMESTAMP, H.encode_big_integer(due_ms))]
        value = json.dumps({"id": f"r{i}", "mode": "ok"}).encode()
        producer.produce(topic, value=value, key=f"r{i}".encode(), partition=0, headers=headers)
    assert producer.flush(30) == 0


async def _drive(trigger, on_event, *, seconds: float) -> tuple[list[int], BaseException | None]:
    """Run ``trigger`` until ``on_event(payload)`` returns True, it crashes, or ``seconds`` pass.

    A trigger that is done with is cancelled, as the triggerer does: its watch closes before this returns
    (a generator merely dropped would close it at some later point, or never, and its lease of the shared
    consumer would outlive the test).
    """
    fired: list[int] = []
    done = asyncio.Event()

    async def loop() -> None:
        async for event in trigger.run():
            fired.append(_now())
            if await asyncio.to_thread(on_event, event.payload):
                done.set()

    task, answered = asyncio.create_task(loop()), asyncio.create_task(done.wait())
    await asyncio.wait([task, answered], timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    answered.cancel()
    if task.done():
        exc = task.exception()
        if isinstance(exc, _Crash):
            return fired, exc
        if exc is not None:
            raise exc
        return fired, None
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return fired, None


@pytest.mark.parametrize("fault", ["before_save", "after_save", "after_yield", "lost_run"])
def test_lateness_after_a_crash_or_a_lost_run_stays_within_restart_plus_60s(
    kafka_bootstrap, tmp_path, monkeypatch, fault
):
    ledger_file = ledger.ledger_path(tmp_path)
    monkeypatch.setenv("AKR_LEDGER", ledger_file)
    monkeypatch.setenv(
        "AIRFLOW_CONN_AKR_FAULT_TEST",
        json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}),
    )
    topology = ledger.make_topology("wave")
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, config, partitions=1)
    tier = topology.tier(1)
    due = _now() + 2_000
    _produce_due(kafka_bootstrap, tier.topic, due)
    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed", value_deserializer=f"{ledger.HANDLER_MODULE}:decode"
    )
    store = _Store()

    def trigger() -> TierDueEventTrigger:
        made = TierDueEventTrigger(
            topic=tier.topic,
            consumer_group=topology.consumer_group(tier),
            kafka_conn_id="akr_fault_test",
            **CHECK,
        )
        made.asset_state_store = store
        return made

    handled: list[int] = []  # when each tier run had handled what it drained

    def tier_run(payload) -> bool:  # what the scheduler and a tier run do with an event
        summary = run_local(topology, tier, config, options)
        assert summary.ok
        handled.append(_now())
        return sum(ledger.processed_ids(ledger_file).values()) >= RECORDS

    if fault == "lost_run":
        # one triggerer throughout; the run of its first event is lost (it never commits)
        events: list[dict] = []

        def lose_the_first(payload) -> bool:
            events.append(payload)
            return len(events) > 1 and tier_run(payload)

        fired, crashed = asyncio.run(_drive(trigger(), lose_the_first, seconds=2 * WATCH_S))
        assert crashed is None, crashed
        assert fired, fired
        lost, again = fired[0], fired[1:]
        assert again, f"no event within {2 * WATCH_S:.0f}s of the lost run: the due records stall"
        late = handled[-1] - max(lost, due)
    else:

        def crash(step: str) -> None:
            if step == fault:
                raise _Crash(step)

        first = trigger()
        first.fault_hook = crash
        # the first triggerer crashes at the step; an event it yielded is lost with it
        fired, crashed = asyncio.run(_drive(first, lambda payload: False, seconds=WATCH_S))
        assert isinstance(crashed, _Crash), f"the fault hook did not crash the trigger at {fault}"
        assert len(fired) == (1 if fault == "after_yield" else 0)
        restart = _now()
        fired, crashed = asyncio.run(_drive(trigger(), tier_run, seconds=WATCH_S))
        assert crashed is None
        assert fired, f"{fault}: no event within {WATCH_S:.0f}s of the restart: the due records stall"
        late = handled[-1] - max(restart, due)
    assert late <= BOUND_MS, f"{fault}: the records were handled {late} ms after the restart (or due time)"
    handled = ledger.processed_ids(ledger_file)
    assert handled == {f"r{i}": 1 for i in range(RECORDS)}, handled
