"""
``python -m bench.event_tiers``: what event-driven and scheduled tiers cost a real Airflow when idle.

    python -m bench.event_tiers                     # baseline, idle event topology, idle scheduled topology
    python -m bench.event_tiers --seconds 120       # a shorter window (default 300 s)
    python -m bench.event_tiers --capacity 50       # also 50 idle event topologies, then one of them active
    python -m bench.event_tiers --cases "" --capacity 1 --seconds 60   # event-mode lateness of one topology
    python -m bench.event_tiers --cases baseline --capacity 200,50,100 --seconds 120 --name capacity
    python -m bench.event_tiers --postgres --cases baseline --capacity 50,100,200 --name capacity-pg
    python -m bench.event_tiers --postgres --cases baseline --capacity 200 --plain 200 --seconds 120
    python -m bench.event_tiers --postgres --cases baseline --capacity 200 --plain 200 --dag-layout tiers

Each deployment is a real Airflow 3 (api-server, scheduler, dag-processor, triggerer; LocalExecutor on
SQLite, or with ``--postgres`` on a private PostgreSQL server; ``sandbox/airflow_stack.py``)
on a real Apache Kafka broker (``--broker tansu``: the embedded Tansu). After a warm-up
(the DAGs are parsed, each topology's setup DAG and each DAG's first sweep ran), it counts over the
window: DAG runs and task instances created, and the CPU seconds of each Airflow component's process
tree (tasks included) and of the broker. Cases:

* ``baseline``: the same Airflow with no DAG;
* ``event``: one topology (3 tiers of 30 s, 60 s, 120 s and the DLT watch), ``trigger="event"``;
* ``schedule``: the same topology, ``trigger="schedule"`` (every tier polled every delay; always a DAG per
  tier);
* ``capacity``: N event topologies on one Airflow: idle once settled, then records flow through one of them
  and its lateness (handled - due) is measured, with the DAG files' parse time (``bench/capacity.py``);
* ``plain``: the control of ``--plain N``: the same Airflow with as many plain DAGs as N topologies have
  (N for ``--dag-layout topology``, 4 x N for ``tiers``), no provider code (``bench/plain_control.py``).

``--dag-layout`` is the factory's ``layout=`` of the event-mode DAGs: ``topology`` (the default: one DAG
and one watcher per topology, the tiers its tasks) or ``tiers`` (a DAG and a watcher per tier and the DLT
watch). Each result records it, with the DAGs and watchers deployed.

Idle cost = (CPU of the case - CPU of the baseline) / window. Each run writes its whole result, with the
command, the machine and its load, to its own ``bench/results/<UTC start time>-event-tiers.json`` (never
over another run's) and prints a table. Timing is measured, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from airflow_kafka_retry.sandbox.broker import EmbeddedBroker
from airflow_kafka_retry.sandbox.kafka import DEFAULT_HEAP, ApacheKafka
from airflow_kafka_retry.sandbox.postgres import PostgresCluster
from bench.airflow_deploy import (
    DAG_LAYOUTS,
    PARSE_INTERVAL_S,
    REPO,
    WARM_UP_S,
    counts,
    deploy,
    deployed,
    measure_window,
    memory,
    watch_process,
)
from bench.capacity import capacity
from bench.plain_control import plain_dags
from bench.results_file import claim_result_file
from testkit.airflow_postgres import AirflowDatabases

RESULTS = REPO / "bench" / "results"


def run_case(
    bootstrap: str,
    broker_pid: int,
    name: str,
    topologies: list[tuple[str, tuple[str, ...]]],
    trigger: str,
    seconds: float,
    databases: AirflowDatabases | None = None,
    dag_layout: str = "topology",
) -> dict[str, Any]:
    dag_layout = dag_layout if trigger == "event" else "tiers"  # schedule mode has a DAG per tier only
    with tempfile.TemporaryDirectory(prefix=f"akr-bench-{name}-") as tmp:
        home = Path(tmp)
        cluster = deploy(bootstrap, home, topologies, trigger, databases=databases, dag_layout=dag_layout)
        try:
            time.sleep(WARM_UP_S)  # parse, setup DAGs, first sweeps
            in_db = deployed(cluster)
            warm_runs, warm_tis = counts(cluster)
            by_dag = dict(cluster.query("SELECT dag_id, count(*) FROM dag_run GROUP BY dag_id"))
            result = measure_window(cluster, broker_pid, seconds)
            result.update(
                {
                    "case": name,
                    "trigger": trigger,
                    "dag_layout": dag_layout if topologies else None,
                    "topologies": len(topologies),
                    "deployed": in_db,
                    "triggerer_memory": memory(cluster.processes["triggerer"].pid),
                    "warm_up": {
                        "seconds": WARM_UP_S,
                        "dag_runs": warm_runs,
                        "task_instances": warm_tis,
                        "dag_runs_by_dag": by_dag,
                    },
                }
            )
            return result
        finally:
            cluster.stop()


def _table(results: list[dict[str, Any]]) -> str:
    base = next(r for r in results if r["case"] == "baseline")
    lines = [
        "| case | DAG runs | task instances | Airflow CPU s | over baseline, % of one core | broker CPU s |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        if r["case"] in ("capacity", "plain"):
            continue
        extra = (r["airflow_cpu_seconds"] - base["airflow_cpu_seconds"]) / r["seconds"] * 100
        lines.append(
            f"| {r['case']} | {r['dag_runs']} | {r['task_instances']} | {r['airflow_cpu_seconds']} | "
            f"{extra:.2f} | {r['cpu_seconds']['broker']} |"
        )
    return "\n".join(lines)


NOTES = [
    "Each run has its own baseline (the same Airflow with no DAGs); 'over baseline' compares within a run.",
    (
        "Airflow CPU is api-server + scheduler + dag-processor + triggerer with all their descendants (task "
        "processes); the broker's CPU is listed apart."
    ),
    "Lateness of the active topology in the capacity case: handled - due time, from the handler's ledger.",
    (
        "dag_layout: the factory's layout= (topology: one DAG and one watcher per topology; tiers: a DAG "
        "and a watcher per tier and the DLT watch); deployed: the DAGs, asset watchers and triggers in the "
        "metadata DB."
    ),
    (
        "load_average_*: the machine's 1, 5 and 15 minute load averages; on a shared machine other work "
        "competes for the cores, so compare cases within one run."
    ),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.event_tiers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="measurement window of each case")
    parser.add_argument(
        "--capacity", default="", help="also N idle event topologies, then one active; a list: 200,50,100"
    )
    parser.add_argument(
        "--plain",
        default="",
        help="also as many plain DAGs (no provider code) as N topologies have in --dag-layout (topology: N, "
        "tiers: 4 x N): Airflow's own cost; a list",
    )
    parser.add_argument(
        "--dag-layout",
        choices=DAG_LAYOUTS,
        default="topology",
        help="the factory's layout= in event mode: one DAG per topology (default), or a DAG per tier",
    )
    parser.add_argument(
        "--shared-watch-consumers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="capacity: the triggerer's watchers share one consumer ([kafka_retry] shared_watch_consumers, "
        "the default); --no-shared-watch-consumers: a consumer per watched lane",
    )
    parser.add_argument(
        "--parse-interval",
        type=int,
        default=PARSE_INTERVAL_S,
        help="capacity: [dag_processor] min_file_process_interval, seconds (default: Airflow's, "
        f"{PARSE_INTERVAL_S})",
    )
    parser.add_argument(
        "--per-file",
        type=int,
        default=0,
        help="capacity: topologies per DAG file (folder shards, docs/capacity.md); 0: one file for all",
    )
    parser.add_argument(
        "--settle-at-least",
        type=float,
        default=0,
        help="capacity: settle at least this many seconds before the idle window (idle lanes' checks back "
        "off for minutes: 30, 60, 120, 240, then 300 s apart)",
    )
    parser.add_argument("--cases", default="baseline,event,schedule", help="which idle cases to run")
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="kafka", help="Apache Kafka or Tansu")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="the metadata DB on a private PostgreSQL server (Debian's postgresql) instead of SQLite",
    )
    parser.add_argument(
        "--broker-heap",
        default=DEFAULT_HEAP,
        help=f"Apache Kafka's -Xmx (default {DEFAULT_HEAP}: 1,000 topologies, 12,000 partitions, need more)",
    )
    parser.add_argument("--name", default="event-tiers", help="results file: <UTC start time>-<name>.json")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    stamp = datetime.datetime.now(datetime.UTC)
    tiers = ("30s", "60s", "120s")
    results: list[dict[str, Any]] = []
    load_start = [round(x, 2) for x in os.getloadavg()]
    out = claim_result_file(args.out, stamp, args.name)

    def write() -> None:  # after every case: a run cut short keeps what it measured
        document = {
            "bench": "python -m bench.event_tiers",
            "command": shlex.join(
                ["python", "-m", "bench.event_tiers", *(sys.argv[1:] if argv is None else argv)]
            ),
            "date": stamp.isoformat(timespec="seconds"),
            "broker": {"kafka": "Apache Kafka (sandbox/kafka.py)", "tansu": "Tansu (embedded)"}[args.broker],
            "broker_heap": args.broker_heap if args.broker == "kafka" else None,
            "metadata_db": "PostgreSQL (sandbox/postgres.py)" if args.postgres else "SQLite",
            "airflow_settings": "default parse interval (min_file_process_interval 30 s); "
            "dagbag_import_timeout "
            "600 s and dag_file_processor_timeout 900 s (defaults 30 s / 50 s: a loaded machine)",
            "machine": {
                "cores": psutil.cpu_count(),
                "load_average_at_start": load_start,
                "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
                "python": sys.version.split()[0],
                "platform": platform.platform(),
            },
            "window_seconds": args.seconds,
            "dag_layout": args.dag_layout,
            "shared_watch_consumers": args.shared_watch_consumers,
            "results": results,
            "notes": NOTES,
        }
        out.write_text(json.dumps(document, indent=2) + "\n")

    with contextlib.ExitStack() as stack:
        kind: ApacheKafka | EmbeddedBroker = (
            ApacheKafka(heap=args.broker_heap) if args.broker == "kafka" else EmbeddedBroker()
        )
        broker = stack.enter_context(kind)
        databases = None
        if args.postgres:
            pg = stack.enter_context(PostgresCluster())
            databases = AirflowDatabases(pg)
            watch_process("postgres", pg.pid)  # its CPU in every window, beside the broker's
        for case in [c for c in args.cases.split(",") if c]:
            name = f"{case}-{stamp:%H%M%S}"
            topologies = [] if case == "baseline" else [(f"idle-{name}", tiers)]
            trigger = "schedule" if case == "schedule" else "event"
            print(
                f"{case}: deploying, {WARM_UP_S}s warm-up, then {args.seconds:.0f}s measured...", flush=True
            )
            results.append(
                {
                    **run_case(
                        broker.bootstrap,
                        broker.pid,
                        case,
                        topologies,
                        trigger,
                        args.seconds,
                        databases,
                        dag_layout=args.dag_layout,
                    ),
                    "case": case,
                }
            )
            print(json.dumps(results[-1]), flush=True)
            write()
        for count in [int(c) for c in args.capacity.split(",") if c]:
            print(f"capacity: {count} topologies, {args.dag_layout} layout...", flush=True)
            try:
                results.append(
                    capacity(
                        broker.bootstrap,
                        broker.pid,
                        count,
                        args.seconds,
                        databases,
                        per_file=args.per_file,
                        dag_layout=args.dag_layout,
                        shared_watch_consumers=args.shared_watch_consumers,
                        settle_at_least=args.settle_at_least,
                        parse_interval=args.parse_interval,
                    )
                )
            except RuntimeError as exc:  # a component died (e.g. SQLite "database is locked"): say so
                results.append(
                    {
                        "case": "capacity",
                        "dag_layout": args.dag_layout,
                        "topologies": count,
                        "failed": str(exc)[-3000:],
                    }
                )
            print(json.dumps(results[-1]), flush=True)
            write()
        for count in [int(c) for c in args.plain.split(",") if c]:
            print(f"plain: the control of {count} topologies, {args.dag_layout} layout...", flush=True)
            try:
                results.append(plain_dags(count, args.seconds, databases, dag_layout=args.dag_layout))
            except RuntimeError as exc:
                results.append(
                    {
                        "case": "plain",
                        "dag_layout": args.dag_layout,
                        "topologies_equivalent": count,
                        "failed": str(exc)[-3000:],
                    }
                )
            print(json.dumps(results[-1]), flush=True)
            write()
    write()
    if any(r["case"] == "baseline" for r in results):
        print(_table(results))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
