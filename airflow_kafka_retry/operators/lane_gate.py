"""
The gate of a topology DAG's lane tasks: a lane runs when its run's watcher event names it.

A topology DAG (``build_retry_dags``' default layout) has a task per lane -- each retry tier (and the
main topic), the DLT watch -- and the setup task that creates the topology's topics, all of them roots:
the watcher's event starts them at once, with no task in between. Each one's ``pre_execute`` hook is a
:class:`LaneGate`: it reads which lanes are due from the run's asset events (``TopologyDueEventTrigger``'s
``due``), its conf or the watcher's saved waves, and skips its task when its lane is not among them,
before the task opens any Kafka client or worker process.

* A run its watcher did not start (the sweep, a manual run) runs every lane and the setup task; a manual
  run whose conf names ``lanes`` (the Retry tiers view's button) runs only those.
* A run its watcher started also runs the lanes whose event Airflow's scheduler left to no run
  (``topology_lanes.stranded_lanes``), found in the asset state store.
* A lane task runs one at a time over the DAG's runs (``max_active_tis_per_dag=1``), so a run's copy of a
  lane that is still draining in another run would wait for that drain before it could skip itself; the
  first of a run's lanes to start skips those waiting copies that its run does not name, so a run ends
  when its named lanes do.

It reads only the run's asset events, conf and the watcher's saved waves: no Kafka, no payload.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.policy.timing.waves import Wave
from airflow_kafka_retry.triggers.tier_events import STATE_KEY
from airflow_kafka_retry.triggers.topology_lanes import due_lanes, stranded_lanes

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

#: A sibling lane task in one of these states has not started: the gate may skip it (a queued or running
#: one is left alone, as are finished ones).
WAITING_STATES = frozenset({None, "none", "scheduled"})


class LaneGate:
    """
    A lane task's ``pre_execute`` hook: skip the task unless its run names its lane.

    :param lanes: the task ids of the DAG's lanes (tiers, the DLT watch) and its setup task, if any.
    :param setup_task: the task id that creates the topology's topics: run when an event names it, and in
        every run no event started.
    :param watched_asset: the URI of the asset the watcher fires (its name too), whose state store holds
        the lanes' saved waves (each lane task has it as an inlet); None: only the run's events count.
    :param then: a ``pre_execute`` hook of the DAG's own (``default_args``), called after the gate lets
        the task run.
    """

    def __init__(
        self,
        *,
        lanes: Sequence[str],
        setup_task: str | None = None,
        watched_asset: str | None = None,
        then: Callable[[Any], Any] | None = None,
    ) -> None:
        if not lanes:
            raise ValueError("LaneGate needs at least one lane")
        self.lanes = [lane for lane in lanes if lane != setup_task]
        self.setup_task = setup_task
        self.watched_asset = watched_asset
        self.then = then

    @property
    def tasks(self) -> list[str]:
        """Every task the gate guards: the setup task first, then the lanes."""
        return [*([self.setup_task] if self.setup_task else []), *self.lanes]

    def __call__(self, context: Context) -> None:
        from airflow.providers.common.compat.sdk import AirflowSkipException

        ti = context["ti"]
        log = context["task"].log
        named = self.named(context, log)
        self._skip_waiting_siblings(context, named, log)
        if ti.task_id not in named:
            raise AirflowSkipException(
                f"this run's watcher event names {', '.join(sorted(named & set(self.tasks))) or 'no lane'}, "
                f"not {ti.task_id}"
            )
        if self.then is not None:
            self.then(context)

    def named(self, context: Context, log: Any) -> set[str]:
        """The tasks (lanes and the setup task) the run names; every one when no event started it."""
        known = set(self.tasks)
        due = due_lanes(context.get("triggering_asset_events"))
        if due is None:
            asked = _conf_lanes(context)
            if asked is None:
                log.info("no watcher event started this run (a sweep or a manual run): running every lane")
                return known
            if not asked or not asked <= known:
                raise ValueError(
                    f"the run's conf 'lanes' must name some of this DAG's tasks {', '.join(sorted(known))} "
                    "(main exists only with include_main=True, watch_dlt only with a DLT); "
                    f"got {sorted(asked)}"
                )
            return asked
        stranded = stranded_lanes(context.get("triggering_asset_events"), self._saved_waves(context, log))
        if stranded - due:
            log.info(
                "also due: %s: fired after this run's events (its event is one Airflow's scheduler left to "
                "the asset's next event, or one with a run of its own)",
                ", ".join(sorted(stranded - due)),
            )
            due |= stranded
        unknown = sorted(due - known)
        if unknown:
            log.warning(
                "the watcher's event names %s, which this DAG has no task for (a tier removed since the "
                "event fired); ignored",
                ", ".join(unknown),
            )
        chosen = [task for task in self.tasks if task in due]
        log.info("due: %s", ", ".join(chosen) or "none")
        return set(chosen)

    def _skip_waiting_siblings(self, context: Context, named: set[str], log: Any) -> None:
        """Skip the run's lane tasks it does not name that have not started (queued behind another run)."""
        ti = context["ti"]
        others = [task for task in self.tasks if task not in named and task != ti.task_id]
        if not others:
            return
        try:
            states = ti.get_task_states(dag_id=ti.dag_id, task_ids=others, run_ids=[ti.run_id])
            run = states.get(ti.run_id) or {}
            waiting = [task for task in others if task in run and _state(run[task]) in WAITING_STATES]
            if waiting:
                _skip(waiting)
                log.info("skipped %s: not named in this run and not started yet", ", ".join(waiting))
        except Exception as exc:  # each of them still skips itself when it starts
            log.warning("cannot skip this run's waiting lanes (%s: %s)", type(exc).__name__, exc)

    def _saved_waves(self, context: Context, log: Any) -> dict[str, Wave | None]:
        """Each lane's wave as the watcher saved it (None: none); empty without the asset's state store."""
        store = context.get("asset_state_store")
        if self.watched_asset is None or store is None:
            return {}
        from airflow.sdk import Asset

        try:
            accessor = store[Asset(name=self.watched_asset, uri=self.watched_asset)]
            return {lane: Wave.from_state(accessor.get(f"{STATE_KEY}:{lane}")) for lane in self.lanes}
        except Exception as exc:  # the events alone still run: a lane left out fires again (refire_after)
            log.warning(
                "cannot read the watcher's saved waves from the state store of asset %s (%s: %s); running "
                "the lanes the events name",
                self.watched_asset,
                type(exc).__name__,
                exc,
            )
            return {}


def _state(state: Any) -> str | None:
    value = getattr(state, "value", state)
    return None if value is None else str(value)


def _skip(task_ids: Sequence[str]) -> None:
    """
    Set tasks of the current run to skipped (those not running or finished: the execution API's rule).

    The message Airflow's own ``SkipMixin`` sends when a branch skips; it sets the named task instances of
    the run to skipped, never the running task's own.
    """
    from airflow.sdk.execution_time.comms import SkipDownstreamTasks
    from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

    SUPERVISOR_COMMS.send(msg=SkipDownstreamTasks(tasks=list(task_ids)))


def _conf_lanes(context: Mapping[str, Any]) -> set[str] | None:
    """The ``lanes`` a manual run's conf names (a list of task ids); None: it names none."""
    dag_run = context.get("dag_run")
    conf = getattr(dag_run, "conf", None) or {}
    lanes = conf.get("lanes") if isinstance(conf, dict) else None
    if lanes is None:
        return None
    if isinstance(lanes, str) or not isinstance(lanes, list):
        raise ValueError(f"the run's conf 'lanes' must be a list of task ids, got {lanes!r}")
    return {str(lane) for lane in lanes}
