"""
One watcher per topology: ``TopologyDueEventTrigger`` fires when any tier of a topology has records due.

A topology DAG (``build_retry_dags``' default layout) is scheduled on one asset whose watcher runs
this trigger in the triggerer. It watches every *lane* of the topology -- each retry tier (and the main
topic with ``include_main``) with the tier's group, and the DLTs with the watch group -- through one
consumer (the topology's own, or the triggerer's shared one), and yields one event naming the lanes
(the DAG's task ids) that are due. The event starts every task of the DAG; each one's gate
(``operators/lane_gate.py``) runs it when the event names its lane and skips it otherwise.

Each lane keeps its own wave (``policy/timing/waves.py``) in the asset's state store under its own key, saved
before the event is yielded, so everything the tier triggers guarantee holds per lane: a restarted
triggerer neither fires a wave twice at once nor forgets it, a wave no run took fires again
``refire_after`` after it became runnable, and a window holds a lane's wave until it opens. Runs of the
topology DAG overlap (a long retry-2 drain does not hold back retry-1's waves), so a lane whose run is
draining on fires no new wave for the records that run takes itself, rather than a queue of runs waiting
behind it: while its group committed within the last ``follow`` + ``busy_hold`` seconds, the heads due
by the last commit plus ``follow`` (the tasks' own wait for their next record) are held.

Each lane's broker calls (opening its watch, reading its group's committed offsets, its gauges) run
beside the other lanes', each in a thread of its own with a deadline (``broker_calls.py``), never in
asyncio's shared default executor: a lane whose broker does not answer, a request timing out after a
rolling restart, holds none of the others back, and backs off alone.

When a lane's topics do not exist (a first deployment), the trigger fires a *setup* event naming the
setup task (which creates the topology's topics), at most once per ``SETUP_REFIRE_S``. Only the
connection id travels in the serialized arguments, never the Kafka configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_kafka_retry.policy.headers.codec import MAX_BACKOFF_MS
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms
from airflow_kafka_retry.policy.timing.due_check import format_ms
from airflow_kafka_retry.policy.timing.waves import Wave, WavePlan, plan_wave
from airflow_kafka_retry.triggers.check_pace import CheckPace
from airflow_kafka_retry.triggers.lane_changes import note_lane_changes
from airflow_kafka_retry.triggers.topology_lanes import (
    TOPOLOGY_DUE,
    Lane,
    check_lanes,
    lane_window,
)
from airflow_kafka_retry.triggers.watching import (
    MemoryStore,
    check_seconds,
    load_wave,
    open_watch,
    save_wave,
    send_order_gauges,
    send_tier_gauges,
    wave_payload,
)

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.heads.head_watch import HeadWatch

#: A setup event (the topology's topics missing) fires again at most this often.
SETUP_REFIRE_S = 600.0
#: Seconds a loop waits for the lanes' broker calls it started before it goes on with the lanes that
#: answered: a lane whose broker does not answer (a request timing out) holds none of the others.
CHECK_WAIT_S = 1.0


class TopologyDueEventTrigger(BaseEventTrigger):
    """
    Fires when records of any lane (tier or DLTs) of a topology are due: the watcher of a topology DAG.

    :param topology_topic: the topology's main topic (the gauges' tag, the log's prefix).
    :param lanes: (a list, or its JSON) one mapping per lane: ``name`` (the task it starts),
        ``topics``, ``group``, and optionally ``read_due`` (False: any record is due, for DLTs),
        ``optional_topics`` (watched once they exist), ``window`` and ``timezone`` (the lane's
        reprocessing window), ``due_horizon_ms`` and ``tier_index`` (a tier: its backlog gauges are
        sent every ``gauge_interval`` seconds), and for the main lane of an ``ordering: key`` topology
        ``order_state_topic`` (its key-order gauges are sent with its backlog gauges).
    :param setup_task: the task that creates the topology's topics, named by a setup event; None: none.
    :param busy_hold: seconds after its group last committed (plus ``follow``) during which a lane holds
        the heads its run is taking itself.
    :param follow: how long the lanes' tasks wait for their next record (their ``follow``; 0: none): the
        heads due within this of a lane's last commit are its running task's.
    :param idle_check_max: the longest interval between an idle lane's checks: from ``idle_check``, it
        doubles after each check that saw nothing change, up to this (``policy/timing/idle_checks.py``).

    Other parameters as :class:`~airflow_kafka_retry.triggers.tier_events.TierDueEventTrigger`.
    """

    #: Called with each step of the fire path (``before_save``, ``after_save``, ``after_yield``): a test
    #: raises from it to crash the trigger there. None in production.
    fault_hook: Callable[[str], None] | None = None

    def __init__(
        self,
        *,
        topology_topic: str,
        lanes: Sequence[Mapping[str, Any]] | str,
        kafka_conn_id: str = "kafka_default",
        setup_task: str | None = None,
        fire_ahead: float = 0.0,
        refire_after: float = 45.0,
        busy_hold: float = 5.0,
        follow: float = 0.0,
        poll_interval: float = 0.5,
        commit_check: float = 1.0,
        idle_check: float = 30.0,
        retry_after: float = 30.0,
        gauge_interval: float = 60.0,
        idle_check_max: float = 300.0,
    ) -> None:
        super().__init__()
        timing = {
            "fire_ahead": fire_ahead,
            "refire_after": refire_after,
            "busy_hold": busy_hold,
            "follow": follow,
            "poll_interval": poll_interval,
            "commit_check": commit_check,
            "idle_check": idle_check,
            "retry_after": retry_after,
            "gauge_interval": gauge_interval,
            "idle_check_max": idle_check_max,
        }
        check_seconds("TopologyDueEventTrigger", timing)
        self.topology_topic = topology_topic
        self.lanes = check_lanes(lanes)
        self.kafka_conn_id = kafka_conn_id
        self.setup_task = setup_task
        self.timing = timing
        for lane in self.lanes:  # a wrong window fails when the DAG is built, not in the triggerer
            lane_window(lane)
        self._memory = MemoryStore()  # the state where no asset state store is injected (a plain run)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "topology_topic": self.topology_topic,
            # as JSON: Airflow serializes a list of mappings in a trigger's arguments in a way that changes
            # from one parse to the next (the watcher would be registered anew at each parse)
            "lanes": json.dumps(self.lanes, sort_keys=True),
            "kafka_conn_id": self.kafka_conn_id,
            "setup_task": self.setup_task,
            **self.timing,
        }

    def _s(self, name: str) -> int:
        """A timing setting in milliseconds."""
        return int(self.timing[name] * 1000)

    # ------------------------------------------------------------------ the wave state
    def _store(self) -> Any:
        return self.asset_state_store if self.asset_state_store is not None else self._memory

    async def _save(self, lane: Lane) -> None:
        await save_wave(self._store(), lane.state_key, lane.wave)

    async def _note_lane_changes(self) -> None:
        await note_lane_changes(self.log, self._store(), self.lanes, self.topology_topic, self.kafka_conn_id)

    # ------------------------------------------------------------------ one lane, one step
    def _check_due(self, lane: Lane, now: int) -> bool:
        """Whether the lane has broker calls to make now (:meth:`_check`)."""
        if lane.watch is None:
            return now >= lane.retry_at
        return lane.pace.due(now) or self._gauges_due(lane, lane.watch, now)

    @staticmethod
    def _gauges_due(lane: Lane, watch: HeadWatch, now: int) -> bool:
        """Whether a tier lane's backlog gauges are due (they need every partition's head or end)."""
        return lane.spec.get("tier_index") is not None and now >= lane.next_gauges and watch.complete

    async def _check(self, lane: Lane, now: int) -> None:
        """
        A lane's broker calls: open its watch, read its group's committed offsets, send its gauges.

        They run beside the other lanes' (the loop waits for them only :data:`CHECK_WAIT_S`): a lane
        whose broker does not answer holds none of the others.
        """
        if lane.watch is None:
            lane.watch = await open_watch(
                self.kafka_conn_id,
                lane.spec["topics"],
                lane.spec["group"],
                calls=lane.calls,
                read_due=lane.spec.get("read_due", True),
                due_horizon_ms=lane.spec.get("due_horizon_ms", MAX_BACKOFF_MS),
                optional=lane.spec.get("optional_topics") or (),
            )
            lane.failures = 0
            lane.pace.restart()
            self.log.info("%s: watching %s partition(s)", lane.where, len(lane.watch.keys))
        watch = lane.watch
        if lane.pace.due(now):
            committed = await lane.calls.run("read of its group's committed offsets", watch.sync_committed)
            now = wall_clock_ms()
            if lane.pace.saw(watch, committed, wave_pending=lane.wave is not None):
                lane.last_move_ms = now
            wave = lane.wave
            if wave is not None and (wave.taken(committed) or wave.expired(now, self._s("refire_after"))):
                if not wave.taken(committed):
                    self.log.warning(
                        "%s: no run took the wave fired at %s within %ss; firing again",
                        lane.where,
                        format_ms(wave.fired_ms),
                        self.timing["refire_after"],
                    )
                lane.wave = None
                await self._save(lane)
            lane.pace.plan(watch, now, lane.wave)
        if self._gauges_due(lane, watch, now):
            topic = lane.spec["topics"][0]
            tier = lane.spec["tier_index"]
            await send_tier_gauges(self.log, lane.calls, watch, topic, self.topology_topic, tier, now)
            if state := lane.spec.get("order_state_topic"):
                await send_order_gauges(
                    self.log, lane.calls, self.kafka_conn_id, state, self.topology_topic, now
                )
            lane.next_gauges = now + self._s("gauge_interval")

    def _look(self, lane: Lane, watch: HeadWatch, now: int) -> WavePlan[tuple[str, int]] | int:
        """What the lane's watch fetched (never waits): a plan to fire, or when to look again (epoch ms)."""
        watch.poll()
        wake = now + self._s("poll_interval")
        if lane.wave is not None or not watch.heads:
            return wake
        # a head learnt since the last check: its committed offsets are read again before it falls due
        lane.pace.heads_between(watch, now)
        read_due = lane.spec.get("read_due", True)
        heads = {k: h.due_at(now) if read_due else now for k, h in watch.heads.items()}
        plan = plan_wave(heads, now_ms=now, window=lane.window, fire_ahead_ms=self._s("fire_ahead"))
        if plan.action == "fire":
            taken_by_run = lane.last_move_ms + self._s("follow")
            hold = taken_by_run + self._s("busy_hold")
            # when the wave's first record became due (a record without a due header: when it was written)
            first = min(
                (h.due_ms if h.due_ms is not None else h.timestamp_ms or now)
                for h in (watch.heads[k] for k in plan.keys)
            )
            if now < hold and first <= taken_by_run:
                return min(wake, hold)  # its run is draining on: it takes these records itself
            return plan
        return min(wake, plan.wake_ms) if plan.action == "wait" and plan.wake_ms is not None else wake

    async def _failed(self, lane: Lane, exc: Exception, now: int) -> bool:
        """A lane's broker error: close its watch, look again later; True when its topics are missing."""
        from airflow_kafka_retry.engine.kafka.clients import TopicsMissing

        pause = min(self.timing["retry_after"], 2.0**lane.failures)
        lane.failures += 1
        self.log.warning("%s: %s; looking again in %.0fs", lane.where, exc, pause)
        if lane.watch is not None:
            watch, lane.watch = lane.watch, None
            await self._close(lane, watch)
        lane.retry_at = now + int(pause * 1000)
        return isinstance(exc, TopicsMissing) or isinstance(exc.__cause__, TopicsMissing)

    async def _close(self, lane: Lane, watch: HeadWatch) -> None:
        """Close a lane's watch: now, or when its abandoned call (which may be using it) returns."""
        from airflow_kafka_retry.triggers.broker_calls import CallStuck

        try:
            await lane.calls.after("closing its watch", watch.close)
        except CallStuck as exc:
            self.log.warning("%s", exc)

    # ------------------------------------------------------------------ the loop
    async def run(self) -> AsyncIterator[TriggerEvent]:
        from confluent_kafka import KafkaException

        from airflow_kafka_retry.engine.heads.head_watch import HeadWatchError
        from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
        from airflow_kafka_retry.triggers.broker_calls import CallStuck

        await self._note_lane_changes()
        lanes = [Lane(spec, lane_window(spec), pace=CheckPace.of(self.timing)) for spec in self.lanes]
        for lane in lanes:
            lane.wave = await load_wave(self._store(), lane.state_key)
            if lane.wave is not None:
                self.log.info(
                    "%s: a wave fired at %s is not taken yet; waiting for the group to commit past it",
                    lane.where,
                    format_ms(lane.wave.fired_ms),
                )
        setup_fired_ms: int | None = None
        errors = (HeadWatchError, KafkaException, KafkaConfigError, CallStuck)
        try:
            while True:
                now = wall_clock_ms()
                started = []
                for lane in lanes:
                    if lane.check is None and self._check_due(lane, now):
                        lane.check = asyncio.ensure_future(self._check(lane, now))
                        started.append(lane.check)
                if started:  # an answering broker answers within this; a lane that waits longer waits alone
                    await asyncio.wait(started, timeout=CHECK_WAIT_S)
                fire: list[_Firing] = []
                now = wall_clock_ms()
                wake, missing = now + self._s("poll_interval"), False
                for lane in lanes:
                    try:
                        if lane.check is not None:
                            if not lane.check.done():
                                continue  # its broker calls go on
                            check, lane.check = lane.check, None
                            check.result()
                        if lane.watch is None:
                            wake = min(wake, lane.retry_at)
                            continue
                        step = self._look(lane, lane.watch, now)
                    except errors as exc:
                        missing = await self._failed(lane, exc, now) or missing
                        wake = min(wake, lane.retry_at)
                        continue
                    if isinstance(step, WavePlan):
                        fire.append((lane, step, lane.watch))
                    else:
                        wake = min(wake, step)
                setup = (
                    missing
                    and self.setup_task is not None
                    and (setup_fired_ms is None or now - setup_fired_ms >= SETUP_REFIRE_S * 1000)
                )
                if fire or setup:
                    if setup:
                        setup_fired_ms = now
                    yield await self._fire(fire, wall_clock_ms(), setup=setup)
                    self._at("after_yield")
                    continue
                pause = max(0.0, min(wake - wall_clock_ms(), self._s("poll_interval")) / 1000)
                checking = [lane.check for lane in lanes if lane.check is not None]
                if checking:  # a lane's broker calls that end wake the loop
                    await asyncio.wait(checking, timeout=pause, return_when=asyncio.FIRST_COMPLETED)
                else:
                    await asyncio.sleep(pause)
        finally:
            for lane in lanes:
                if lane.check is not None:
                    lane.check.cancel()  # an open_watch cancelled closes what its thread opens
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await asyncio.wait_for(lane.check, CHECK_WAIT_S)
                if lane.watch is not None:
                    await self._close(lane, lane.watch)

    async def _fire(self, fire: list[_Firing], now: int, *, setup: bool) -> TriggerEvent:
        """Save the waves of the lanes that fire, then make their one event."""
        lanes: dict[str, Any] = {}
        for lane, plan, watch in fire:
            positions = tuple((t, p, watch.heads[(t, p)].offset) for t, p in plan.keys)
            # the plan was made a little earlier (a broker call in between): a due wave is runnable from now
            lane.wave = wave = Wave(positions, now, max(plan.not_before_ms or now, now))
            lanes[lane.name] = wave_payload(watch, plan, wave)
        self._at("before_save")
        for lane, _, _ in fire:
            await self._save(lane)  # before the event: a restart must not fire it twice
            lane.pace.fired(now)
        self._at("after_save")
        for lane, plan, _ in fire:
            self.log.info(
                "%s: firing for %s: %s", lane.where, ", ".join(lanes[lane.name]["partitions"]), plan.reason
            )
        due = [lane.name for lane, _, _ in fire]
        if setup and self.setup_task is not None:
            self.log.info(
                "%s: topics missing; firing the setup task %s", self.topology_topic, self.setup_task
            )
            due.append(self.setup_task)
        payload = {
            "kind": TOPOLOGY_DUE,
            "topology": self.topology_topic,
            "due": due,
            "lanes": lanes,
            "fired_ms": now,  # the lanes' gate compares it with the saved waves (stranded_lanes)
        }
        return TriggerEvent(payload)

    def _at(self, step: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(step)


_Firing = tuple[Lane, WavePlan[tuple[str, int]], "HeadWatch"]
