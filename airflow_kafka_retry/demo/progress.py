"""
Live progress of the demo: per tier its runs, drained, succeeded, routed, waiting and next due.

A tier is a task of the topology DAG (``main``, ``retry_1``, ...). Counts come from Airflow's metadata
DB -- the runs in which the tier's task ran (not skipped by its lane's gate), its XCom run summaries
-- and the broker (``scan_backlog``: the tier group's backlog and due times, read from headers); never
from payloads. Rendered with ``rich``.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from airflow_kafka_retry.demo.account import held_topics
from airflow_kafka_retry.demo.orders import ALERTS_FILE, read_lines
from airflow_kafka_retry.engine.scans.backlog import scan_backlog
from airflow_kafka_retry.sandbox.airflow_stack import query_metadata

if TYPE_CHECKING:
    from airflow_kafka_retry.demo.deployment import Deployment

PROGRESS_GROUP_SUFFIX = "-demo-progress"  # never commits: counts every record of a DLT
#: Task states of a task that did not run in its DAG run: its lane's gate skipped it (the run did not name
#: its lane), or Airflow did not run it.
NOT_RUN = ("skipped", "upstream_failed", "removed")
#: Task states of a task still going.
BUSY = ("scheduled", "queued", "running", "deferred", "up_for_retry", "up_for_reschedule", "restarting")


@dataclass
class TierProgress:
    """One tier's progress in the demo's live table."""

    topic: str
    delay_s: float
    task_id: str  # its task in the topology DAG
    runs: int = 0  # runs of the topology DAG its task ran in
    running: bool = False
    drained: int = 0
    succeeded: int = 0
    routed: int = 0
    dead_lettered: int = 0
    waiting: int | None = None
    next_due_ms: int | None = None


@dataclass
class Snapshot:
    """What the demo's live table shows at one moment."""

    tiers: list[TierProgress]
    dlt_records: dict[str, int | None]
    alerts: int
    alerted_records: int
    produced: int
    phase: str
    at_ms: int
    errors: list[str] = field(default_factory=list)
    last_alert: dict[str, Any] | None = None
    dag_id: str = ""  # the topology DAG whose tasks drain the tiers

    @property
    def settled(self) -> bool:
        """Every tier's group has committed past its last record (the runs' commits include the routing)."""
        return all(t.waiting == 0 for t in self.tiers)


def _rows(database_url: str, sql: str, *params: object) -> list[tuple]:
    """Rows of ``sql`` (``?`` placeholders) on the demo's metadata DB; none while it is not migrated yet."""
    if database_url.startswith("sqlite:///") and not Path(database_url.removeprefix("sqlite:///")).exists():
        return []
    not_ready: tuple[type[Exception], ...] = (sqlite3.OperationalError,)
    if database_url.startswith("postgresql"):
        import psycopg2

        not_ready = (psycopg2.ProgrammingError,)  # an undefined table
    try:
        return query_metadata(database_url, sql, *params)
    except not_ready:
        return []


def _marks(values: Collection[object]) -> str:
    return ", ".join("?" * len(values))


def xcom_summaries(
    database_url: str, dag_id: str, task_ids: Collection[str]
) -> list[tuple[str, str, dict[str, Any]]]:
    """``(task_id, run_id, summary)`` of every run summary the tasks ``task_ids`` of ``dag_id`` pushed."""
    if not task_ids:
        return []
    rows = _rows(
        database_url,
        f"SELECT task_id, run_id, value FROM xcom WHERE dag_id = ? AND task_id IN ({_marks(task_ids)}) "
        "AND key IN ('return_value', 'summary')",
        dag_id,
        *task_ids,
    )
    out = []
    for task_id, run_id, value in rows:
        data = json.loads(value) if isinstance(value, (str, bytes)) else value
        if isinstance(data, str):
            data = json.loads(data)
        if isinstance(data, Mapping) and "totals" in data:
            out.append((task_id, run_id, dict(data)))
    return out


def task_runs(database_url: str, dag_id: str) -> dict[str, tuple[int, int]]:
    """
    task_id -> (runs of ``dag_id`` the task ran in, of which not finished).

    A run that skipped the task (its event did not name the task's lane) does not count, nor one in which
    the task has no state yet.
    """
    rows = _rows(
        database_url,
        f"SELECT task_id, count(*), sum(CASE WHEN state IN ({_marks(BUSY)}) THEN 1 ELSE 0 END) "
        f"FROM task_instance WHERE dag_id = ? AND state IS NOT NULL AND state NOT IN ({_marks(NOT_RUN)}) "
        "GROUP BY task_id",
        *BUSY,
        dag_id,
        *NOT_RUN,
    )
    return {task_id: (runs, active or 0) for task_id, runs, active in rows}


