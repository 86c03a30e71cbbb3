"""
The lanes of a topology's watcher: what each is, how they are checked, what a run's events say of them.

A *lane* is one thing ``TopologyDueEventTrigger`` watches and one task of the topology DAG: a retry
tier (or the main topic) with the tier's group, or the DLTs with the watch group. Its serialized form is
a plain mapping (``LANE_KEYS``). The lanes' gate (``operators/lane_gate.py``) reads the events through
:func:`due_lanes` and :func:`stranded_lanes`, the reprocess operators through :func:`event_payloads`;
nothing here opens a Kafka client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.policy.timing.windows import ReprocessWindow
from airflow_kafka_retry.triggers.broker_calls import BrokerCalls
from airflow_kafka_retry.triggers.check_pace import CheckPace
from airflow_kafka_retry.triggers.tier_events import STATE_KEY

if TYPE_CHECKING:
    import asyncio

    from airflow_kafka_retry.engine.heads.head_watch import HeadWatch
    from airflow_kafka_retry.policy.timing.waves import Wave

#: Kind of the topology trigger's events (``payload["kind"]``).
TOPOLOGY_DUE = "topology_due"
#: The lanes that are not tiers' retry topics: the main topic's (its service drains it) and the DLTs'.
MAIN_LANE, WATCH_LANE = "main", "watch_dlt"
#: The asset state store key of the lanes the last watcher watched (how a change of lanes is noticed).
LANES_KEY = "kafka_retry_lanes"
#: What a lane's serialized form holds (``lanes`` argument); all but ``name``, ``topics`` and ``group``
#: are optional.
LANE_KEYS = frozenset(
    {"name", "topics", "group", "read_due", "optional_topics", "window", "timezone"}
    | {"due_horizon_ms", "tier_index", "order_state_topic"}
)


@dataclass
class Lane:
    """A watched lane: its settings (serialized) and what the trigger knows of it while it runs."""

    spec: Mapping[str, Any]
    window: ReprocessWindow | None
    watch: HeadWatch | None = None
    wave: Wave | None = None
    next_gauges: int = 0
    retry_at: int = 0
    failures: int = 0
    last_move_ms: int = 0  # when its group's committed offsets last moved
    # when it next reads its group's committed offsets (the trigger gives its timing; none: a lane only named)
    pace: CheckPace = field(default_factory=lambda: CheckPace(0, 0, 0, 0, 0))
    check: asyncio.Future[None] | None = None  # its broker calls in flight (TopologyDueEventTrigger._check)
    calls: BrokerCalls = field(init=False)  # each in a thread of its own, with a deadline

    def __post_init__(self) -> None:
        self.calls = BrokerCalls(self.where)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def state_key(self) -> str:
        return f"{STATE_KEY}:{self.name}"

    @property
    def where(self) -> str:
        return f"{self.name}: {', '.join(self.spec['topics'])} (group {self.spec['group']})"


def check_lanes(lanes: Sequence[Mapping[str, Any]] | str) -> list[dict[str, Any]]:
    """The lanes as plain dicts (given so, or as JSON); a ValueError names the lane and what is wrong."""
    if isinstance(lanes, str):
        try:
            lanes = json.loads(lanes)
        except ValueError as exc:
            raise ValueError(f"TopologyDueEventTrigger: lanes are not valid JSON: {exc}") from None
    if not lanes or not isinstance(lanes, list | tuple):
        raise ValueError("TopologyDueEventTrigger needs at least one lane")
    checked, names = [], set()
    for index, lane in enumerate(lanes):
        if not isinstance(lane, Mapping):
            raise ValueError(f"TopologyDueEventTrigger: lane {index} must be a mapping, got {lane!r}")
        unknown = set(lane) - LANE_KEYS
        if unknown:
            raise ValueError(f"TopologyDueEventTrigger: lane {index} has unknown key(s) {sorted(unknown)}")
        name, topics, group = lane.get("name"), lane.get("topics"), lane.get("group")
        if not isinstance(name, str) or not name or name in names:
            raise ValueError(f"TopologyDueEventTrigger: lane {index} needs a unique name, got {name!r}")
        if (
            not topics
            or isinstance(topics, str)  # a name, not a list: it would be watched as a topic per letter
            or not all(isinstance(t, str) and t for t in topics)
            or not isinstance(group, str)
        ):
            raise ValueError(f"TopologyDueEventTrigger: lane {name!r} needs topics and a group")
        if not set(lane.get("optional_topics") or ()) <= set(topics):
            raise ValueError(
                f"TopologyDueEventTrigger: lane {name!r}: optional_topics must be among its topics"
            )
        names.add(name)
        checked.append(dict(lane))
    return checked


def lane_window(lane: Mapping[str, Any]) -> ReprocessWindow | None:
    window = lane.get("window")
    return ReprocessWindow.parse(window, lane.get("timezone")) if window else None


def due_lanes(events: Mapping[str, Sequence[Any]] | None) -> set[str] | None:
    """
    The lanes (task ids) the topology events of a run's ``triggering_asset_events`` name; None: no such event.

    A run created from several queued events runs the lanes of all of them.
    """
    due: set[str] | None = None
    for payload in event_payloads(events, TOPOLOGY_DUE):
        due = (due or set()) | {str(name) for name in payload.get("due") or ()}
    return due


def stranded_lanes(events: Mapping[str, Sequence[Any]] | None, saved: Mapping[str, Wave | None]) -> set[str]:
    """
    The lanes whose saved wave was fired after every topology event of a run: events the run did not get.

    Airflow 3.3's scheduler queues a DAG's run on an asset once (``asset_dag_run_queue``, ``ON CONFLICT DO
    NOTHING``), creates it with the events up to when the queue row was made, and deletes the row: an
    event of the same asset that came in between (a second lane fired while the run was being created)
    is consumed by no run until the asset's next event (apache/airflow#70970, fixed upstream by #70972).
    The trigger saves each lane's wave before its event, so the lanes' gate finds such a lane in the
    asset state store: its wave is newer than the newest event the run got. (A wave fired just after the
    run was created has its own run too; its second task finds little or nothing due.)
    ``saved``: each lane's saved wave (None: none).
    """
    newest = None
    for payload in event_payloads(events, TOPOLOGY_DUE):
        times = [payload.get("fired_ms")] + [
            part.get("fired_ms")
            for part in (payload.get("lanes") or {}).values()
            if isinstance(part, Mapping)
        ]
        for at in times:
            if isinstance(at, int) and not isinstance(at, bool) and (newest is None or at > newest):
                newest = at
    if newest is None:
        return set()
    return {name for name, wave in saved.items() if wave is not None and wave.fired_ms > newest}


def event_payloads(events: Mapping[str, Sequence[Any]] | None, kind: str) -> list[Mapping[str, Any]]:
    """The payloads of one ``kind`` of watcher event among a run's ``triggering_asset_events``."""
    found = []
    for listed in (events or {}).values():
        for event in listed:
            extra = getattr(event, "extra", None)
            payload = extra.get("payload") if isinstance(extra, Mapping) else None
            if isinstance(payload, Mapping) and payload.get("kind") == kind:
                found.append(payload)
    return found


def lane_changes(before: Any, lanes: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """
    The lanes added since the last watcher of the topology (names), and those removed (their mappings).

    A lane whose topics or group changed under the same name (a Spring preset's delay-named topic after a
    change of delays) counts as both: its old topic is left to no task, as a removed tier's is.
    ``before``: what :func:`lanes_state` saved (anything else: no earlier watcher, nothing to compare).
    """
    if not isinstance(before, Mapping) or not isinstance(before.get("lanes"), list):
        return [], []
    old = [dict(lane) for lane in before["lanes"] if isinstance(lane, Mapping)]
    now = lanes_state(lanes)["lanes"]
    added = [str(lane["name"]) for lane in now if lane not in old]
    removed = [lane for lane in old if lane not in now]
    return added, removed


def lanes_state(lanes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What is saved of the lanes: name, topics and group of each (no setting that can change freely)."""
    return {"lanes": [{k: lane[k] for k in ("name", "topics", "group")} for lane in lanes]}
