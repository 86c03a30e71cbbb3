"""
What both kinds of event trigger share: timings, wave state, and the head watch.

They check their timings alike, keep their waves alike, and open a head watch, say what a fired wave
is and send gauges alike.

``tier_events.py`` (a watcher per tier) and ``topology_events.py`` (one watcher per topology) share
these. The Kafka client and the engine load here only when a trigger runs, never at a DAG file's parse.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.policy.timing.waves import Wave

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.heads.head_watch import HeadWatch
    from airflow_kafka_retry.policy.timing.waves import WavePlan
    from airflow_kafka_retry.triggers.broker_calls import BrokerCalls


def check_seconds(owner: str, values: Mapping[str, object]) -> None:
    """Each of ``values`` is a number of seconds >= 0; a ValueError names the trigger and the setting."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{owner}: {name} must be a number of seconds >= 0, got {value!r}")


class MemoryStore:
    """The asset state store's accessors over a dict: where the triggerer injects none (a plain run)."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.state.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.state[key] = value

    async def adelete(self, key: str) -> None:
        self.state.pop(key, None)


async def load_wave(store: Any, key: str) -> Wave | None:
    """The wave saved under ``key`` (None: none, or a foreign shape)."""
    return Wave.from_state(await store.aget(key))


async def save_wave(store: Any, key: str, wave: Wave | None) -> None:
    """Save ``wave`` under ``key``; None forgets it."""
    if wave is None:
        await store.adelete(key)
    else:
        await store.aset(key, wave.to_state())


def wave_payload(watch: HeadWatch, plan: WavePlan[tuple[str, int]], wave: Wave) -> dict[str, Any]:
    """What an event says of a fired wave: its topics, group, heads and times (never a record's payload)."""
    dues = [due for k in plan.keys if (due := watch.heads[k].due_ms) is not None]
    return {
        "topics": watch.topics,
        "group": watch.group,
        "partitions": [f"{t}[{p}]" for t, p, _ in wave.positions],
        "heads": [{"topic": t, "partition": p, "offset": o} for t, p, o in wave.positions],
        "earliest_due_ms": min(dues) if dues else None,
        "not_before_ms": wave.not_before_ms,
        "fired_ms": wave.fired_ms,
    }


async def open_watch(
    kafka_conn_id: str,
    topics: Sequence[str],
    group: str,
    *,
    calls: BrokerCalls,
    read_due: bool,
    due_horizon_ms: int,
    optional: Sequence[str] = (),
) -> HeadWatch:
    """
    A head watch of ``topics`` for ``group``, on the connection's cluster (its broker calls: ``calls``).

    It shares the triggerer's consumer with ``[kafka_retry] shared_watch_consumers`` on (the default);
    otherwise it has a consumer of its own.
    """
    from asgiref.sync import sync_to_async

    from airflow_kafka_retry.engine.heads.head_watch import HeadWatch
    from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook

    kafka_config = await sync_to_async(KafkaRetryHook(kafka_conn_id).kafka_config)()
    everyone = _shared_watch_consumers()
    # the trigger may be cancelled (its DAG changed, it moved to another triggerer), or the opening abandoned
    # at its deadline, while the thread opens the watch; the thread goes on, so whichever side comes second
    # closes it, or its consumer stays behind
    handoff: dict[str, Any] = {}
    lock = threading.Lock()

    def build() -> HeadWatch:
        watch = HeadWatch(
            kafka_config,
            topics,
            group,
            read_due=read_due,
            due_horizon_ms=due_horizon_ms,
            optional=optional,
            shared=everyone,
        )
        with lock:
            orphaned = handoff.setdefault("watch", watch) is not watch
        if orphaned:
            watch.close()
        return watch

    from airflow_kafka_retry.triggers.broker_calls import CallStuck

    try:
        return await calls.run("opening its watch", build)
    except (asyncio.CancelledError, CallStuck):
        with lock:
            opened = handoff.setdefault("watch", None)
        if opened is not None:
            opened.close()
        raise


async def send_tier_gauges(
    log: Any,
    calls: BrokerCalls,
    watch: HeadWatch,
    topic: str,
    topology_topic: str,
    tier_index: int,
    now_ms: int,
) -> None:
    """
    A tier's backlog gauges: ``kafka_retry.tier.backlog`` and ``.oldest_due_age_ms``, zeros included.

    What an on-call alert watches when no sensor runs (a gauge keeps its last value otherwise). A log
    end the broker does not give in time only makes the figure stale; an abandoned call
    (:class:`~airflow_kafka_retry.triggers.broker_calls.CallStuck`) is the lane's error, as its other calls'.
    """
    from airflow_kafka_retry.engine.heads.head_watch import HeadWatchError
    from airflow_kafka_retry.observability.metrics import emit, peek_gauges

    try:
        await calls.run("reading its partitions' log ends", watch.refresh_ends)
    except HeadWatchError as exc:  # the gauges never disturb the watch: send what the fetches saw
        log.warning("%s: %s; the backlog gauge uses the log ends the fetches saw", topic, exc)
    await asyncio.to_thread(emit, peek_gauges(watch.peek_of(topic), topology_topic, tier_index, now_ms))


#: The longest a read of the state topic for the key-order gauges may take.
ORDER_GAUGES_TIMEOUT_S = 10.0


async def send_order_gauges(
    log: Any, calls: BrokerCalls, kafka_conn_id: str, order_state_topic: str, topology_topic: str, now_ms: int
) -> None:
    """
    The key-order gauges of an ``ordering: key`` topology (:func:`~.metrics.ordering_gauges`).

    Sent beside its main tier's backlog gauges, as often. The state topic is read to its end under a
    deadline; a read that fails is logged and sends nothing (a gauge keeps its last value), never the lane's
    error.
    """
    from asgiref.sync import sync_to_async

    from airflow_kafka_retry.engine.scans.order_state import read_order_state
    from airflow_kafka_retry.hooks.kafka_retry import KafkaRetryHook
    from airflow_kafka_retry.observability.metrics import emit, ordering_gauges

    kafka_config = await sync_to_async(KafkaRetryHook(kafka_conn_id).kafka_config)()
    state = await calls.run(
        f"reading {order_state_topic}",
        lambda: read_order_state(
            kafka_config, order_state_topic, timeout_s=ORDER_GAUGES_TIMEOUT_S, now_ms=now_ms
        ),
        ORDER_GAUGES_TIMEOUT_S + 5,
    )
    if state.error is not None:
        log.warning("%s; the key-order gauges are not sent this time", state.error)
        return
    await asyncio.to_thread(emit, ordering_gauges(state, topology_topic, now_ms))


def _shared_watch_consumers() -> bool:
    """``[kafka_retry] shared_watch_consumers``: this triggerer's watchers share a consumer (default on)."""
    from airflow.providers.common.compat.sdk import conf

    return conf.getboolean("kafka_retry", "shared_watch_consumers", fallback=True)
