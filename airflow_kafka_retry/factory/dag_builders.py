"""
Each kind of DAG ``build_retry_dags`` makes, built on its own.

A retry tier's DAG (event mode: one ``reprocess`` task, scheduled on the tier's due asset or its sweep;
schedule mode: ``ensure_topics`` >> ``wait_for_due`` >> ``reprocess``), the DLT-watch DAG and the
event mode's ``@once`` setup DAG, with the DAG arguments every one of them shares. The factory
checks its arguments and settles each DAG's id, schedule and settings; this only assembles.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import DAG

from airflow_kafka_retry.factory.events import EventSettings, sweep_schedule
from airflow_kafka_retry.operators.reprocess_arguments import CUTOFF_NOW

if TYPE_CHECKING:
    from airflow.sdk import Asset, BaseOperator

    from airflow_kafka_retry.factory.connections import RoleConnections
    from airflow_kafka_retry.factory.overrides import TierSettings
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

DEFAULT_START_DATE = datetime(2024, 1, 1, tzinfo=UTC)
#: Schedule mode: the reprocess task drains what is due when it starts (epoch ms, rendered at run time):
#: the due sensor before it may have waited past the run's logical date for the earliest due record.
CUTOFF_RENDERED_NOW = "{{ (macros.time.time() * 1000) | int }}"
TASK_IDS = ("ensure_topics", "wait_for_due", "reprocess")
WATCH_TASK_ID = "watch_dlt"
SETUP_TASK_ID = "ensure_topics"
#: The setup DAG runs once, so its task retries at least this often (a broker or api-server not up yet).
SETUP_RETRIES = 3
SETUP_RETRY_DELAY = timedelta(seconds=20)


def factory_dag(
    dag_id: str,
    schedule: Any,
    description: str,
    dag_kwargs: Mapping[str, Any],
    *,
    timezone_name: str | None = None,
    watched: Asset | None = None,
    max_active_runs: int = 1,
) -> DAG:
    """A DAG of the factory; with ``watched``, scheduled on that asset or ``schedule`` (a sweep)."""
    kwargs = dict(dag_kwargs)
    if watched is None:  # an event-driven DAG has none, so its sweep's last tick is not run when deployed
        kwargs.setdefault("start_date", DEFAULT_START_DATE)
    kwargs.setdefault("catchup", False)
    kwargs["max_active_runs"] = max_active_runs
    kwargs.setdefault("description", description)
    kwargs["tags"] = sorted({*kwargs.get("tags", ()), "kafka-retry"})
    if isinstance(schedule, str) and schedule != "@once":
        from airflow.sdk import CronTriggerTimetable

        # run_immediately=0: Airflow's default (False) still runs a tick that passed within a tenth of the
        # period (16.8 h for a weekly sweep) when a DAG without a start date is first deployed
        schedule = CronTriggerTimetable(
            schedule, timezone=timezone_name or "UTC", run_immediately=timedelta(0)
        )
    if watched is not None:
        schedule = sweep_schedule(watched, schedule)
    return DAG(dag_id=dag_id, schedule=schedule, **kwargs)


def tier_dag(
    path: str,
    topology: Topology,
    tier: Tier,
    settings: TierSettings,
    *,
    dag_id: str,
    events: EventSettings | None,
    roles: RoleConnections,
    dag_kwargs: Mapping[str, Any],
    **reprocess: Any,
) -> DAG:
    """
    One retry tier's DAG (or the main topic's): ``reprocess``, in schedule mode after its checks.

    ``reprocess``: what the tier's reprocess task takes (:func:`reprocess_task`'s keyword arguments, its
    ``kafka_conn_id`` the ``tiers`` role's). Schedule mode's ``ensure_topics`` gets the ``setup`` role's
    connection; its ``wait_for_due`` watches the tier as the watchers do, with the ``watcher`` role's.
    """
    what = "main topic" if tier.kind == "main" else f"retry tier {tier.index}"
    description = f"Kafka retry: drain due records of {tier.topic} ({what} of {topology.topic})"
    watched = None
    if events is not None:
        watched = events.tier_asset(
            tier.topic,
            topology.consumer_group(tier),
            dag_id=dag_id,
            window=settings.window,
            timezone=settings.timezone,
            delay_ms=tier.delay_ms,
            topology_topic=topology.topic,
            tier_index=tier.index,
        )
    with factory_dag(
        dag_id, settings.schedule, description, dag_kwargs, timezone_name=settings.timezone, watched=watched
    ) as dag:
        drain = reprocess_task("reprocess", path, tier, settings, events=events, **reprocess)
        if events is None:
            from airflow_kafka_retry.operators.ensure_topics import EnsureRetryTopicsOperator
            from airflow_kafka_retry.sensors.tier_due import RetryTierDueSensor

            ensure = EnsureRetryTopicsOperator(
                task_id="ensure_topics", topology=path, kafka_conn_id=roles.setup
            )
            wait = RetryTierDueSensor(
                task_id="wait_for_due",
                topology=path,
                tier=tier.index,
                kafka_conn_id=roles.watcher,
                window=settings.window,
                timezone=settings.timezone,
                max_wait=settings.interval,
                deferrable=True,
            )
            ensure >> wait >> drain
    return dag


def reprocess_task(
    task_id: str,
    path: str,
    tier: Tier,
    settings: TierSettings,
    *,
    engine: str,
    handler: str,
    kafka_conn_id: str,
    value_deserializer: str | None,
    on_dlt: tuple,
    options: Any,
    spark_conn_id: str,
    asset_server: str | None,
    events: EventSettings | None,
    **task_kwargs: Any,
) -> BaseOperator:
    """The task that drains one tier (local engine in the worker, or Spark), in the DAG being built."""
    common: dict[str, Any] = {
        "task_id": task_id,
        "topology": path,
        "tier": tier.index,
        "handler": handler,
        "value_deserializer": value_deserializer,
        "kafka_conn_id": kafka_conn_id,
        "options": options,
        "cutoff": CUTOFF_NOW if events is not None else CUTOFF_RENDERED_NOW,
        **task_kwargs,
    }
    optional = {
        "on_dlt": on_dlt,
        "window": settings.window,
        "timezone": settings.timezone,
        "max_run": settings.max_run,
        "asset_server": asset_server,
        "skip_missing_topic": events is not None,
        "pool": settings.pool,
    }
    common.update({k: v for k, v in optional.items() if v})  # unset: the operator's own default
    if engine == "spark":
        from airflow_kafka_retry.operators.spark_reprocess import SparkReprocessTierOperator

        return SparkReprocessTierOperator(conn_id=spark_conn_id, **common)
    from airflow_kafka_retry.operators.reprocess import ReprocessTierOperator

    follow = events.follow if events is not None else None
    return ReprocessTierOperator(**common, follow=follow or None)


def watch_dag(
    path: str,
    topology: Topology,
    *,
    dag_id: str,
    schedule: Any,
    kafka_conn_id: str,
    on_dlt: tuple,
    events: EventSettings | None,
    dag_kwargs: Mapping[str, Any],
) -> DAG:
    """The DLT-watch DAG: one ``watch_dlt`` task over every DLT of the topology."""
    from airflow_kafka_retry.operators.dlt_watch import WATCH_GROUP_TEMPLATE, DltWatchOperator, watched_topics

    # the event watcher watches the parking topic (the setup DAG creates it) and the named queues too,
    # once they exist
    topics, optional = watched_topics(topology)
    dlts = [t for t in topics if t not in optional]
    named = ", ".join([*dlts, *topology.dead_letter_queue_topics])
    description = f"Kafka retry: report new dead-lettered records of {topology.topic} ({named})"
    watched = None
    if events is not None:
        watched = events.dlt_asset(
            topology.topic,
            dlts,
            WATCH_GROUP_TEMPLATE.format(group_id=topology.group_id),
            dag_id=dag_id,
            optional=optional,
        )
    with factory_dag(dag_id, schedule, description, dag_kwargs, watched=watched) as dag:
        DltWatchOperator(
            task_id=WATCH_TASK_ID,
            topology=path,
            kafka_conn_id=kafka_conn_id,
            on_dlt=on_dlt,
            skip_missing_topics=events is not None,
        )
    return dag


def setup_dag(
    path: str, topology: Topology, *, dag_id: str, kafka_conn_id: str, dag_kwargs: Mapping[str, Any]
) -> DAG:
    """Event mode: create the topology's missing topics once (the tier DAGs do not at every run)."""
    description = f"Kafka retry: create the missing topics of {topology.topic}'s retry path (runs once)"
    with factory_dag(dag_id, "@once", description, dag_kwargs) as dag:
        setup_task(path, kafka_conn_id, dag_kwargs)
    return dag


def setup_task(
    path: str, kafka_conn_id: str, dag_kwargs: Mapping[str, Any], **task_kwargs: Any
) -> BaseOperator:
    """
    The task ``ensure_topics``, in the DAG being built: it creates the topology's missing topics.

    It runs rarely (once, or when the watcher finds topics missing), so it gets retries of its own,
    at least ``SETUP_RETRIES`` (creating missing topics is idempotent).
    """
    from airflow_kafka_retry.operators.ensure_topics import EnsureRetryTopicsOperator

    retries = max(SETUP_RETRIES, dict(dag_kwargs.get("default_args") or {}).get("retries") or 0)
    return EnsureRetryTopicsOperator(
        task_id=SETUP_TASK_ID,
        topology=path,
        kafka_conn_id=kafka_conn_id,
        retries=retries,
        retry_delay=SETUP_RETRY_DELAY,
        **task_kwargs,
    )
