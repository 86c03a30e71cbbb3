"""
Live progress of the demo: per tier drained, succeeded, routed, waiting and next due.

Counts come from the reprocess tasks' XCom run summaries (Airflow's metadata DB) and the broker
(``scan_backlog``: the tier group's backlog and due times, read from headers); never from
payloads. Rendered with ``rich``.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from airflow_kafka_retry.demo.account import held_topics
from airflow_kafka_retry.demo.orders import ALERTS_FILE, read_lines
from airflow_kafka_retry.engine.backlog import scan_backlog
from airflow_kafka_retry.testing.airflow_stack import query_metadata

if TYPE_CHECKING:
    from airflow_kafka_retry.demo.deployment import Deployment

PROGRESS_GROUP_SUFFIX = "-demo-progress"  # never commits: counts every record of a DLT


@dataclass
class TierProgress:
    """One tier's progress in the demo's live table."""

    topic: str
    delay_s: float
    runs: int = 0
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

    @property
    def settled(self) -> bool:
        """Every tier's group has committed past its last record (the runs' commits include the routing)."""
        return all(t.waiting == 0 for t in self.tiers)


def _rows(database_url: str, sql: str) -> list[tuple]:
    """Rows of ``sql`` on the demo's metadata DB; none while it is not created or migrated yet."""
    if database_url.startswith("sqlite:///") and not Path(database_url.removeprefix("sqlite:///")).exists():
        return []
    not_ready: tuple[type[Exception], ...] = (sqlite3.OperationalError,)
    if database_url.startswith("postgresql"):
        import psycopg2

        not_ready = (psycopg2.ProgrammingError,)  # an undefined table
    try:
        return query_metadata(database_url, sql)
    except not_ready:
        return []


def xcom_summaries(database_url: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``(dag_id, run_id, summary)`` of every reprocess task that pushed a run summary."""
    rows = _rows(
        database_url,
        "SELECT dag_id, run_id, value FROM xcom WHERE task_id = 'reprocess' AND "
        "key IN ('return_value', 'summary')",
    )
    out = []
    for dag_id, run_id, value in rows:
        data = json.loads(value) if isinstance(value, (str, bytes)) else value
        if isinstance(data, str):
            data = json.loads(data)
        if isinstance(data, Mapping) and "totals" in data:
            out.append((dag_id, run_id, dict(data)))
    return out


def dag_runs(database_url: str) -> dict[str, tuple[int, int]]:
    """dag_id -> (runs, runs not finished)."""
    rows = _rows(
        database_url,
        "SELECT dag_id, count(*), sum(CASE WHEN state IN ('queued', 'running') THEN 1 ELSE 0 END) "
        "FROM dag_run GROUP BY dag_id",
    )
    return {dag_id: (runs, active or 0) for dag_id, runs, active in rows}


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
        by_dag: dict[str, list[dict[str, Any]]] = {}
        for dag_id, _, summary in xcom_summaries(db):
            by_dag.setdefault(dag_id, []).append(summary)
        runs = dag_runs(db)
        errors: list[str] = []
        tiers = []
        for tier in self.deployment.tiers:
            dag_id = self.deployment.dag_id(tier.topic)
            row = TierProgress(tier.topic, tier.delay_ms / 1000)
            row.runs, active = runs.get(dag_id, (0, 0))
            row.running = active > 0
            for summary in by_dag.get(dag_id, []):
                totals = summary["totals"]
                row.drained += totals["drained"]
                row.succeeded += totals["succeeded"]
                row.dead_lettered += sum(totals.get("dlt_topics", {}).values())
                row.routed += sum(totals["routed"].values()) - sum(totals.get("dlt_topics", {}).values())
            backlog = scan_backlog(
                self.kafka_config, tier.topic, topology.consumer_group(tier), now_ms=now, timeout_s=5
            )
            if backlog.error and "do not exist" in backlog.error:
                row.waiting = 0  # the setup DAG has not created it yet: nothing waits there
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
        )


def render(snap: Snapshot, *, elapsed_s: float) -> Group:
    table = Table(
        title=f"Retry tiers under Airflow: {snap.phase} ({elapsed_s:.0f}s)",
        title_justify="left",
        expand=False,
    )
    for name, justify in (
        ("tier", "left"),
        ("delay", "right"),
        ("DAG runs", "right"),
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
