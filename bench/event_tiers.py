"""
``python -m bench.event_tiers``: what event-driven and scheduled tiers cost a real Airflow when idle.

    python -m bench.event_tiers                     # baseline, idle event topology, idle scheduled topology
    python -m bench.event_tiers --seconds 120       # a shorter window (default 300 s)
    python -m bench.event_tiers --capacity 50       # also 50 idle event topologies, then one of them active
    python -m bench.event_tiers --cases "" --capacity 1 --seconds 60   # event-mode lateness of one topology
    python -m bench.event_tiers --cases baseline --capacity 200,50,100 --seconds 120 --name capacity
    python -m bench.event_tiers --postgres --cases baseline --capacity 50,100,200 --name capacity-pg

Each deployment is a real Airflow 3 (api-server, scheduler, dag-processor, triggerer; LocalExecutor on
SQLite, or with ``--postgres`` on a private PostgreSQL server; ``testing/airflow_stack.py``)
on a real Apache Kafka broker (``--broker tansu``: the embedded Tansu). After a warm-up
(the DAGs are parsed, each topology's setup DAG and each DAG's first sweep ran), it counts over the
window: DAG runs and task instances created, and the CPU seconds of each Airflow component's process
tree (tasks included) and of the broker. Cases:

* ``baseline``: the same Airflow with no DAG;
* ``event``: one topology (3 tiers of 30 s, 60 s, 120 s and the DLT watch), ``trigger="event"``;
* ``schedule``: the same topology, ``trigger="schedule"`` (every tier polled every delay);
* ``capacity``: N event topologies on one Airflow: idle, then records flow through one of them and its
  lateness (handled - due) is measured, with the DAG files' parse time.

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
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Producer

from airflow_kafka_retry.engine.topics import ensure_retry_topics
from airflow_kafka_retry.policy.topology import load_topology
from airflow_kafka_retry.testing.airflow_postgres import AirflowDatabases
from airflow_kafka_retry.testing.airflow_stack import COMPONENTS, AirflowCluster, airflow_env
from airflow_kafka_retry.testing.broker import EmbeddedBroker
from airflow_kafka_retry.testing.kafka import ApacheKafka
from airflow_kafka_retry.testing.postgres import PostgresCluster
from airflow_kafka_retry.testing.topics import create_topics

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
PARTITIONS = 2
WARM_UP_S = 90

DAG_FILE = """
from datetime import timedelta

from airflow_kafka_retry import build_retry_dags

globals().update(build_retry_dags(
    {topology!r},
    handler="tests.support.timed_handler:handle",
    include_main={include_main},
    dag_id_template="{prefix}__{{topic}}",
    default_args={{"retries": 0}},
    trigger={trigger!r},
    min_schedule=timedelta(seconds=10),
))
"""


FOLDER_DAG_FILE = """
from datetime import timedelta

from airflow_kafka_retry import build_retry_dags_from_folder

