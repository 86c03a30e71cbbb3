"""
A DAG's runs as the view shows them.

A tier's last runs with the run summary its reprocess task pushed to XCom (counts only); who triggered
a replay DAG's runs.
"""

from __future__ import annotations

import json
from typing import Any

REPROCESS_TASK_ID = "reprocess"


def _summary_brief(value: Any) -> dict[str, Any] | None:
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict) or "totals" not in value:
        return None
    keep = ("status", "engine", "duration_s", "stopped", "cutoff_ms")
    return {**{k: value.get(k) for k in keep if k in value}, "totals": value["totals"]}


def last_runs(
    dag_id: str, limit: int, task_id: str | None = None, *, summaries: bool
) -> list[dict[str, Any]]:
    """
    Newest first: run id, state, times and (``summaries``) the reprocess summary's totals (never payloads).

    ``task_id``: the tier's task in a topology DAG; only the runs it was not skipped in are listed (None: a
    tier DAG's runs, its task ``reprocess``). Without ``summaries`` (a user who may not read the DAG's
    XComs) no XCom is read and ``summary`` is None.
    """
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import or_, select

    query = select(DagRun).where(DagRun.dag_id == dag_id)
    if task_id is not None:
        ran = select(TaskInstance.run_id).where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.task_id == task_id,
            or_(TaskInstance.state.is_(None), TaskInstance.state != TaskInstanceState.SKIPPED),
        )
        query = query.where(DagRun.run_id.in_(ran))
    with create_session() as session:
        runs = session.scalars(query.order_by(DagRun.run_after.desc()).limit(limit)).all()
        values: dict[str, Any] = {}
        if runs and summaries:
            rows = session.execute(
                select(XComModel.run_id, XComModel.key, XComModel.value).where(
                    XComModel.dag_id == dag_id,
                    XComModel.task_id == (task_id or REPROCESS_TASK_ID),
                    XComModel.key.in_(("return_value", "summary")),
                    XComModel.run_id.in_([r.run_id for r in runs]),
                )
            ).all()
            for run_id, key, value in rows:
                if key == "return_value" or run_id not in values:
                    values[str(run_id)] = value
        return [
            {
                "run_id": r.run_id,
                "state": str(r.state) if r.state else None,
                "run_after": r.run_after.isoformat() if r.run_after else None,
                "start_date": r.start_date.isoformat() if r.start_date else None,
                "end_date": r.end_date.isoformat() if r.end_date else None,
                "summary": _summary_brief(values.get(r.run_id)),
            }
            for r in runs
        ]


def triggering_users(dag_id: str, run_ids: list[str]) -> dict[str, str | None]:
    """Who triggered each of ``run_ids`` of ``dag_id``, as Airflow recorded it (runs not found: left out)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    if not run_ids:
        return {}
    query = select(DagRun.run_id, DagRun.triggering_user_name).where(
        DagRun.dag_id == dag_id, DagRun.run_id.in_(run_ids)
    )
    with create_session() as session:
        return {str(run_id): user for run_id, user in session.execute(query).all()}
