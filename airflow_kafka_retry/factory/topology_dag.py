"""
A topology as one DAG: ``build_retry_dags``' default layout in event mode.

The DAG ``kafka_retry__<main topic>`` is scheduled on the topology's asset, whose one watcher
(``TopologyDueEventTrigger``) watches every tier and the DLTs, or on the weekly sweep. Its tasks are
all roots, which the watcher's event starts at once, with no task in between:

    ensure_topics, main, retry_1, retry_2, ..., watch_dlt

Each one's ``pre_execute`` hook is the lanes' gate (``operators/lane_gate.py``): the task runs when the
run's event names its lane and skips itself otherwise, before it opens any Kafka client.

A tier's task is the same reprocess operator a tier DAG has; each task runs one at a time
(``max_active_tis_per_dag=1``: a tier never drains twice at once), while runs of the DAG overlap, so a
wave of retry-1 does not wait for a long retry-2 drain. ``ensure_topics`` creates the topology's
missing topics: the watcher names it when it finds them missing, and every run no event started (the
sweep, a manual run) runs it. This only assembles; the factory checks the arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.factory.dag_builders import (
    SETUP_TASK_ID,
    WATCH_TASK_ID,
    factory_dag,
    reprocess_task,
    setup_task,
)
from airflow_kafka_retry.policy.headers.codec import MAX_BACKOFF_MS
from airflow_kafka_retry.policy.timing.durations import format_duration_ms

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from airflow_kafka_retry.factory.connections import RoleConnections
    from airflow_kafka_retry.factory.events import EventSettings
    from airflow_kafka_retry.factory.overrides import TierSettings
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

#: Runs of a topology DAG that may be active at once (each of its tasks runs one at a time): enough
#: for every lane to have a run going while a slow one drains; events beyond it wait in Airflow's queue.
DEFAULT_ACTIVE_RUNS = 8


def lane_id(tier: Tier) -> str:
    """The task id of a tier in a topology DAG: ``main`` (tier 0), ``retry_<n>``."""
    return "main" if tier.index == 0 else f"retry_{tier.index}"


def topology_lanes(
    topology: Topology, tiers: Sequence[Tier], settings: Mapping[str, TierSettings], *, dlt_watch: bool
) -> list[dict[str, Any]]:
    """What the topology's watcher watches: a lane per tier (its group, window), then the DLTs."""
    from airflow_kafka_retry.operators.dlt_watch import WATCH_GROUP_TEMPLATE, watched_topics

    lanes: list[dict[str, Any]] = []
    for tier in tiers:
        tier_settings = settings[tier.topic]
        lane: dict[str, Any] = {
            "name": lane_id(tier),
            "topics": [tier.topic],
            "group": topology.consumer_group(tier),
            "due_horizon_ms": MAX_BACKOFF_MS + tier.delay_ms,
            "tier_index": tier.index,
        }
        if tier_settings.window:
            lane.update(window=tier_settings.window, timezone=tier_settings.timezone)
        if tier.index == 0 and topology.input is not None:
            # another framework's DLQ, created by it at its first dead letter (never by the setup task):
            # watched once it exists, not a missing topic that fires the setup task
            lane["optional_topics"] = [tier.topic]
        if tier.index == 0 and topology.hold_topic is not None:
            # ordering: key: a tier's mark (or a release) in the hold topic starts the keeper; the keeper
            # commits the hold topic in main's group, and a hold record carries no due time: due at once
            lane["topics"] = [tier.topic, topology.hold_topic]
            lane["order_state_topic"] = topology.order_state_topic  # its key-order gauges
        lanes.append(lane)
    topics, optional = watched_topics(topology)
    if dlt_watch and topics:
        lanes.append(
            {
                "name": WATCH_TASK_ID,
                "topics": topics,
                # watched once they exist: the parking topic (the setup task creates it), the other
                # frameworks' queues the topology names (their frameworks create them)
                "optional_topics": optional,
                "group": WATCH_GROUP_TEMPLATE.format(group_id=topology.group_id),
                "read_due": False,
            }
        )
    return lanes


