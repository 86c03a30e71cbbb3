"""
``tier_overrides`` of ``build_retry_dags``: per-tier schedule, window, time zone, run limit and pool.

``{"orders-retry-3": {"schedule": "0 1 * * *", "window": "01:00-05:00", "timezone": "Europe/Berlin",
"max_run": "2h"}}``: keys are topic names of the topology's tiers; every error names the tier and the key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow_kafka_retry.policy.timing.durations import duration_ms

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

log = logging.getLogger(__name__)

OVERRIDE_KEYS = ("schedule", "window", "timezone", "max_run", "pool")
#: What the DLT-watch DAG takes (it drains nothing: no window, no run limit).
WATCH_KEYS = ("schedule",)


class TierOverrideError(ValueError):
    """A ``tier_overrides`` entry is wrong; the message names the tier (topic) and the key."""

    def __init__(self, tier: str, key: str | None, problem: str) -> None:
        self.tier = tier
        self.key = key
        where = f"tier_overrides[{tier!r}]" + (f"[{key!r}]" if key else "")
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class TierSettings:
    """
    How one tier's DAG runs, after overrides and the ``min_schedule`` floor.

    :param schedule: what the DAG is given: a ``timedelta``, a cron string or a timetable.
    :param window: ``HH:MM-HH:MM`` reprocessing window, or None (always open).
    :param timezone: IANA name the window and a cron schedule are read in (None: UTC).
    :param max_run: longest a reprocess run may take before it stops at a chunk boundary.
    :param pool: the Airflow pool of the tier's reprocess task (None: the DAG's default).
    """

    schedule: Any
    window: str | None = None
    timezone: str | None = None
    max_run: timedelta | None = None
    pool: str | None = None

    @property
    def interval(self) -> timedelta | None:
        """The schedule's interval when it is a plain ``timedelta`` (the due sensor's ``max_wait``)."""
        return self.schedule if isinstance(self.schedule, timedelta) else None


def check_overrides(
    topology: Topology,
    overrides: Mapping[str, Mapping[str, Any]] | None,
    *,
    tiers: list[Tier],
    watch_topic: str | None,
) -> dict[str, dict[str, Any]]:
    """
    Validate ``overrides`` against the tiers that get a DAG; returns them as plain dicts keyed by topic.

    :param tiers: the tiers that get a DAG (retry tiers, and the main topic with ``include_main``).
    :param watch_topic: the DLT-watch DAG's topic (its key takes only ``schedule``), or None.
    """
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise TypeError(
            f"tier_overrides must map tier topic names to settings, got {type(overrides).__name__}"
        )
    by_topic = {t.topic: t for t in tiers}
    checked: dict[str, dict[str, Any]] = {}
    for name, settings in overrides.items():
        allowed: tuple[str, ...]
        if name == watch_topic:
            allowed = WATCH_KEYS
        elif name in by_topic:
            allowed = OVERRIDE_KEYS
        else:
            known = [*by_topic, *([watch_topic] if watch_topic else [])]
            hint = ""
            if name == topology.topic:
                hint = " (the main topic gets a DAG only with include_main=True)"
            raise TierOverrideError(
                str(name), None, f"no DAG is built for this topic{hint}; tiers with a DAG: {', '.join(known)}"
            )
        if not isinstance(settings, Mapping):
            raise TierOverrideError(
                name, None, f"must be a mapping of {', '.join(allowed)}, got {type(settings).__name__}"
            )
        for key in settings:
            if key not in allowed:
                raise TierOverrideError(name, str(key), f"unknown key; known keys: {', '.join(allowed)}")
        timezone = settings.get("timezone")
        if timezone is not None:
            _check_timezone(name, timezone)
        if "schedule" in settings:
            check_schedule(name, settings["schedule"], timezone)
        if settings.get("window") is not None:
            _check_window(name, settings["window"], timezone)
        if settings.get("max_run") is not None:
            _max_run(name, settings["max_run"])
        pool = settings.get("pool")
        if pool is not None and (not isinstance(pool, str) or not pool.strip()):
            raise TierOverrideError(name, "pool", f"must be the name of an Airflow pool, got {pool!r}")
        checked[name] = dict(settings)
    return checked


def tier_settings(
    tier: Tier, override: Mapping[str, Any], *, min_schedule: timedelta, default: Any = None
) -> TierSettings:
    """
    The settings of ``tier``'s DAG: the overridden schedule, else ``default``, else the tier's delay.

    A timedelta floored at ``min_schedule``.
    """
    schedule = override.get(
        "schedule", default if default is not None else timedelta(milliseconds=tier.delay_ms)
    )
    schedule = floor_schedule(tier.topic, schedule, min_schedule)
    max_run = override.get("max_run")
    return TierSettings(
        schedule=schedule,
        window=override.get("window"),
        timezone=override.get("timezone"),
        max_run=_max_run(tier.topic, max_run) if max_run is not None else None,
        pool=override.get("pool"),
    )


def floor_schedule(topic: str, schedule: Any, min_schedule: timedelta) -> Any:
    """A ``timedelta`` schedule shorter than ``min_schedule`` is raised to it, with a warning."""
    if isinstance(schedule, timedelta) and schedule < min_schedule:
        log.warning(
            "tier %s: schedule %s is shorter than min_schedule %s; scheduling it every %s "
            "(the due check still keeps every record until its due time)",
            topic,
            schedule,
            min_schedule,
            min_schedule,
        )
        return min_schedule
    return schedule


def _check_timezone(tier: str, value: object) -> None:
    if not isinstance(value, str):
        raise TierOverrideError(tier, "timezone", f"must be an IANA time zone name, got {value!r}")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise TierOverrideError(
            tier, "timezone", f"{value!r} is not a known IANA time zone (e.g. 'Europe/Berlin', 'UTC')"
        ) from None


def check_schedule(tier: str, value: object, timezone: str | None) -> None:
    if isinstance(value, timedelta):
        if value <= timedelta(0):
            raise TierOverrideError(tier, "schedule", f"a timedelta schedule must be positive, got {value!r}")
        return
    if isinstance(value, str):
        from airflow.sdk import CronTriggerTimetable

        try:
            CronTriggerTimetable(value, timezone=timezone or "UTC").validate()
        except Exception as exc:  # Airflow raises several types for a bad cron expression
            raise TierOverrideError(
                tier, "schedule", f"{value!r} is not a valid cron expression: {exc}"
            ) from None
        return
    if _is_timetable(value):
        return
    raise TierOverrideError(
        tier, "schedule", f"must be a cron string, a timedelta or a timetable, got {value!r}"
    )


def _is_timetable(value: object) -> bool:
    from airflow.sdk.bases.timetable import BaseTimetable

    if isinstance(value, BaseTimetable):
        return True
    try:
        from airflow.timetables.base import Timetable
    except ImportError:  # pragma: no cover - the Task SDK without Airflow core
        return False
    return isinstance(value, Timetable)


def _check_window(tier: str, value: object, timezone: str | None) -> None:
    from airflow_kafka_retry.policy.timing.windows import ReprocessWindow

    if not isinstance(value, str):
        raise TierOverrideError(tier, "window", f"must be 'HH:MM-HH:MM', got {value!r}")
    try:
        ReprocessWindow.parse(value, timezone)
    except ValueError as exc:
        raise TierOverrideError(tier, "window", str(exc)) from None


def _max_run(tier: str, value: object) -> timedelta:
    try:
        ms = duration_ms(value)
    except ValueError as exc:
        raise TierOverrideError(tier, "max_run", str(exc)) from None
    if ms <= 0:
        raise TierOverrideError(tier, "max_run", f"must be a positive duration, got {value!r}")
    return timedelta(milliseconds=ms)
