"""
Event mode of ``build_retry_dags``: the watched "due" assets and the schedules that combine them with a sweep.

A tier DAG in event mode is scheduled on ``AssetOrTimeSchedule``: its tier's *due* asset, whose
``AssetWatcher`` runs a :class:`~airflow_kafka_retry.triggers.tier_events.TierDueEventTrigger` in the
triggerer, or a slow time schedule (the sweep) as a safety net. The due asset is not the topic's own
``kafka://`` asset (the outlets of the tier before): an event there says records *arrived*, not that
they are *due*, and would start a run that drains nothing. Nothing here reads a connection.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.policy.headers.codec import MAX_BACKOFF_MS

if TYPE_CHECKING:
    from airflow.sdk import Asset

#: How long before the due time a wave fires (the task's start-up is not added to lateness).
DEFAULT_FIRE_AHEAD = timedelta(seconds=3)
MAX_FIRE_AHEAD = timedelta(seconds=30)
#: A wave the group has not committed past after this long fires again (a lost event, a failed or lost
#: run): with a run's start-up, what a triggerer crash or a failed run adds to lateness stays within
#: 60 s (``policy/timing/waves.py``).
DEFAULT_REFIRE_AFTER = timedelta(seconds=45)
#: A run waits in its task for a record due within this long, rather than leaving it to a new run
#: (a new run costs a wave, a DAG run and a task start: a few seconds).
DEFAULT_FOLLOW = timedelta(seconds=10)
#: URI schemes of the watched assets.
DUE_SCHEME, DEAD_LETTER_SCHEME = "kafka-retry-due", "kafka-retry-dead-letters"
TOPOLOGY_SCHEME = "kafka-retry-topology"


def due_asset_uri(kafka_conn_id: str, topic: str) -> str:
    """The due asset of a tier: ``kafka-retry-due://<kafka_conn_id>/<topic>``."""
    return f"{DUE_SCHEME}://{kafka_conn_id}/{topic}"


def dead_letter_asset_uri(kafka_conn_id: str, main_topic: str) -> str:
    """The dead-letter asset of a topology (all its DLTs): ``kafka-retry-dead-letters://<kafka_conn_id>/<main>``."""
    return f"{DEAD_LETTER_SCHEME}://{kafka_conn_id}/{main_topic}"


def topology_asset_uri(kafka_conn_id: str, main_topic: str) -> str:
    """The asset of a topology DAG (any lane due): ``kafka-retry-topology://<kafka_conn_id>/<main>``."""
    return f"{TOPOLOGY_SCHEME}://{kafka_conn_id}/{main_topic}"


def check_sweep(value: Any) -> Any:
    """The sweep schedule: a positive timedelta, a cron string or a timetable."""
    from airflow_kafka_retry.factory.overrides import TierOverrideError, check_schedule

    try:
        check_schedule("sweep", value, None)
    except TierOverrideError as exc:
        raise ValueError(f"sweep: {str(exc).split(': ', 1)[1]}") from None
    return value


def default_sweep(dag_id: str, *, topology_topic: str, slot: int) -> str:
    """
    The default sweep of an event-mode DAG: weekly, a cron string.

    The watcher in the triggerer starts a run when records are due, and fires a wave again when it was
    not taken (``refire_after``); the sweep is only the net for a deployment whose watcher does not run
    (no triggerer), so an idle topology should cost next to nothing. Each DAG of a topology (``slot``: its
    tiers in order, then the DLT watch) sweeps on its own day of the week, the days of one topology
    consecutive from a day derived from its main topic: an idle topology creates at most one run a day
    (with up to 7 swept DAGs). The time of day is derived from the DAG id, so the sweeps of many DAGs
    spread over the day. A tick that passed before a DAG is first deployed is not run (``build_dag``).
    """
    day = (zlib.crc32(topology_topic.encode()) + slot) % 7
    spread = zlib.crc32(dag_id.encode())
    return f"{spread % 60} {spread // 60 % 24} * * {day}"


def sweep_schedule(asset: Asset, schedule: Any) -> Any:
    """Run on an event of ``asset`` or on ``schedule`` (a timedelta, or a timetable)."""
    from airflow.sdk import AssetOrTimeSchedule, DeltaTriggerTimetable

    timetable = DeltaTriggerTimetable(schedule) if isinstance(schedule, timedelta) else schedule
    return AssetOrTimeSchedule(timetable=timetable, assets=asset)