def retry_path(topology: Topology, tiers: Sequence[Tier]) -> str:
    """The DAG's documentation: the retry path, tier by tier, and which task drains each."""
    rows = ["| task | topic | delay |", "|---|---|---|"]
    for tier in tiers:
        delay = format_duration_ms(tier.delay_ms) if tier.index else _tier0(topology)
        rows.append(f"| `{lane_id(tier)}` | `{tier.topic}` | {delay} |")
    dlts = ", ".join(f"`{t.topic}`" for t in topology.dlt_tiers) or "none (no_dlt)"
    return (
        f"Retry path of `{topology.topic}` ({Path(topology.source).name}): each task drains its tier "
        f"when the topology's watcher finds its records due; dead letters go to {dlts}.\n\n" + "\n".join(rows)
    )


def _tier0(topology: Topology) -> str:
    if topology.input is None:
        return "none (the service's topic)"
    return f"none (the {topology.input.family} dead-letter queue the topology takes as its input)"


def topology_dag(
    path: str,
    topology: Topology,
    tiers: Sequence[Tier],
    settings: Mapping[str, TierSettings],
    *,
    dag_id: str,
    sweep: Any,
    dlt_watch: bool,
    events: EventSettings,
    roles: RoleConnections,
    dag_kwargs: Mapping[str, Any],
    **reprocess: Any,
) -> DAG:
    """
    The topology's one DAG; ``reprocess`` holds what every tier's reprocess task takes.

    (``engine``, ``handler``, ``kafka_conn_id`` (the ``tiers`` role's), ``value_deserializer``,
    ``on_dlt``, ``options``, ``spark_conn_id``, ``asset_server``.) ``ensure_topics`` and ``watch_dlt``
    get their roles' connections. Every task's ``pre_execute`` is the lanes' gate, which reads no Kafka.
    """
    from airflow.sdk import Asset

    from airflow_kafka_retry.operators.dlt_watch import DltWatchOperator
    from airflow_kafka_retry.operators.lane_gate import LaneGate

    kwargs = dict(dag_kwargs)
    active_runs = kwargs.pop("max_active_runs", DEFAULT_ACTIVE_RUNS)
    kwargs.setdefault("doc_md", retry_path(topology, tiers))
    lanes = topology_lanes(topology, tiers, settings, dlt_watch=dlt_watch)
    watched = events.topology_asset(
        topology.topic,
        lanes,
        dag_id=dag_id,
        setup_task=SETUP_TASK_ID,
        follow=reprocess["engine"] != "spark",  # the Spark engine drains once per run
    )
    description = f"Kafka retry: the retry path of {topology.topic} ({len(tiers)} tier(s))"
    with factory_dag(dag_id, sweep, description, kwargs, watched=watched, max_active_runs=active_runs) as dag:
        gate = LaneGate(
            lanes=[SETUP_TASK_ID, *(lane["name"] for lane in lanes)],
            setup_task=SETUP_TASK_ID,
            watched_asset=watched.uri,
            then=dict(kwargs.get("default_args") or {}).get("pre_execute"),
        )

        def gated() -> dict[str, Any]:
            """What every task of the DAG takes: one at a time over the runs, the gate, its inlet."""
            # the inlet is a reference, what the gate may read the asset state store of: an Asset of the
            # same name without the watcher would replace the DAG's asset and its watcher when the DAG
            # processor collects the DAG's assets (seen: 0 watchers ran)
            return {"max_active_tis_per_dag": 1, "pre_execute": gate, "inlets": [Asset.ref(name=watched.uri)]}

        setup_task(path, roles.setup, kwargs, **gated())
        for tier in tiers:
            reprocess_task(
                lane_id(tier), path, tier, settings[tier.topic], events=events, **reprocess, **gated()
            )
        if any(lane["name"] == WATCH_TASK_ID for lane in lanes):
            DltWatchOperator(
                task_id=WATCH_TASK_ID,
                topology=path,
                kafka_conn_id=roles.dlt_watch,
                on_dlt=reprocess["on_dlt"],
                skip_missing_topics=True,
                **gated(),
            )
    return dag