dags = build_retry_dags_from_folder(
    {folder!r},
    handler="tests.support.timed_handler:handle",
    include_main=True,
    default_args={{"retries": 0}},
    min_schedule=timedelta(seconds=10),
    auto_register=False,  # only the DAGs put in globals() below are collected
)
# the bench created every topic (what each topology's @once setup DAG does): no setup DAG, no 2N task starts
globals().update({{k: v for k, v in dags.items() if not k.endswith("__ensure_topics")}})
"""


def _cpu_seconds(proc: psutil.Process) -> float:
    """
    CPU seconds of a process tree: every live process's own, and what each reaped from its dead children.

    A task process ends; its supervisor, a live executor worker, reaped it.
    """
    total = 0.0
    try:
        tree = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return total
    for member in tree:
        try:
            times = member.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def _cpu(cluster: AirflowCluster, broker_pid: int) -> dict[str, float]:
    found = {name: _cpu_seconds(psutil.Process(p.pid)) for name, p in cluster.processes.items()}
    found["broker"] = _cpu_seconds(psutil.Process(broker_pid))
    return found


def _counts(cluster: AirflowCluster) -> tuple[int, int]:
    [(runs,)] = cluster.query("SELECT count(*) FROM dag_run")
    [(tis,)] = cluster.query("SELECT count(*) FROM task_instance")
    return runs, tis


def _topology(home: Path, name: str, delays: tuple[str, ...]) -> Path:
    path = home / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "topic": name,
                "group_id": f"{name}-svc",
                "attempts": len(delays) + 1,
                "backoff": {"kind": "custom", "delays": list(delays)},
            }
        )
    )
    return path


def _deploy(
    bootstrap: str,
    home: Path,
    topologies: list[tuple[str, tuple[str, ...]]],
    trigger: str,
    *,
    include_main: bool = False,
    ledger: Path | None = None,
    layout: str = "per_file",
    databases: AirflowDatabases | None = None,
) -> AirflowCluster:
    database_url = databases.new() if databases is not None else None
    env = airflow_env(
        home,
        connections={"kafka_default": {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}},
        extra={
            "AKR_TIMED_LEDGER": str(ledger or home / "handled.jsonl"),
            "AIRFLOW__CORE__PARALLELISM": "8",
            # Airflow's default parse interval (as the test stacks': said here for the capacity table)
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            # an idle topology's DAGs must not pay for byte-compiling the provider at every parse
            "PYTHONDONTWRITEBYTECODE": "",
            # a folder of many topologies is one file: on a loaded machine its parse can outlast the
            # default timeouts (30 s import, 50 s processor); raised so the parse is measured, not killed
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "600",
            "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "900",
        },
        pythonpath=[REPO],
        database_url=database_url,
    )
    if layout == "folder":  # one DAG file for every topology YAML of a folder (capacity)
        folder = home / "topologies"
        folder.mkdir(exist_ok=True)
        create_topics(bootstrap, [name for name, _ in topologies], PARTITIONS)
        for name, delays in topologies:
            path = _topology(home, name, delays).rename(folder / f"{name}.yaml")
            ensure_retry_topics(load_topology(path), {"bootstrap.servers": bootstrap})
        (home / "dags" / "retry_topologies.py").write_text(FOLDER_DAG_FILE.format(folder=str(folder)))
        topologies = []
    for name, delays in topologies:
        create_topics(bootstrap, [name], PARTITIONS)
        (home / "dags" / f"{name}.py").write_text(
            textwrap.dedent(
                DAG_FILE.format(
                    topology=str(_topology(home, name, delays)),
                    include_main=include_main,
                    prefix=name.replace("-", "_"),
                    trigger=trigger,
                )
            )
        )
    return AirflowCluster(home, env, cwd=REPO, migrated=database_url is not None).start()


def measure_window(
    cluster: AirflowCluster, broker_pid: int, seconds: float, *, during: Callable[[], None] | None = None
) -> dict[str, Any]:
    runs0, tis0 = _counts(cluster)
    cpu0 = _cpu(cluster, broker_pid)
    started = time.monotonic()
    if during is not None:
        during()
    while time.monotonic() - started < seconds:
        cluster.check_alive()
        time.sleep(1)
    elapsed = time.monotonic() - started
    runs1, tis1 = _counts(cluster)
    cpu1 = _cpu(cluster, broker_pid)
    cpu = {name: round(cpu1[name] - cpu0[name], 2) for name in cpu1}
    airflow = round(sum(cpu[name] for name in COMPONENTS), 2)
    return {
        "seconds": round(elapsed, 1),
        "dag_runs": runs1 - runs0,
        "task_instances": tis1 - tis0,
        "cpu_seconds": cpu,
        "airflow_cpu_seconds": airflow,
        "airflow_cpu_percent_of_one_core": round(100 * airflow / elapsed, 2),
    }


def run_case(
    bootstrap: str,
    broker_pid: int,
    name: str,
    topologies: list[tuple[str, tuple[str, ...]]],
    trigger: str,
    seconds: float,
    databases: AirflowDatabases | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"akr-bench-{name}-") as tmp:
        home = Path(tmp)
        cluster = _deploy(bootstrap, home, topologies, trigger, databases=databases)
        try:
            time.sleep(WARM_UP_S)  # parse, setup DAGs, first sweeps
            warm_runs, warm_tis = _counts(cluster)
            by_dag = dict(cluster.query("SELECT dag_id, count(*) FROM dag_run GROUP BY dag_id"))
            result = measure_window(cluster, broker_pid, seconds)
            result.update(
                {
                    "case": name,
                    "trigger": trigger,
                    "topologies": len(topologies),
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


def capacity(
    bootstrap: str, broker_pid: int, count: int, seconds: float, databases: AirflowDatabases | None = None
) -> dict[str, Any]:
    """
    ``count`` idle event topologies from one folder DAG file, then records through the first one.

    The records fail once on its main topic, then succeed on retry-1 of 10 s or retry-2 of 30 s; their
    lateness is measured. Each topology: its main topic, two retry tiers and the DLT watch (4 watchers).
    """
    stamp = datetime.datetime.now(datetime.UTC)
    names = [f"cap{i:03d}-{stamp:%H%M%S}" for i in range(count)]
    with tempfile.TemporaryDirectory(prefix="akr-bench-capacity-") as tmp:
        home = Path(tmp)
        ledger = home / "handled.jsonl"
        started = time.monotonic()
        cluster = _deploy(
            bootstrap,
            home,
            [(n, ("10s", "30s")) for n in names],
            "event",
            include_main=True,
            ledger=ledger,
            layout="folder",
            databases=databases,
        )
        try:
            watchers = 4 * count
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline:  # every watcher runs in the triggerer
                running = cluster.query("SELECT count(*) FROM trigger WHERE triggerer_id IS NOT NULL")[0][0]
                if running >= watchers:
                    break
                cluster.check_alive()
                time.sleep(5)
            ready_s = round(time.monotonic() - started, 1)
            time.sleep(30)
            parse = _parse_seconds(cluster, count)
            load_start = os.getloadavg()
            idle = measure_window(cluster, broker_pid, seconds)
            idle.update(
                {
                    "triggers_running": running,
                    # since deployment: an idle topology creates no run (its sweeps are weekly)
                    "dag_runs_since_deployment": _counts(cluster)[0],
                    "triggerer_rss_mb": _rss_mb(cluster.processes["triggerer"].pid),
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
                    }
            every = [(e["handled_ms"] - e["due_ms"]) / 1000 for e in entries if "-retry-" in e["topic"]]
            return {
                "case": "capacity",
                "layout": "one folder DAG file",
                "topologies": count,
                "dags": 4 * count,
                "watchers": watchers,
                "ready_seconds": ready_s,
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
                },
            }
        finally:
            cluster.stop()


def _rss_mb(pid: int) -> float:
    """Resident memory of a process and its children, in MB."""
    proc = psutil.Process(pid)
    total = 0
    for member in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += member.memory_info().rss
    return round(total / 2**20, 1)


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


def _parse_seconds(cluster: AirflowCluster, topologies: int = 0) -> dict[str, Any]:
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


def _table(results: list[dict[str, Any]]) -> str:
    base = next(r for r in results if r["case"] == "baseline")
    lines = [
        "| case | DAG runs | task instances | Airflow CPU s | over baseline, % of one core | broker CPU s |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        if r["case"] == "capacity":
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
        "load_average_*: the machine's 1, 5 and 15 minute load averages; on a shared machine other work "
        "competes for the cores, so compare cases within one run."
    ),
]


def claim_result_file(folder: Path, stamp: datetime.datetime, name: str = "event-tiers") -> Path:
    """
    This run's own results file, named by its UTC start time; created empty now, never over another run's.

    The run rewrites it whole after each case (a run cut short keeps what it measured).
    """
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{stamp:%Y-%m-%dT%H%M%SZ}-{name}.json"
    out.open("x").close()  # FileExistsError rather than overwrite a stored result
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.event_tiers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="measurement window of each case")
    parser.add_argument(
        "--capacity", default="", help="also N idle event topologies, then one active; a list: 200,50,100"
    )
    parser.add_argument("--cases", default="baseline,event,schedule", help="which idle cases to run")
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="kafka", help="Apache Kafka or Tansu")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="the metadata DB on a private PostgreSQL server (Debian's postgresql) instead of SQLite",
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
            "broker": {"kafka": "Apache Kafka (testing/kafka.py)", "tansu": "Tansu (embedded)"}[args.broker],
            "metadata_db": "PostgreSQL (testing/postgres.py)" if args.postgres else "SQLite",
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
            "results": results,
            "notes": NOTES,
        }
        out.write_text(json.dumps(document, indent=2) + "\n")

    with contextlib.ExitStack() as stack:
        kind: ApacheKafka | EmbeddedBroker = ApacheKafka() if args.broker == "kafka" else EmbeddedBroker()
        broker = stack.enter_context(kind)
        databases = AirflowDatabases(stack.enter_context(PostgresCluster())) if args.postgres else None
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
                        broker.bootstrap, broker.pid, case, topologies, trigger, args.seconds, databases
                    ),
                    "case": case,
                }
            )
            print(json.dumps(results[-1]), flush=True)
            write()
        for count in [int(c) for c in args.capacity.split(",") if c]:
            print(f"capacity: {count} topologies...", flush=True)
            try:
                results.append(capacity(broker.bootstrap, broker.pid, count, args.seconds, databases))
            except RuntimeError as exc:  # a component died (e.g. SQLite "database is locked"): say so
                results.append({"case": "capacity", "topologies": count, "failed": str(exc)[-3000:]})
            print(json.dumps(results[-1]), flush=True)
            write()
    write()
    if any(r["case"] == "baseline" for r in results):
        print(_table(results))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
