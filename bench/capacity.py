"""
Capacity: many idle event-mode topologies on one Airflow, in either DAG layout of the factory.

``capacity``: N topologies from one folder DAG file (or ``per_file`` shards), each with its main topic, two
retry tiers and the DLT watch. ``dag_layout="topology"`` (the factory's default in event mode): one DAG
and one asset watcher per topology, the tiers are its tasks ``main``, ``retry_1``, ``retry_2``,
``watch_dlt``; ``"tiers"``: a DAG and a watcher per tier and the DLT watch, 4 of each per topology (the
bench created the topics: no setup DAG). Once every watcher runs in the triggerer and the deployment has
settled (no DAG run created for ``QUIET_S`` and none running: the first sweeps are over), an idle window is
measured, then records flow through the first topology and their lateness (handled - due, from the
handler's ledger, by topic: the same in both layouts) is measured.

The plain-DAG control is ``bench/plain_control.py``.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
from confluent_kafka import Producer

from airflow_kafka_retry.factory.retry_dags import DEFAULT_DAG_ID_TEMPLATE
from bench.airflow_deploy import (
    PARSE_INTERVAL_S,
    PARTITIONS,
    counts,
    deploy,
    deployed,
    measure_window,
    memory,
)

if TYPE_CHECKING:
    from airflow_kafka_retry.sandbox.airflow_stack import AirflowCluster
    from testkit.airflow_postgres import AirflowDatabases

#: Settled: no DAG run created for this long and no task instance running or queued.
QUIET_S = 60
SETTLE_MAX_S = 900
#: What the bench deploys per topology in each DAG layout: (DAGs, asset watchers).
PER_TOPOLOGY = {"topology": (1, 1), "tiers": (4, 4)}


def settle(cluster: AirflowCluster, at_least: float = 0) -> float:
    """
    Wait until no DAG run was created for ``QUIET_S`` and no task runs (at most ``SETTLE_MAX_S``).

    ``at_least``: and this many seconds have passed (idle lanes' checks back off for minutes).
    """
    started = time.monotonic()
    last_runs, quiet_since = -1, started
    while time.monotonic() - started < max(SETTLE_MAX_S, at_least + QUIET_S):
        runs, _ = counts(cluster)
        [(busy,)] = cluster.query(
            "SELECT count(*) FROM task_instance WHERE state IN ('running', 'queued', 'scheduled')"
        )
        if runs != last_runs or busy:
            last_runs, quiet_since = runs, time.monotonic()
        elif time.monotonic() - quiet_since >= QUIET_S and time.monotonic() - started >= at_least:
            break
        cluster.check_alive()
        time.sleep(5)
    return round(time.monotonic() - started, 1)


def capacity(
    bootstrap: str,
    broker_pid: int,
    count: int,
    seconds: float,
    databases: AirflowDatabases | None = None,
    *,
    per_file: int = 0,
    dag_layout: str = "topology",
    shared_watch_consumers: bool = True,
    settle_at_least: float = 0,
    parse_interval: int = PARSE_INTERVAL_S,
) -> dict[str, Any]:
    """
    ``count`` idle event topologies from one folder, then records through the first one.

    The folder's DAGs come from one DAG file, or with ``per_file`` from ``ceil(count / per_file)`` DAG files,
    each building one shard of the folder (``build_retry_dags_from_folder(shard=...)``), in ``dag_layout``
    (``PER_TOPOLOGY``).

    The records fail once on its main topic, then succeed on retry-1 of 10 s or retry-2 of 30 s; their
    lateness is measured.
    """
    dags_each, watchers_each = PER_TOPOLOGY[dag_layout]
    stamp = datetime.datetime.now(datetime.UTC)
    names = [f"cap{i:03d}-{stamp:%H%M%S}" for i in range(count)]
    with tempfile.TemporaryDirectory(prefix="akr-bench-capacity-") as tmp:
        home = Path(tmp)
        ledger = home / "handled.jsonl"
        started = time.monotonic()
        cluster = deploy(
            bootstrap,
            home,
            [(n, ("10s", "30s")) for n in names],
            "event",
            include_main=True,
            ledger=ledger,
            layout="folder",
            databases=databases,
            shards=-(-count // per_file) if per_file else 1,
            dag_layout=dag_layout,
            shared_watch_consumers=shared_watch_consumers,
            parse_interval=parse_interval,
        )
        try:
            watchers = watchers_each * count
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline:  # every watcher runs in the triggerer
                running = deployed(cluster)["watchers_running"]
                if running >= watchers:
                    break
                cluster.check_alive()
                time.sleep(5)
            ready_s = round(time.monotonic() - started, 1)
            in_db = deployed(cluster)
            settle_s = settle(cluster, settle_at_least)
            parse = parse_seconds(cluster, count)
            load_start = os.getloadavg()
            idle = measure_window(cluster, broker_pid, seconds)
            triggerer_memory = memory(cluster.processes["triggerer"].pid)
            idle.update(
                {
                    "deployed": deployed(cluster),
                    # since deployment: an idle topology creates no run (its sweeps are weekly)
                    "dag_runs_since_deployment": counts(cluster)[0],
                    "triggerer_memory": triggerer_memory,
                    "triggerer_rss_mb": triggerer_memory["rss_mb"],
                    "kafka_connections": _connections(cluster, broker_pid),
                    "load_average": [round(x, 2) for x in load_start],
                }
            )
            records = 60
            producer = threading.Thread(target=_produce, args=(bootstrap, names[0], records), daemon=True)
            active = measure_window(cluster, broker_pid, 150, during=producer.start)
            entries = (
                [json.loads(line) for line in ledger.read_text().splitlines()] if ledger.exists() else []
            )
            lateness = {}
            for tier in (f"{names[0]}-retry-1", f"{names[0]}-retry-2"):
                late = [(e["handled_ms"] - e["due_ms"]) / 1000 for e in entries if e["topic"] == tier]
                if late:
                    lateness[tier] = {
                        "records": len(late),
                        "p50_s": round(statistics.median(late), 2),
                        "max_s": round(max(late), 2),
                        "runs": _by_run([e for e in entries if e["topic"] == tier]),
                    }
            every = [(e["handled_ms"] - e["due_ms"]) / 1000 for e in entries if "-retry-" in e["topic"]]
            try:
                timeline: Any = _timeline(cluster, DEFAULT_DAG_ID_TEMPLATE.format(topic=names[0]), entries)
            except Exception as exc:  # the figures above are kept either way
                timeline = {"error": f"{type(exc).__name__}: {exc}"}
            return {
                "case": "capacity",
                "dag_layout": dag_layout,
                "shared_watch_consumers": shared_watch_consumers,
                "layout": (
                    f"folder in {-(-count // per_file)} shard DAG files"
                    if per_file
                    else "one folder DAG file"
                ),
                "parse_interval_s": parse_interval,
                "topologies": count,
                "dags": dags_each * count,
                "watchers": watchers,
                # what the metadata DB held once every watcher ran (before the first sweeps' runs)
                "deployed": in_db,
                "ready_seconds": ready_s,
                "settle_seconds": settle_s,
                "parse": parse,
                "idle": idle,
                "active": {
                    **active,
                    "records": records,
                    "handled": len(entries),
                    "lateness": lateness,
                    "lateness_all_retry_tiers": {
                        "records": len(every),
                        "p50_s": round(statistics.median(every), 2) if every else None,
                        "max_s": round(max(every), 2) if every else None,
                    },
                    "load_average": [round(x, 2) for x in os.getloadavg()],
                    "timeline": timeline,
                },
            }
        finally:
            cluster.stop()


def _connections(cluster: AirflowCluster, broker_pid: int) -> dict[str, int]:
    """
    Established TCP connections to the broker held by each Airflow component's process tree.

    Any of the broker's listening ports counts.
    """
    ports = {
        c.laddr.port
        for c in psutil.Process(broker_pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }
    held = {}
    for name, popen in cluster.processes.items():
        proc = psutil.Process(popen.pid)
        count = 0
        for member in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                count += sum(
                    1
                    for c in member.net_connections(kind="tcp")
                    if c.raddr and c.raddr.port in ports and c.status == psutil.CONN_ESTABLISHED
                )
        held[name] = count
    held["broker_listening_ports"] = sorted(ports)
    return held


def _by_run(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each task run's share of a tier's records: how many, their due times' spread, their lateness."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        runs.setdefault(str(e.get("run")), []).append(e)
    first_due = min(e["due_ms"] for e in entries)
    listed = []
    for run, handled in sorted(runs.items(), key=lambda item: min(e["due_ms"] for e in item[1])):
        late = [(e["handled_ms"] - e["due_ms"]) / 1000 for e in handled]
        listed.append(
            {
                "run": run,
                "records": len(handled),
                "due_from_s": round((min(e["due_ms"] for e in handled) - first_due) / 1000, 2),
                "due_to_s": round((max(e["due_ms"] for e in handled) - first_due) / 1000, 2),
                "first_handled_s": round((min(e["handled_ms"] for e in handled) - first_due) / 1000, 2),
                "max_late_s": round(max(late), 2),
            }
        )
    return listed


def _timeline(cluster: AirflowCluster, dag_id: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """
    Each run of the active topology's DAG, in seconds after the first record fell due.

    Its asset event, the run queued and started, and each task queued, started and ended: where a late
    wave's seconds went. PostgreSQL only (the capacity bench's metadata DB).
    """
    dues = [e["due_ms"] for e in entries if e.get("due_ms") is not None]  # a main-topic record has none
    if not dues:
        return []
    first_due = min(dues) / 1000
    rows = cluster.query(
        "SELECT r.run_id, extract(epoch from r.queued_at), extract(epoch from r.start_date), t.task_id, "
        "t.state, extract(epoch from t.queued_dttm), extract(epoch from t.start_date), "
        "extract(epoch from t.end_date) "
        "FROM dag_run r JOIN task_instance t ON t.dag_id = r.dag_id AND t.run_id = r.run_id "
        "WHERE r.dag_id = ? ORDER BY r.queued_at, t.task_id",
        dag_id,
    )
    events = dict(
        cluster.query(
            "SELECT r.run_id, extract(epoch from max(e.timestamp)) FROM dag_run r "
            "JOIN dagrun_asset_event d ON d.dag_run_id = r.id JOIN asset_event e ON e.id = d.event_id "
            "WHERE r.dag_id = ? GROUP BY r.run_id",
            dag_id,
        )
    )

    def rel(value: Any) -> float | None:
        return None if value is None else round(float(value) - first_due, 2)

    runs: dict[str, dict[str, Any]] = {}
    for run_id, queued, started, task, state, t_queued, t_started, t_ended in rows:
        run = runs.setdefault(
            run_id,
            {
                "run": run_id,
                "event_s": rel(events.get(run_id)),
                "queued_s": rel(queued),
                "started_s": rel(started),
            },
        )
        run.setdefault("tasks", {})[task] = [state, rel(t_queued), rel(t_started), rel(t_ended)]
    return list(runs.values())


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(
            topic,
            key=str(i).encode(),
            partition=i % PARTITIONS,
            value=json.dumps({"id": str(i), "succeed_on": 2 + i % 2}).encode(),
        )
        producer.poll(0)
        time.sleep(0.5)
    producer.flush(30)


def parse_seconds(cluster: AirflowCluster, topologies: int = 0) -> dict[str, Any]:
    """
    The dag-processor's own parse time of each DAG file (``dag.last_parse_duration``).

    With ``topologies``, also the time per topology (all files' time divided by their topologies).
    """
    rows = cluster.query(
        "SELECT fileloc, max(last_parse_duration) FROM dag WHERE last_parse_duration IS NOT NULL "
        "GROUP BY fileloc"
    )
    durations = [d for _, d in rows]
    if not durations:
        return {"files": 0}
    found = {
        "files": len(durations),
        "mean_s": round(statistics.mean(durations), 3),
        "max_s": round(max(durations), 3),
    }
    if topologies:
        found["per_topology_ms"] = round(1000 * sum(durations) / topologies, 2)
    return found
