"""
``build_retry_dags``: the DAGs of a retry topology -- one for the whole topology, or one per tier.

It only assembles the operators. Event mode (the default) builds one DAG per topology
(``topology_dag.py``): one watcher for all its tiers, a task per tier. With ``layout="tiers"``,
each tier DAG is scheduled on its tier's "due" asset, whose watcher (``TierDueEventTrigger``, in the
triggerer) fires when records are due, or by a slow safety sweep; it has one ``reprocess`` task;
the topics are created once by an ``@once`` setup DAG. Schedule mode (tier DAGs only):
``ensure_topics`` >> ``wait_for_due`` >> ``reprocess`` every tier delay. ``watch_dlt`` reports new
dead letters (event-driven the same way in event mode). Where a record goes is decided by the policy
package, offsets are committed by the engine; nothing here touches Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.factory.connections import RoleConnections, role_connections
from airflow_kafka_retry.factory.dag_builders import setup_dag, tier_dag, watch_dag
from airflow_kafka_retry.factory.events import (
    DEFAULT_FIRE_AHEAD,
    DEFAULT_FOLLOW,
    DEFAULT_REFIRE_AFTER,
    EventSettings,
    check_sweep,
)
from airflow_kafka_retry.factory.input_lane import includes_main, tasks_handler
from airflow_kafka_retry.factory.overrides import (
    TierOverrideError,
    check_overrides,
    floor_schedule,
    tier_settings,
)
from airflow_kafka_retry.factory.redrive_dag import redrive_dags
from airflow_kafka_retry.factory.topology_dag import topology_dag
from airflow_kafka_retry.notifications.dispatch import normalize_notifiers
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.policy.topology.model import Tier, Topology

if TYPE_CHECKING:
    from airflow.sdk import DAG

log = logging.getLogger(__name__)

ENGINES = ("local", "spark")
TRIGGERS = ("event", "schedule")
#: ``topology``: one DAG per topology (event mode's default); ``tiers``: a DAG per tier (schedule mode).
LAYOUTS = ("topology", "tiers")
#: Event mode: the setup DAG's id, ``dag_id_template`` formatted with the main topic, plus this.
SETUP_SUFFIX = "__ensure_topics"
#: How ``build_retry_dags`` names a DAG unless told otherwise (``{topic}``: the topology's or the tier's).
DEFAULT_DAG_ID_TEMPLATE = "kafka_retry__{topic}"
#: DAG arguments the factory sets itself; each has its own parameter (or override) instead.
_OWNED = {
    "dag_id": "dag_id_template",
    "schedule": "sweep= (or, with layout='tiers', tier_overrides={topic: {'schedule': ...}})",
}


def build_retry_dags(
    topology: str | Path | Topology,
    *,
    handler: str | None = None,
    engine: str = "local",
    kafka_conn_id: str = "kafka_default",
    conn_ids: Mapping[str, str] | None = None,
    value_deserializer: str | None = None,
    on_dlt: Callable[..., Any] | Sequence[Callable[..., Any]] | None = (),
    options: Mapping[str, Any] | None = None,
    dag_id_template: str = DEFAULT_DAG_ID_TEMPLATE,
    include_main: bool | None = None,
    dlt_watch: bool = True,
    spark_conn_id: str = "spark_default",
    tier_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    min_schedule: timedelta = timedelta(seconds=30),
    asset_server: str | None = None,
    trigger: str = "event",
    sweep: Any = None,
    fire_ahead: timedelta = DEFAULT_FIRE_AHEAD,
    refire_after: timedelta = DEFAULT_REFIRE_AFTER,
    follow: timedelta | None = DEFAULT_FOLLOW,
    layout: str | None = None,
    **dag_kwargs: Any,
) -> dict[str, DAG]:
    """
    Build the DAGs that run a retry topology on Airflow; a DAG file does ``globals().update(...)``.

    ``layout="topology"`` (the default in event mode): **one DAG** for the whole topology, id
    ``dag_id_template`` formatted with the main topic, with a task per tier (``main`` with
    ``include_main``, ``retry_1``, ``retry_2``...), ``watch_dlt`` and ``ensure_topics``, all roots: the
    topology's one watcher's event starts them at once, and each one's gate runs it when the event names
    its lane and skips it otherwise (``factory/topology_dag.py``, ``operators/lane_gate.py``). Each task
    runs one at a time; runs overlap (``max_active_runs``, 8
    by default). ``tier_overrides`` take no ``schedule`` there (the DAG has one: ``sweep``).

    ``layout="tiers"`` (schedule mode's only layout): one DAG per retry topic (a topic shared by
    same-interval reuse gets one DAG), ``max_active_runs=1``,
    no catchup. ``include_main`` adds a DAG for the main topic (tier 0); ``dlt_watch`` adds a DAG with
    one ``watch_dlt`` task that reports new DLT records to ``on_dlt``.

    A topology with ``redrive`` policies also gets the DAG ``<topology DAG id>__redrive``, in either layout:
    a task per policy, each round on its ``every`` (``factory/redrive_dag.py``, docs/redrive.md).

    ``trigger="event"`` (default): a tier DAG runs when its records are due. It is scheduled on the
    tier's due asset (``kafka-retry-due://<kafka_conn_id>/<topic>``), watched in the triggerer by a
    ``TierDueEventTrigger`` that fires ``fire_ahead`` before the first record is due, or every
    ``sweep`` (``AssetOrTimeSchedule``); its one task ``reprocess`` waits for the wave, then drains
    what is due. An idle tier creates no DAG run. The DLT-watch DAG runs when a dead letter arrives
    (``DltArrivalEventTrigger``) or every ``sweep``. Topics are created once, by the ``@once`` DAG
    ``<dag_id_template formatted with the main topic>__ensure_topics`` (or ``airflow-kafka-retry
    topology create-topics``); until then a run fails naming the missing topic. Needs a running
    triggerer.

    ``trigger="schedule"``: each tier DAG runs every tier delay with the tasks ``ensure_topics`` (create
    missing retry/DLT topics) >> ``wait_for_due`` (deferrable; skips an idle tier) >> ``reprocess``
    (local engine in the worker, or Spark); the DLT watch as often as the fastest tier.

    :param topology: path of the topology YAML (read by every task, and by the Spark driver), or a
        ``Topology`` loaded from such a file.
    :param handler: the handler, ``package.module:function``; required, except under ``on_due: redeliver``,
        where none runs and giving one is an error (``factory/input_lane.py``).
    :param engine: ``local`` (``ReprocessTierOperator``) or ``spark`` (``SparkReprocessTierOperator``).
    :param kafka_conn_id: the Kafka connection of every task and watcher that ``conn_ids`` gives none;
        it also keys the watched assets' URIs (``kafka-retry-topology://<kafka_conn_id>/<main topic>``...),
        whatever ``conn_ids`` says.
    :param conn_ids: a connection id per role, for a principal per role on a secured broker
        (``factory/connections.py``, docs/security.md): ``setup`` (``ensure_topics``), ``tiers`` (the
        tier tasks; with Spark, what spark-submit gets), ``dlt_watch`` (``watch_dlt``), ``watcher`` (the
        triggerer's watchers; schedule mode's ``wait_for_due``), ``replay`` (the redrive DAG's tasks). A
        role not given uses ``kafka_conn_id``; another key is an error naming the roles.
    :param value_deserializer: ``package.module:function`` decoding record values.
    :param on_dlt: notifiers (``BaseNotifier`` instances or callables ``f(context)``) called when a run
        dead-letters records, and by the DLT watch.
    :param options: further ``DrainOptions`` (``batch_size``, ``chunk_size``...) of every reprocess task.
    :param dag_id_template: formatted with ``topic``: the topology DAG's id (with the main topic), or with
        ``layout="tiers"`` each tier DAG's id (with the tier's topic).
    :param include_main: also drain the main topic (tier 0) with the service's group: the task ``main``
        (with ``layout="tiers"``, a DAG of its own). None (default): only when the topology has an
        ``input`` (tier 0 is then that DLQ, whose drain feeds the tiers) or ``ordering: key`` (its
        ``main`` holds a key's records behind the one in retry, docs/ordering.md); False is an error there.
    :param dlt_watch: also report every new DLT record, also those a tier run already reported to
        ``on_dlt``: the task ``watch_dlt`` (with ``layout="tiers"``, a DAG whose id is the template
        formatted with the DLT topic).
    :param spark_conn_id: the Spark connection, with ``engine="spark"``.
    :param tier_overrides: per-tier ``schedule`` (cron string, timedelta or timetable; in event mode the
        tier's sweep), ``window`` (``HH:MM-HH:MM``; in event mode the trigger holds a wave until the
        window opens), ``timezone`` (of the window and a cron schedule), ``max_run`` and ``pool`` (the
        Airflow pool of the tier's task); keyed by topic name. The DLT-watch DAG's key (its DLT topic)
        takes only ``schedule``; the topology layout takes no ``schedule``.
    :param min_schedule: a shorter ``timedelta`` schedule (or sweep) is raised to this, with a warning;
        records are still never handled before their due time.
    :param asset_server: one ``host:port`` of the cluster: the reprocess tasks then declare the next
        tier and the DLTs as asset outlets (``kafka://<server>/<topic>``) and emit events with the
        record counts; None: no asset outlets.
    :param trigger: ``event`` (default) or ``schedule``, see above.
    :param sweep: event mode: how often each DAG also runs without an event (timedelta, cron string or
        timetable), a safety net for a watcher that does not run (no triggerer); default weekly, each DAG
        of the topology on its own day (an idle topology creates at most one run a day), at a time of day
        derived from the DAG id (``factory/events.py``).
    :param fire_ahead: event mode: a wave fires this long before its first record is due (at most 30 s);
        the run waits for the due time, so Airflow's start-up is not added to the records' lateness.
    :param refire_after: event mode: a wave the tier group has not committed past this long after it
        became runnable (its event lost with a crashed triggerer, a run that failed, was lost or never
        started) fires again; default 45 s: with a run's start-up, such a fault adds at most 60 s. A
        run whose first chunk takes longer gets one duplicate event per ``refire_after`` (a short run
        once it ends).
    :param follow: event mode, local engine: a run whose next record is due within this long waits for it
        and drains on (``engine/drain/follow.py``), so a steady stream of due records is one run, not a run
        per wave; None: one drain per run.
    :param layout: ``topology`` (one DAG; event mode only, its default) or ``tiers`` (a DAG per tier,
        the DLT watch and the setup; schedule mode's default). ``ordering: key`` needs ``topology``: its
        watcher's lane ``main`` also watches the hold topic, so a tier's mark starts ``main``.
    :param dag_kwargs: passed to every ``DAG`` (``default_args``, ``tags``, ``start_date``, ...).
    """
    path, loaded = _topology(topology)
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if "{topic}" not in dag_id_template:
        raise ValueError(f"dag_id_template must contain '{{topic}}', got {dag_id_template!r}")
    for key, instead in _OWNED.items():
        if key in dag_kwargs:
            raise ValueError(f"build_retry_dags sets {key} of each DAG itself; use {instead}")
    if trigger not in TRIGGERS:
        raise ValueError(f"trigger must be one of {', '.join(TRIGGERS)}, got {trigger!r}")
    layout = layout if layout is not None else ("topology" if trigger == "event" else "tiers")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if layout == "tiers" and loaded.ordering == "key":
        raise TopologyError(
            f"ordering: key needs layout='topology' (trigger='event'), got layout='tiers' (trigger="
            f"{trigger!r}): a mark a tier writes to {loaded.hold_topic!r} must start the task 'main', and "
            "only the topology's watcher watches the hold topic (its lane 'main'); a tier DAG's schedule or "
            "due asset would leave a released key's held records waiting for main's next run",
            field="ordering",
            source=loaded.source,
        )
    if layout == "topology" and trigger != "event":
        raise ValueError(
            "layout='topology' runs on the topology's watcher (trigger='event'); schedule mode has a "
            "schedule per tier, so it needs layout='tiers'"
        )
    active_runs = dag_kwargs.get("max_active_runs", 1)
    if layout == "topology" and (
        isinstance(active_runs, bool) or not isinstance(active_runs, int) or active_runs < 1
    ):
        raise ValueError(f"max_active_runs must be a positive int, got {active_runs!r}")
    if layout == "tiers" and active_runs != 1:
        raise ValueError(
            "max_active_runs must be 1: two runs of one tier would drain the same partitions "
            "and fence each other"
        )
    if not isinstance(min_schedule, timedelta) or min_schedule <= timedelta(0):
        raise ValueError(f"min_schedule must be a positive timedelta, got {min_schedule!r}")
    roles = role_connections(kafka_conn_id, conn_ids)
    events = None
    if trigger == "event":
        events = EventSettings(
            kafka_conn_id,
            watcher_conn_id=roles.watcher,
            sweep=check_sweep(sweep) if sweep is not None else None,
            fire_ahead=fire_ahead,
            refire_after=refire_after,
            follow=follow,
        )
    notifiers = normalize_notifiers(on_dlt)
    handler = tasks_handler(loaded, handler)
    tiers = [*([loaded.tier(0)] if includes_main(loaded, include_main) else []), *loaded.retry_tiers]
    # the DLT watch's topic (its DAG's name in the tier layout): the DLT, or with no DLT (no_dlt) the first
    # of the other frameworks' queues the topology names; none: no watch
    watch_topic = (
        (loaded.dlt_topic or next(iter(loaded.dead_letter_queue_topics), None)) if dlt_watch else None
    )
    overrides = check_overrides(loaded, tier_overrides, tiers=tiers, watch_topic=watch_topic)
    # what every tier's reprocess task takes, in either layout
    reprocess: dict[str, Any] = {
        "engine": engine,
        "handler": handler,
        "kafka_conn_id": roles.tiers,
        "value_deserializer": value_deserializer,
        "on_dlt": notifiers,
        "options": options,
        "spark_conn_id": spark_conn_id,
        "asset_server": asset_server,
    }
    redrive = redrive_dags(path, loaded, dag_id_template, roles.replay, min_schedule, dag_kwargs)
    if events is not None and layout == "topology":
        return {
            **_topology_layout(
                path,
                loaded,
                tiers,
                overrides,
                dag_id=dag_id_template.format(topic=loaded.topic),
                events=events,
                roles=roles,
                dlt_watch=watch_topic is not None,
                min_schedule=min_schedule,
                dag_kwargs=dag_kwargs,
                **reprocess,
            ),
            **redrive,
        }

    dags: dict[str, DAG] = {}

    swept = [t.topic for t in tiers] + ([watch_topic] if watch_topic is not None else [])

    def sweep_of(topic: str) -> Any:
        if events is None:
            return None
        dag_id = dag_id_template.format(topic=topic)
        return events.sweep_for(dag_id, topology_topic=loaded.topic, slot=swept.index(topic))

    settings = {
        t.topic: tier_settings(
            t, overrides.get(t.topic, {}), min_schedule=min_schedule, default=sweep_of(t.topic)
        )
        for t in tiers
    }
    for tier in tiers:
        dag = tier_dag(
            path,
            loaded,
            tier,
            settings[tier.topic],
            dag_id=dag_id_template.format(topic=tier.topic),
            events=events,
            roles=roles,
            dag_kwargs=dag_kwargs,
            **reprocess,
        )
        dags[dag.dag_id] = dag
    if watch_topic is not None:
        if events is not None:
            default = sweep_of(watch_topic)
        else:
            intervals = [s.interval for s in settings.values() if s.interval is not None]
            default = min(intervals) if intervals else min_schedule
        schedule = floor_schedule(
            watch_topic, overrides.get(watch_topic, {}).get("schedule", default), min_schedule
        )
        dag = watch_dag(
            path,
            loaded,
            dag_id=dag_id_template.format(topic=watch_topic),
            schedule=schedule,
            kafka_conn_id=roles.dlt_watch,
            on_dlt=notifiers,
            events=events,
            dag_kwargs=dag_kwargs,
        )
        dags[dag.dag_id] = dag
    elif dlt_watch:
        log.info(
            "%s: no DLT (dlt_strategy: no_dlt) and no dead_letter_queues, so no DLT-watch DAG", loaded.source
        )
    if events is not None:
        dag = setup_dag(
            path,
            loaded,
            dag_id=dag_id_template.format(topic=loaded.topic) + SETUP_SUFFIX,
            kafka_conn_id=roles.setup,
            dag_kwargs=dag_kwargs,
        )
        dags[dag.dag_id] = dag
    return dags | redrive


def _topology_layout(
    path: str,
    loaded: Topology,
    tiers: list[Tier],
    overrides: dict[str, dict[str, Any]],
    *,
    dag_id: str,
    events: EventSettings,
    roles: RoleConnections,
    dlt_watch: bool,
    min_schedule: timedelta,
    dag_kwargs: Mapping[str, Any],
    **reprocess: Any,
) -> dict[str, DAG]:
    """The topology as one DAG (``factory/topology_dag.py``); a tier's ``schedule`` override is an error."""
    for topic, override in overrides.items():
        if "schedule" in override:
            raise TierOverrideError(
                topic,
                "schedule",
                "a topology DAG has one schedule for all its tiers: pass sweep= instead "
                "(or layout='tiers' for a DAG per tier)",
            )
    sweep = floor_schedule(
        loaded.topic, events.sweep_for(dag_id, topology_topic=loaded.topic, slot=0), min_schedule
    )
    settings = {
        t.topic: tier_settings(t, overrides.get(t.topic, {}), min_schedule=min_schedule, default=sweep)
        for t in tiers
    }
    if not dlt_watch:
        log.info("%s: no DLT-watch task (dlt_watch=False or dlt_strategy: no_dlt)", loaded.source)
    dag = topology_dag(
        path,
        loaded,
        tiers,
        settings,
        dag_id=dag_id,
        sweep=sweep,
        dlt_watch=dlt_watch,
        events=events,
        roles=roles,
        dag_kwargs=dag_kwargs,
        **reprocess,
    )
    return {dag.dag_id: dag}


def _topology(topology: str | Path | Topology) -> tuple[str, Topology]:
    """The topology's file path (what tasks and Spark drivers load) and the topology itself."""
    if isinstance(topology, Topology):
        if not Path(topology.source).is_file():
            raise ValueError(
                f"build_retry_dags needs the topology's YAML file: every task (and a Spark driver) "
                f"loads it, but this Topology came from {topology.source!r}; pass the file's path"
            )
        return topology.source, topology
    if not isinstance(topology, (str, Path)):
        raise TypeError(f"topology must be a YAML file path or a Topology, got {type(topology).__name__}")
    return str(topology), load_topology(topology)