class ProgressReader:
    """Takes snapshots of the demo's progress."""

    def __init__(self, deployment: Deployment, kafka_config: Mapping[str, Any]) -> None:
        self.deployment = deployment
        self.kafka_config = dict(kafka_config)
        self.produced = 0
        self.phase = "starting"

    def snapshot(self) -> Snapshot:
        topology = self.deployment.topology
        db = self.deployment.database_url
        now = int(time.time() * 1000)
        tasks = {tier.topic: self.deployment.task_id(tier) for tier in self.deployment.tiers}
        by_task: dict[str, list[dict[str, Any]]] = {}
        for task_id, _, summary in xcom_summaries(db, self.deployment.dag_id, tasks.values()):
            by_task.setdefault(task_id, []).append(summary)
        runs = task_runs(db, self.deployment.dag_id)
        errors: list[str] = []
        tiers = []
        for tier in self.deployment.tiers:
            task_id = tasks[tier.topic]
            row = TierProgress(tier.topic, tier.delay_ms / 1000, task_id)
            row.runs, active = runs.get(task_id, (0, 0))
            row.running = active > 0
            for summary in by_task.get(task_id, []):
                totals = summary["totals"]
                row.drained += totals["drained"]
                row.succeeded += totals["succeeded"]
                row.dead_lettered += sum(totals.get("dlt_topics", {}).values())
                row.routed += sum(totals["routed"].values()) - sum(totals.get("dlt_topics", {}).values())
            backlog = scan_backlog(
                self.kafka_config, tier.topic, topology.consumer_group(tier), now_ms=now, timeout_s=5
            )
            if backlog.error and "do not exist" in backlog.error:
                row.waiting = 0  # the setup task has not created it yet: nothing waits there
            elif backlog.error:
                errors.append(backlog.error)
            else:
                # records read after the committed offset; the offset difference ("backlog") also counts
                # transaction markers, which never go away on a transactionally committed tier
                totals = backlog.totals()
                row.waiting, row.next_due_ms = totals["scanned"], totals["next_due_ms"]
            tiers.append(row)
        dlts: dict[str, int | None] = {}
        for topic in held_topics(topology):
            backlog = scan_backlog(
                self.kafka_config, topic, topology.group_id + PROGRESS_GROUP_SUFFIX, now_ms=now, timeout_s=5
            )
            dlts[topic] = (
                (0 if "do not exist" in backlog.error else None)
                if backlog.error
                else backlog.totals()["scanned"]
            )
        alerts = list(read_lines(self.deployment.root / ALERTS_FILE))
        return Snapshot(
            tiers,
            dlts,
            len(alerts),
            sum(a["records"] for a in alerts),
            self.produced,
            self.phase,
            now,
            errors,
            alerts[-1] if alerts else None,
            self.deployment.dag_id,
        )


def render(snap: Snapshot, *, elapsed_s: float) -> Group:
    table = Table(
        title=f"Retry tiers under Airflow ({snap.dag_id or 'DAG'}): {snap.phase} ({elapsed_s:.0f}s)",
        title_justify="left",
        caption="runs: the DAG's runs that ran the tier's task (▶: one going)",
        caption_justify="left",
        expand=False,
    )
    for name, justify in (
        ("tier", "left"),
        ("task", "left"),
        ("delay", "right"),
        ("runs", "right"),
        ("drained", "right"),
        ("succeeded", "right"),
        ("routed on", "right"),
        ("to DLT", "right"),
        ("waiting", "right"),
        ("next due", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for i, t in enumerate(snap.tiers):
        due = "-"
        if t.next_due_ms is not None:
            wait = (t.next_due_ms - snap.at_ms) / 1000
            due = f"in {wait:.0f}s" if wait > 0 else "due now"
        elif t.waiting:
            due = "due now"
        runs = f"{t.runs}{' ▶' if t.running else ''}"
        waiting = "?" if t.waiting is None else str(t.waiting)
        table.add_row(
            t.topic,
            t.task_id,
            f"{t.delay_s:.0f}s" if i else "main",
            runs,
            str(t.drained),
            str(t.succeeded),
            str(t.routed),
            str(t.dead_lettered),
            waiting,
            due,
        )
    dlt = "  ".join(f"{topic}: {'?' if n is None else n}" for topic, n in snap.dlt_records.items())
    alert = ""
    if snap.last_alert:
        a = snap.last_alert
        alert = f"; latest: {a['dag_id']}.{a['task_id']} reported {a['records']} record(s)"
    lines = [
        Text(f"orders produced: {snap.produced}   dead-letter/parking topics: {dlt}"),
        Text(
            f"DLT alerts fired: {snap.alerts} (records reported: {snap.alerted_records}){alert}",
            style="bold red" if snap.alerts else "",
        ),
    ]
    lines += [Text(f"broker: {e}", style="yellow") for e in snap.errors[:2]]
    return Group(table, *lines)
