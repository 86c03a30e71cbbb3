"""
The first task of a topology DAG: run the tiers its watcher found due, skip the others.

A topology DAG (``build_retry_dags``' default layout) has a task per lane -- each retry tier (and the
main topic), the DLT watch -- and the setup task that creates the topology's topics. Its watcher's
event (``TopologyDueEventTrigger``) names the lanes that are due; this branch follows those and skips
the rest, so a skipped tier starts no worker process and no Kafka client. A run its watcher did not
start (the sweep, a manual run) runs every lane and the setup task; a manual run whose conf names
``lanes`` (the Retry tiers view's button) runs only those. A run its watcher started also runs the
lanes whose event Airflow's scheduler left to no run (``topology_lanes.stranded_lanes``), found in the
asset state store. It reads only the run's asset events, conf and the watcher's saved waves: no Kafka,
no payload.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow.providers.standard.operators.branch import BaseBranchOperator

from airflow_kafka_retry.policy.timing.waves import Wave
from airflow_kafka_retry.triggers.tier_events import STATE_KEY
from airflow_kafka_retry.triggers.topology_lanes import due_lanes, stranded_lanes

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class DueLanesOperator(BaseBranchOperator):
    """
    Follow the lanes (task ids) the run's topology events name; every lane when no event started the run.

    :param lanes: the task ids of the DAG's lanes (tiers, the DLT watch).
    :param setup_task: the task id that creates the topology's topics (run when an event names it, and
        in every run no event started), or None.
    :param watched_asset: the URI of the asset the watcher fires (its name too), whose state store holds
        the lanes' saved waves; None: only the run's events count.
    """

    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        lanes: Sequence[str],
        setup_task: str | None = None,
        watched_asset: str | None = None,
        **kwargs: object,
    ) -> None:
        if watched_asset is not None:  # what the task may read the asset state store of
            from airflow.sdk import Asset

            # a reference: an Asset of the same name without the watcher would replace the DAG's asset
            # and its watcher when the DAG processor collects the DAG's assets (seen: 0 watchers ran)
            kwargs.setdefault("inlets", [Asset.ref(name=watched_asset)])
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if not lanes:
            raise ValueError("DueLanesOperator needs at least one lane")
        self.lanes = list(lanes)
        self.setup_task = setup_task
        self.watched_asset = watched_asset

    def choose_branch(self, context: Context) -> list[str]:
        setup = [self.setup_task] if self.setup_task else []
        due = due_lanes(context.get("triggering_asset_events"))
        known = {*self.lanes, *setup}
        if due is None:
            asked = _conf_lanes(context)
            if asked is None:
                self.log.info(
                    "no watcher event started this run (a sweep or a manual run): running every lane"
                )
                return [*setup, *self.lanes]
            if not asked or not asked <= known:
                raise ValueError(
                    f"the run's conf 'lanes' must name some of this DAG's tasks {', '.join(sorted(known))} "
                    "(main exists only with include_main=True, watch_dlt only with a DLT); "
                    f"got {sorted(asked)}"
                )
            due = asked
        else:
            stranded = stranded_lanes(context.get("triggering_asset_events"), self._saved_waves(context))
            if stranded - due:
                self.log.info(
                    "also due: %s: fired after this run's events (its event is one Airflow's scheduler "
                    "left to the asset's next event, or one with a run of its own)",
                    ", ".join(sorted(stranded - due)),
                )
                due |= stranded
        unknown = sorted(due - known)
        if unknown:
            self.log.warning(
                "the watcher's event names %s, which this DAG has no task for (a tier removed since the "
                "event fired); ignored",
                ", ".join(unknown),
            )
        chosen = [lane for lane in [*setup, *self.lanes] if lane in due]
        skipped = [lane for lane in [*setup, *self.lanes] if lane not in due]
        self.log.info("due: %s; skipped: %s", ", ".join(chosen) or "none", ", ".join(skipped) or "none")
        return chosen

    def _saved_waves(self, context: Context) -> dict[str, Wave | None]:
        """Each lane's wave as the watcher saved it (None: none); empty without the asset's state store."""
        store = context.get("asset_state_store")
        if self.watched_asset is None or store is None:
            return {}
        from airflow.sdk import Asset

        try:
            accessor = store[Asset(name=self.watched_asset, uri=self.watched_asset)]
            return {lane: Wave.from_state(accessor.get(f"{STATE_KEY}:{lane}")) for lane in self.lanes}
        except Exception as exc:  # the events alone still run: a lane left out fires again (refire_after)
            self.log.warning(
                "cannot read the watcher's saved waves from the state store of asset %s (%s: %s); running "
                "the lanes the events name",
                self.watched_asset,
                type(exc).__name__,
                exc,
            )
            return {}


def _conf_lanes(context: Context) -> set[str] | None:
    """The ``lanes`` a manual run's conf names (a list of task ids); None: it names none."""
    dag_run = context.get("dag_run")
    conf = getattr(dag_run, "conf", None) or {}
    lanes = conf.get("lanes") if isinstance(conf, dict) else None
    if lanes is None:
        return None
    if isinstance(lanes, str) or not isinstance(lanes, list):
        raise ValueError(f"the run's conf 'lanes' must be a list of task ids, got {lanes!r}")
    return {str(lane) for lane in lanes}
