"""
A topology's lanes changed since its last watcher: what the new watcher logs, and what it forgets.

``TopologyDueEventTrigger`` saves its lanes in the asset state store (``topology_lanes.lanes_state``). When
it starts, it compares them with the last watcher's: an added lane is logged; a removed lane's wave state
is forgotten, and a removed tier gets a warning naming its topic, group and first pending records, and how
to drain them, as its records stay in its topic, drained by no task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms
from airflow_kafka_retry.triggers.topology_lanes import (
    LANES_KEY,
    MAIN_LANE,
    WATCH_LANE,
    Lane,
    lane_changes,
    lanes_state,
)
from airflow_kafka_retry.triggers.watching import open_watch, save_wave

#: How long a removed tier's topic is read for its pending records (the warning says what it found).
PENDING_LOOK_MS = 10_000


async def note_lane_changes(
    log: Any, store: Any, lanes: Sequence[Mapping[str, Any]], topology_topic: str, kafka_conn_id: str
) -> None:
    """Log the lanes added or removed since the topology's last watcher (``store``: its asset state store)."""
    before = await store.aget(LANES_KEY)
    added, removed = lane_changes(before, lanes)
    if added:
        log.info("%s: now watching %s too (added since the last watcher)", topology_topic, added)
    for spec in removed:
        gone = Lane(spec, None)
        await save_wave(store, gone.state_key, None)  # no wave: forget what the removed lane had fired
        if spec["name"] in (WATCH_LANE, MAIN_LANE):  # the DLTs stay, the service drains its own topic
            log.info("%s: no longer watched (removed from the topology DAG)", gone.where)
            continue
        log.warning(
            "%s: this tier is no longer part of the topology, so no task drains its topic; %s",
            gone.where,
            await _pending(spec, kafka_conn_id),
        )
    state = lanes_state(lanes)
    if before != state:
        await store.aset(LANES_KEY, state)


async def _pending(spec: Mapping[str, Any], kafka_conn_id: str) -> str:
    """What a removed tier's topic still holds past its group's committed offsets, in one line."""
    from confluent_kafka import KafkaException

    from airflow_kafka_retry.engine.heads.head_watch import HeadWatchError
    from airflow_kafka_retry.triggers.broker_calls import BrokerCalls, CallStuck

    calls = BrokerCalls(f"{', '.join(spec['topics'])} (group {spec['group']})")
    try:
        watch = await open_watch(
            kafka_conn_id, spec["topics"], spec["group"], calls=calls, read_due=False, due_horizon_ms=0
        )
    except (HeadWatchError, KafkaException, CallStuck, ValueError) as exc:
        return f"its records could not be read ({exc})"
    try:
        deadline = wall_clock_ms() + PENDING_LOOK_MS
        while not watch.complete and wall_clock_ms() < deadline:
            watch.poll()
            await asyncio.sleep(0.1)
        heads = sorted(f"{t}[{p}]@{h.offset}" for (t, p), h in watch.heads.items())
    finally:
        with contextlib.suppress(CallStuck):
            await calls.after("closing its watch", watch.close)
    if not heads:
        return "nothing is pending there" + ("" if watch.complete else " as far as could be read in 10 s")
    return (
        f"records are pending there from {', '.join(heads)}: drain them with the topology file that "
        "still has this tier (airflow-kafka-retry drain --topology OLD.yaml --tier N --handler ... "
        "with the cluster's --bootstrap or --kafka-config), or put the tier back"
    )
