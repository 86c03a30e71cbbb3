"""
The first task of a topology DAG: run the tiers its watcher found due, skip the others.

A topology DAG (``build_retry_dags``' default layout) has a task per lane -- each retry tier (and the
main topic), the DLT watch -- and the setup task that creates the topology's topics. Its watcher's
event (``TopologyDueEventTrigger``) names the lanes that are due; this branch follows those and skips
the rest, so a skipped tier starts no worker process and no Kafka client. A run its watcher did not
start (the sweep, a manual run) runs every lane and the setup task; a manual run whose conf names
``lanes`` (the Retry tiers view's button) runs only those. It reads only the run's asset events and
conf: no Kafka, no payload.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow.providers.standard.operators.branch import BaseBranchOperator

from airflow_kafka_retry.triggers.topology_lanes import due_lanes

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class DueLanesOperator(BaseBranchOperator):
    """
    Follow the lanes (task ids) the run's topology events name; every lane when no event started the run.

    :param lanes: the task ids of the DAG's lanes (tiers, the DLT watch).
    :param setup_task: the task id that creates the topology's topics (run when an event names it, and
        in every run no event started), or None.
    """

    ui_color = "#e8f1fb"

    def __init__(self, *, lanes: Sequence[str], setup_task: str | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if not lanes:
            raise ValueError("DueLanesOperator needs at least one lane")
        self.lanes = list(lanes)
        self.setup_task = setup_task

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
