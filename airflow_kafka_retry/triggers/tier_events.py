"""
Event triggers of event-driven tiers: an asset watcher fires when a tier's records are due.

``TierDueEventTrigger`` (a tier) and ``DltArrivalEventTrigger`` (a topology's DLTs) run in the triggerer as
``AssetWatcher`` triggers. Each keeps one :class:`~airflow_kafka_retry.engine.heads.head_watch.HeadWatch` open
(its partitions assigned at the group's committed offsets, never joined, never committing; with
``[kafka_retry] shared_watch_consumers`` on, the default, the watches of a triggerer share one consumer per
Kafka connection, see ``engine/heads/shared_consumer.py``) and yields one event per *wave* (see
``policy/timing/waves.py``): while idle it only waits on the broker, so an idle tier creates no DAG run and no
task. The wave is saved in the asset's state store before its event is yielded, so a restarted triggerer
does not fire it twice at once nor forget it: it fires the next wave once the group has committed past it,
or fires it again ``refire_after`` (45 s) after it became runnable when no run took it. Whatever step the
triggerer dies at -- before the save (nothing saved: the restart fires afresh), after it, or after the yield
(the event may be lost with the process) -- and whatever becomes of the run (failed, lost), due records wait
at most the restart plus ``refire_after`` plus a run's start-up: within 60 s.
Its broker calls run each in a thread of its own with a deadline (``broker_calls.py``), never in asyncio's
default executor, which every trigger of the triggerer shares: a tier whose broker does not answer holds
no other watcher's call, and backs off alone.
:attr:`_HeadEventTrigger.fault_hook` lets a test crash the trigger at each step.

Only the connection id travels in the serialized arguments, never the Kafka configuration.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_kafka_retry.policy.headers.codec import MAX_BACKOFF_MS
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms
from airflow_kafka_retry.policy.timing.due_check import format_ms
from airflow_kafka_retry.policy.timing.waves import Wave, WavePlan, plan_wave
from airflow_kafka_retry.policy.timing.windows import ReprocessWindow
from airflow_kafka_retry.triggers.broker_calls import BrokerCalls, CallStuck
from airflow_kafka_retry.triggers.check_pace import CheckPace
from airflow_kafka_retry.triggers.watching import (
    MemoryStore,
    check_seconds,
    load_wave,
    open_watch,
    save_wave,
    send_tier_gauges,
    wave_payload,
)

if TYPE_CHECKING:  # the Kafka client and the engine load in the triggerer (run), not in a DAG file's parse
    from airflow_kafka_retry.engine.heads.head_watch import HeadWatch

#: The asset state store key of the last fired wave.
STATE_KEY = "kafka_retry_wave"
#: Kind of each trigger's events (``payload["kind"]``).
TIER_DUE, DLT_ARRIVAL = "tier_due", "dlt_arrival"


class _HeadEventTrigger(BaseEventTrigger):
    """What both event triggers share: the watch loop, the wave state, the event."""

    kind: str = ""
    read_due = True
    optional_topics: Sequence[str] = ()  # of ``topics``: watched once they exist
    #: Called with each step of the fire path (``before_save``, ``after_save``, ``after_yield``): a test
    #: raises from it to crash the trigger there. None in production.
    fault_hook: Callable[[str], None] | None = None

    def __init__(
        self,
        *,
        topics: Sequence[str],
        consumer_group: str,
        kafka_conn_id: str = "kafka_default",
        window: str | None = None,
        timezone: str | None = None,
        fire_ahead: float = 0.0,
        refire_after: float = 45.0,
        poll_interval: float = 0.5,
        commit_check: float = 1.0,
        idle_check: float = 30.0,
        retry_after: float = 30.0,
        due_horizon_ms: int = MAX_BACKOFF_MS,
        idle_check_max: float = 300.0,
    ) -> None:
        super().__init__()
        if not topics:
            raise ValueError(f"{type(self).__name__} needs at least one topic")
        check_seconds(
            type(self).__name__,
            {
                "fire_ahead": fire_ahead,
                "refire_after": refire_after,
                "poll_interval": poll_interval,
                "commit_check": commit_check,
                "idle_check": idle_check,
                "retry_after": retry_after,
                "idle_check_max": idle_check_max,
            },
        )
        self.topics = list(topics)
        self.consumer_group = consumer_group
        self.kafka_conn_id = kafka_conn_id
        self.window = window
        self.timezone = timezone
        self.fire_ahead = fire_ahead
        self.refire_after = refire_after
        self.poll_interval = poll_interval
        self.commit_check = commit_check
        self.idle_check = idle_check
        self.retry_after = retry_after
        self.due_horizon_ms = due_horizon_ms
        self.idle_check_max = idle_check_max
        self._window = ReprocessWindow.parse(window, timezone) if window else None
        self._memory = MemoryStore()  # the wave state where no asset state store is injected (a plain run)

    def _kwargs(self) -> dict[str, Any]:
        return {
            "consumer_group": self.consumer_group,
            "kafka_conn_id": self.kafka_conn_id,
            "window": self.window,
            "timezone": self.timezone,
            "fire_ahead": self.fire_ahead,
            "refire_after": self.refire_after,
            "poll_interval": self.poll_interval,
            "commit_check": self.commit_check,
            "idle_check": self.idle_check,
            "retry_after": self.retry_after,
            "due_horizon_ms": self.due_horizon_ms,
            "idle_check_max": self.idle_check_max,
        }

    @property
    def where(self) -> str:
        return f"{', '.join(self.topics)} (group {self.consumer_group})"

    # ------------------------------------------------------------------ the wave state
    def _store(self) -> Any:
        return self.asset_state_store if self.asset_state_store is not None else self._memory

    async def _load_wave(self) -> Wave | None:
        return await load_wave(self._store(), STATE_KEY)

    async def _save_wave(self, wave: Wave | None) -> None:
        await save_wave(self._store(), STATE_KEY, wave)

    # ------------------------------------------------------------------ deciding
    def plan(self, watch: HeadWatch, now_ms: int) -> WavePlan[tuple[str, int]]:
        heads = {k: h.due_at(now_ms) if self.read_due else now_ms for k, h in watch.heads.items()}
        return plan_wave(heads, now_ms=now_ms, window=self._window, fire_ahead_ms=int(self.fire_ahead * 1000))

    def payload(self, watch: HeadWatch, plan: WavePlan[tuple[str, int]], wave: Wave) -> dict[str, Any]:
        """The event (an asset event's ``extra["payload"]``): coordinates and times only, never a payload."""
        return {"kind": self.kind, **wave_payload(watch, plan, wave)}

    # ------------------------------------------------------------------ the loop
    async def run(self) -> AsyncIterator[TriggerEvent]:
        from confluent_kafka import KafkaException

        from airflow_kafka_retry.engine.heads.head_watch import HeadWatchError
        from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError

        wave = await self._load_wave()
        if wave is not None:
            self.log.info(
                "%s: a wave fired at %s is not taken yet; waiting for the group to commit past it",
                self.where,
                format_ms(wave.fired_ms),
            )
        watch: HeadWatch | None = None
        calls = BrokerCalls(self.where)
        next_gauges = failures = 0
        pace = CheckPace.of(self._kwargs())
        try:
            while True:
                try:
                    if watch is None:
                        watch = await self._open(calls)
                        failures = 0
                        pace.restart()
                    now = wall_clock_ms()
                    if pace.due(now):
                        committed = await calls.run(
                            "read of its group's committed offsets", watch.sync_committed
                        )
                        now = wall_clock_ms()
                        pace.saw(watch, committed, wave_pending=wave is not None)
                        if wave is not None and (
                            wave.taken(committed) or wave.expired(now, int(self.refire_after * 1000))
                        ):
                            if not wave.taken(committed):
                                self.log.warning(
                                    "%s: no run took the wave fired at %s within %ss (its event lost, or "
                                    "the run failed, was lost or is slow to commit); firing again",
                                    self.where,
                                    format_ms(wave.fired_ms),
                                    self.refire_after,
                                )
                            wave = None
                            await self._save_wave(None)
                        pace.plan(watch, now, wave)
                    watch.poll()
                    if now >= next_gauges and watch.complete:
                        await self.send_gauges(calls, watch, now)
                        next_gauges = now + int(self.gauge_interval * 1000)
                    if wave is None and watch.heads:
                        pace.heads_between(watch, now)  # a head learnt: a check before it is due
                        plan = self.plan(watch, now)
                        if plan.action == "fire":
                            wave = Wave(
                                tuple((t, p, watch.heads[(t, p)].offset) for t, p in plan.keys),
                                now,
                                plan.not_before_ms or now,
                            )
                            self._at("before_save")
                            await self._save_wave(wave)  # before the event: a restart must not fire it twice
                            self._at("after_save")
                            self.log.info(
                                "%s: firing for %s: %s",
                                self.where,
                                ", ".join(f"{t}[{p}]@{o}" for t, p, o in wave.positions),
                                plan.reason,
                            )
                            yield TriggerEvent(self.payload(watch, plan, wave))
                            self._at("after_yield")
                            pace.fired(now)
                            continue
                        if plan.action == "wait" and plan.wake_ms is not None:
                            await asyncio.sleep(
                                max(0.0, min(self.poll_interval, (plan.wake_ms - now) / 1000))
                            )
                            continue
                    await asyncio.sleep(self.poll_interval)
                except (HeadWatchError, KafkaException, KafkaConfigError, CallStuck) as exc:
                    # a topic not created yet is the usual case at a first deployment: look again soon,
                    # then less often (up to retry_after)
                    pause = min(self.retry_after, 2.0**failures)
                    failures += 1
                    self.log.warning("%s: %s; looking again in %.0fs", self.where, exc, pause)
                    if watch is not None:
                        await self._close(calls, watch)
                        watch = None
                    await asyncio.sleep(pause)
        finally:
            if watch is not None:
                await self._close(calls, watch)

    gauge_interval = 60.0

    def _at(self, step: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(step)

    async def send_gauges(self, calls: BrokerCalls, watch: HeadWatch, now_ms: int) -> None:
        """Send metrics of what the watch sees (the tier trigger's backlog gauges); nothing here."""

    async def _close(self, calls: BrokerCalls, watch: HeadWatch) -> None:
        """Close the watch: now, or when the abandoned call (which may be using it) returns."""
        try:
            await calls.after("closing its watch", watch.close)
        except CallStuck as exc:
            self.log.warning("%s", exc)

    async def _open(self, calls: BrokerCalls) -> HeadWatch:
        watch = await open_watch(
            self.kafka_conn_id,
            self.topics,
            self.consumer_group,
            calls=calls,
            read_due=self.read_due,
            due_horizon_ms=self.due_horizon_ms,
            optional=self.optional_topics,
        )
        self.log.info(
            "%s: watching %s partition(s) from the group's committed offsets", self.where, len(watch.keys)
        )
        return watch


class TierDueEventTrigger(_HeadEventTrigger):
    """
    Fires when records of a retry tier (or the main topic) are due: the watcher of an event-driven tier DAG.

    It sleeps until the earliest head's due time (records without a due header are due at once) and
    fires ``fire_ahead`` seconds before it; outside the reprocessing ``window`` it waits for the opening.

    :param topic: the tier's topic.
    :param consumer_group: the group that drains the tier (its committed offsets are the start).
    :param kafka_conn_id: the Kafka connection (librdkafka configuration in its extra).
    :param window: reprocessing window ``HH:MM-HH:MM``; outside it, nothing is due.
    :param timezone: IANA time zone of ``window`` (default UTC).
    :param fire_ahead: fire this many seconds before the records are due (the run waits for them).
    :param refire_after: fire a wave again when the group has not committed past it this long after it
        became runnable (a lost event, a failed or lost run): the most such a fault adds to lateness.
    :param poll_interval: seconds between looks at what the watch consumer fetched.
    :param commit_check: seconds between reads of the committed offsets while a wave is pending or a head due.
    :param idle_check: the same while nothing is pending (a head due later: once before it is due).
    :param idle_check_max: the longest interval between idle checks: from ``idle_check``, it doubles after
        each check that saw nothing change, up to this (``policy/timing/idle_checks.py``).
    :param retry_after: the longest wait after a broker error (a missing topic, an unreachable cluster);
        the first waits are 1, 2, 4... seconds.
    :param topology_topic: the topology's main topic and
    :param tier_index: the tier's index: given both, the trigger sends the tier's backlog gauges
        through Airflow's metrics (the triggerer's ``[metrics]`` settings) every ``gauge_interval`` seconds.
    """

    kind = TIER_DUE

    def __init__(
        self,
        *,
        topic: str,
        consumer_group: str,
        topology_topic: str | None = None,
        tier_index: int | None = None,
        gauge_interval: float = 60.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(topics=[topic], consumer_group=consumer_group, **kwargs)
        if (topology_topic is None) != (tier_index is None):
            raise ValueError(
                "TierDueEventTrigger: topology_topic and tier_index go together (the gauges' tags)"
            )
        if (
            isinstance(gauge_interval, bool)
            or not isinstance(gauge_interval, (int, float))
            or gauge_interval <= 0
        ):
            raise ValueError(
                f"TierDueEventTrigger: gauge_interval must be a number of seconds > 0, got {gauge_interval!r}"
            )
        self.topic = topic
        self.topology_topic = topology_topic
        self.tier_index = tier_index
        self.gauge_interval = gauge_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "topic": self.topic,
            "topology_topic": self.topology_topic,
            "tier_index": self.tier_index,
            "gauge_interval": self.gauge_interval,
            **self._kwargs(),
        }

    async def send_gauges(self, calls: BrokerCalls, watch: HeadWatch, now_ms: int) -> None:
        """The tier's backlog gauges (``send_tier_gauges``), given ``topology_topic`` and ``tier_index``."""
        if self.topology_topic is None or self.tier_index is None:
            return
        topology, tier = self.topology_topic, self.tier_index
        await send_tier_gauges(self.log, calls, watch, self.topic, topology, tier, now_ms)


class DltArrivalEventTrigger(_HeadEventTrigger):
    """
    Fires when a record arrives in any of a topology's DLTs after the watch group's committed offset.

    The watcher of an event-driven DLT-watch DAG: every new dead letter is reported seconds after it
    arrived. Parameters as :class:`TierDueEventTrigger`, with ``topics`` (the DLTs and the parking topic)
    and ``optional_topics`` (those of them watched once they exist: the parking topic, which a topology
    deployed before parking existed may not have yet); records carry no due time here: any new record
    fires (a window, if given, still holds the event until it opens).
    """

    kind = DLT_ARRIVAL
    read_due = False

    def __init__(
        self,
        *,
        topics: Sequence[str],
        consumer_group: str,
        optional_topics: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(topics=topics, consumer_group=consumer_group, **kwargs)
        if not set(optional_topics) <= set(topics):
            raise ValueError("DltArrivalEventTrigger: optional_topics must be among its topics")
        self.optional_topics = list(optional_topics)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "topics": self.topics,
            "optional_topics": self.optional_topics,
            **self._kwargs(),
        }
