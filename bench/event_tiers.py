"""
``python -m bench.event_tiers``: what event-driven and scheduled tiers cost a real Airflow when idle.

    python -m bench.event_tiers                     # baseline, idle event topology, idle scheduled topology
    python -m bench.event_tiers --seconds 120       # a shorter window (default 300 s)
    python -m bench.event_tiers --capacity 50       # also 50 idle event topologies, then one of them active

Each deployment is a real Airflow 3 (api-server, scheduler, dag-processor, triggerer; LocalExecutor on
SQLite, ``airflow_kafka_retry/testing/airflow_stack.py``) on an embedded Tansu broker. After a warm-up
(the DAGs are parsed, each topology's setup DAG and each DAG's first sweep ran), it counts over the
window: DAG runs and task instances created, and the CPU seconds of each Airflow component's process
tree (tasks included) and of the broker. Cases:

* ``baseline``: the same Airflow with no DAG;
* ``event``: one topology (3 tiers of 30 s, 60 s, 120 s and the DLT watch), ``trigger="event"``;
* ``schedule``: the same topology, ``trigger="schedule"`` (every tier polled every delay);
* ``capacity``: N event topologies on one Airflow: idle, then records flow through one of them and its
  lateness (handled - due) is measured, with the DAG files' parse time.

Idle cost = (CPU of the case - CPU of the baseline) / window. It writes
``bench/results/<UTC date>-event-tiers.json`` and prints a table. Timing is measured, never asserted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
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

from airflow_kafka_retry.testing.airflow_stack import COMPONENTS, AirflowCluster, airflow_env
from airflow_kafka_retry.testing.broker import EmbeddedBroker
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
) -> AirflowCluster:
    env = airflow_env(
        home,
        connections={"kafka_default": {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}},
        extra={"AKR_TIMED_LEDGER": str(ledger or home / "handled.jsonl"), "AIRFLOW__CORE__PARALLELISM": "8"},
        pythonpath=[REPO],
    )
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
    return AirflowCluster(home, env, cwd=REPO).start()


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
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"akr-bench-{name}-") as tmp:
        home = Path(tmp)
        cluster = _deploy(bootstrap, home, topologies, trigger)
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


def capacity(bootstrap: str, broker_pid: int, count: int, seconds: float) -> dict[str, Any]:
    """
    ``count`` idle event topologies, then records through the first one; their lateness is measured.

    The records fail once on its main topic, then succeed on retry-1 of 10 s or retry-2 of 30 s.
    """
    names = [f"cap{i:03d}-{datetime.datetime.now(datetime.UTC):%H%M%S}" for i in range(count)]
    with tempfile.TemporaryDirectory(prefix="akr-bench-capacity-") as tmp:
        home = Path(tmp)
        ledger = home / "handled.jsonl"
        cluster = _deploy(
            bootstrap, home, [(n, ("10s", "30s")) for n in names], "event", include_main=True, ledger=ledger
        )
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:  # every setup DAG has run
                done = cluster.query(
                    "SELECT count(*) FROM task_instance WHERE task_id = 'ensure_topics' AND state = 'success'"
                )[0][0]
                if done >= count:
                    break
                time.sleep(5)
            time.sleep(30)
            parse = _parse_seconds(cluster)
            idle = measure_window(cluster, broker_pid, seconds)
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
            return {
                "case": "capacity",
                "topologies": count,
                "dags": 4 * count,
                "parse": parse,
                "idle": idle,
                "active": {**active, "records": records, "lateness": lateness, "handled": len(entries)},
            }
        finally:
            cluster.stop()


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


def _parse_seconds(cluster: AirflowCluster) -> dict[str, Any]:
    """
    The dag-processor's own parse time of each DAG file.

    ``dag.last_parse_duration``, one value per file.
    """
    rows = cluster.query(
        "SELECT fileloc, max(last_parse_duration) FROM dag WHERE last_parse_duration IS NOT NULL "
        "GROUP BY fileloc"
    )
    durations = [d for _, d in rows]
    if not durations:
        return {"files": 0}
    return {
        "files": len(durations),
        "mean_s": round(statistics.mean(durations), 3),
        "max_s": round(max(durations), 3),
    }


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.event_tiers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="measurement window of each case")
    parser.add_argument(
        "--capacity", type=int, default=0, help="also N idle event topologies, then one active"
    )
    parser.add_argument("--cases", default="baseline,event,schedule", help="which idle cases to run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    stamp = datetime.datetime.now(datetime.UTC)
    tiers = ("30s", "60s", "120s")
    results: list[dict[str, Any]] = []
    with EmbeddedBroker() as broker:
        for case in [c for c in args.cases.split(",") if c]:
            name = f"{case}-{stamp:%H%M%S}"
            topologies = [] if case == "baseline" else [(f"idle-{name}", tiers)]
            trigger = "schedule" if case == "schedule" else "event"
            print(
                f"{case}: deploying, {WARM_UP_S}s warm-up, then {args.seconds:.0f}s measured...", flush=True
            )
            results.append(
                {
                    **run_case(broker.bootstrap, broker.pid, case, topologies, trigger, args.seconds),
                    "case": case,
                }
            )
            print(json.dumps(results[-1]), flush=True)
        if args.capacity:
            print(f"capacity: {args.capacity} topologies...", flush=True)
            results.append(capacity(broker.bootstrap, broker.pid, args.capacity, args.seconds))
            print(json.dumps(results[-1]), flush=True)
    document = {
        "date": stamp.isoformat(timespec="seconds"),
        "machine": {
            "cores": psutil.cpu_count(),
            "load_average_at_end": list(psutil.getloadavg()),
            "python": sys.version.split()[0],
            "platform": platform.platform(),
        },
        "window_seconds": args.seconds,
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{stamp:%Y-%m-%d}-event-tiers.json"
    out.write_text(json.dumps(document, indent=2) + "\n")
    if any(r["case"] == "baseline" for r in results):
        print(_table(results))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