@dataclass(frozen=True)
class EventSettings:
    """
    What the watchers of one ``build_retry_dags`` call share.

    ``kafka_conn_id`` keys the assets' URIs (the base connection of the call); ``watcher_conn_id`` is the
    connection the triggers read Kafka with (the ``watcher`` role; None: ``kafka_conn_id``), so giving
    the watcher a connection of its own changes no asset and no saved wave.
    """

    kafka_conn_id: str
    sweep: Any = None  # None: weekly, see default_sweep
    fire_ahead: timedelta = DEFAULT_FIRE_AHEAD
    refire_after: timedelta = DEFAULT_REFIRE_AFTER
    follow: timedelta | None = DEFAULT_FOLLOW
    watcher_conn_id: str | None = None

    @property
    def trigger_conn_id(self) -> str:
        """The connection the watchers read Kafka with."""
        return self.watcher_conn_id or self.kafka_conn_id

    def __post_init__(self) -> None:
        if (
            not isinstance(self.fire_ahead, timedelta)
            or not timedelta(0) <= self.fire_ahead <= MAX_FIRE_AHEAD
        ):
            raise ValueError(
                f"fire_ahead must be a timedelta from 0 to {MAX_FIRE_AHEAD.total_seconds():.0f}s, "
                f"got {self.fire_ahead!r}"
            )
        if not isinstance(self.refire_after, timedelta) or self.refire_after <= timedelta(0):
            raise ValueError(f"refire_after must be a positive timedelta, got {self.refire_after!r}")
        if self.follow is not None and (not isinstance(self.follow, timedelta) or self.follow < timedelta(0)):
            raise ValueError(f"follow must be a timedelta >= 0 or None, got {self.follow!r}")

    def sweep_for(self, dag_id: str, *, topology_topic: str, slot: int) -> Any:
        """The sweep of one DAG: the one given, else :func:`default_sweep`."""
        if self.sweep is not None:
            return self.sweep
        return default_sweep(dag_id, topology_topic=topology_topic, slot=slot)

    def _timing(self) -> dict[str, float]:
        return {
            "fire_ahead": self.fire_ahead.total_seconds(),
            "refire_after": self.refire_after.total_seconds(),
        }

    def tier_asset(
        self,
        topic: str,
        group: str,
        *,
        dag_id: str,
        window: str | None,
        timezone: str | None,
        delay_ms: int,
        topology_topic: str,
        tier_index: int,
    ) -> Asset:
        """
        The due asset of a tier, watched by a ``TierDueEventTrigger``.

        It believes due times up to a day plus the tier's delay ahead, as the drain does.
        """
        from airflow.sdk import Asset, AssetWatcher

        from airflow_kafka_retry.triggers.tier_events import TierDueEventTrigger

        trigger = TierDueEventTrigger(
            topic=topic,
            consumer_group=group,
            kafka_conn_id=self.trigger_conn_id,
            window=window,
            timezone=timezone,
            due_horizon_ms=MAX_BACKOFF_MS + delay_ms,
            topology_topic=topology_topic,
            tier_index=tier_index,
            **self._timing(),
        )
        uri = due_asset_uri(self.kafka_conn_id, topic)
        return Asset(name=uri, uri=uri, watchers=[AssetWatcher(name=f"{dag_id}.due", trigger=trigger)])

    def dlt_asset(
        self, main_topic: str, dlts: Sequence[str], group: str, *, dag_id: str, optional: Sequence[str] = ()
    ) -> Asset:
        """
        The dead-letter asset of a topology.

        A ``DltArrivalEventTrigger`` watches all its DLTs and its parking topic.
        """
        from airflow.sdk import Asset, AssetWatcher

        from airflow_kafka_retry.triggers.tier_events import DltArrivalEventTrigger

        trigger = DltArrivalEventTrigger(
            topics=[*dlts, *optional],
            optional_topics=list(optional),
            consumer_group=group,
            kafka_conn_id=self.trigger_conn_id,
            **self._timing(),
        )
        uri = dead_letter_asset_uri(self.kafka_conn_id, main_topic)
        return Asset(
            name=uri, uri=uri, watchers=[AssetWatcher(name=f"{dag_id}.dead_letters", trigger=trigger)]
        )

    def topology_asset(
        self,
        main_topic: str,
        lanes: Sequence[Mapping[str, Any]],
        *,
        dag_id: str,
        setup_task: str | None,
        follow: bool = True,
    ) -> Asset:
        """
        The asset of a topology DAG, watched by one ``TopologyDueEventTrigger`` over all its lanes.

        ``follow``: the tier tasks follow their next record (the local engine) for ``self.follow``.
        """
        from airflow.sdk import Asset, AssetWatcher

        from airflow_kafka_retry.triggers.topology_events import TopologyDueEventTrigger

        trigger = TopologyDueEventTrigger(
            topology_topic=main_topic,
            lanes=lanes,
            kafka_conn_id=self.trigger_conn_id,
            setup_task=setup_task,
            follow=self.follow.total_seconds() if follow and self.follow is not None else 0.0,
            **self._timing(),
        )
        uri = topology_asset_uri(self.kafka_conn_id, main_topic)
        return Asset(name=uri, uri=uri, watchers=[AssetWatcher(name=f"{dag_id}.due", trigger=trigger)])
