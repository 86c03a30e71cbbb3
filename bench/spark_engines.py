"""
``python -m bench.spark_engines``: the local engine, Spark on ``local[2]`` and Spark on a standalone cluster.

Starts a real Apache Kafka broker (``sandbox/kafka.py``) and the Spark standalone test cluster
(``testkit/spark_cluster.py``: a master and 2 workers of 1 core and 1 GB, RPC authenticated and encrypted).
For each size (``--records``, over ``--partitions`` 4) and handler cost (``--handler-ms``: CPU time the
handler burns per record, measured with ``time.thread_time``, so a loaded machine does not shorten it), the
same records (200-byte values) go to the main topic of a fresh topology per engine, and one
``airflow-kafka-retry drain --tier 0`` runs it as a user would, in a child process with a deadline:

* ``local``: the CLI's default engine at its defaults (``--parallelism`` cores + 1, in worker processes);
  ``local-p<N>``: the same with ``--parallelism N`` (all partitions at once with N = partitions);
* ``spark local[2]``: ``--engine spark --master local[2]`` (driver and executor in one JVM);
* ``spark cluster``: ``--engine spark --master spark://...``, an executor JVM on each worker.

The handler is a module the bench writes (``akr_bench_cost.py``), shipped to executors by the CLI's own
``--py-files``; its cost reaches them as ``spark.executorEnv.AKR_BENCH_HANDLER_MS``. Per run: the drain
command's wall time, records/s, the summary's totals and ``duration_s`` (the drain inside the run; for Spark,
the wall time minus it is the spark-submit, JVM and executor start-up), and the load average before and after.
A run that fails or drains another count than produced stops the bench with its output.

Writes ``bench/results/<UTC stamp>-spark-engines.json`` whole and prints a table; with two sizes it also
fits ``wall = fixed + records x per-record`` for each engine and cost.

Measured (``bench/results/2026-11-28T223132Z-spark-engines.json``; 2 cores shared with other engineers'
tests, load average 2.0-2.75 with this bench's own drains in it): a drain's fixed cost is 0.4-0.8 s with the
local engine, 5.3 s with Spark on ``local[2]`` and 7.5 s on the cluster (2.5-2.9 s of it before the driver's
run starts: spark-submit, the JVM, Python); the per-record cost at 1 ms of handler CPU is 0.51-0.54 ms on all
four (both cores busy: 1 ms / 2 cores), and at 0 ms it is 0.01-0.03 ms. With equal per-record costs, Spark
never pays off on this machine: it loses its fixed cost on every drain (60,000 records at 1 ms: 31.1-31.4 s
local, 36.4 s ``local[2]``, 40.0 s cluster). Not measured: Spark runs one task per Kafka partition, so with
more executor cores than the Airflow worker has (and at least as many partitions), its per-record term
divides by those cores and it pays off once ``records x (h / local cores - h / executor cores)`` exceeds the
fixed-cost difference (about 7 s here), h being the handler's CPU per record; see docs/performance.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]
ENGINES = ("local", "local-p4", "local[2]", "cluster")
DRAIN_TIMEOUT_S = 600.0
VALUE = b"x" * 200
#: the handler users would ship: its own module, no import of the bench (the whole folder would be zipped)
HANDLER_MODULE = "akr_bench_cost"
HANDLER_SOURCE = '''"""Written by bench/spark_engines.py: burns AKR_BENCH_HANDLER_MS of CPU per record."""
import os
import time

COST_S = float(os.environ.get("AKR_BENCH_HANDLER_MS", "0")) / 1000


def handle(records):
    if COST_S <= 0:
        return
    for _ in records:
        end = time.thread_time() + COST_S
        while time.thread_time() < end:
            pass
'''
JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _numbers(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def spark_conf(engine: str, handler_ms: float) -> dict[str, str]:
    """Spark properties of a run (none secret: the cluster's auth settings come from its private file)."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.driver.memory": "512m",
        "spark.driver.extraJavaOptions": JVM,
        "spark.executorEnv.AKR_BENCH_HANDLER_MS": str(handler_ms),
    }
    if engine == "cluster":  # both executors registered before the first task, each in its own JVM
        conf |= {
            "spark.executor.memory": "512m",
            "spark.executor.extraJavaOptions": JVM,
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        }
    return conf


def produce_records(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    """``records`` records spread evenly over the partitions, every delivery checked."""
    from confluent_kafka import Producer

    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(records):
        producer.produce(topic, value=VALUE, key=b"%09d" % i, partition=i % partitions, on_delivery=delivered)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(60) or failures:
        raise RuntimeError(f"produce to {topic}: {len(failures)} failed deliveries {failures[:3]}")


def run_drain(
    engine: str, records: int, handler_ms: float, *, bootstrap: str, work: Path, cluster: Any, partitions: int
) -> dict[str, Any]:
    """One engine's drain of a fresh main topic holding ``records`` records; its measurements."""
    from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
    from airflow_kafka_retry.policy.topology.file import load_topology

    name = f"bench-spark-engines-{uuid.uuid4().hex[:10]}"
    topology_file = work / f"{name}.yaml"
    topology_file.write_text(
        yaml.safe_dump(
            {
                "topic": name,
                "group_id": f"{name}-svc",
                "attempts": 2,
                "backoff": {"kind": "fixed", "delay": "0ms"},
            }
        )
    )
    ensure_topics(load_topology(topology_file), {"bootstrap.servers": bootstrap}, partitions=partitions)
    produce_records(bootstrap, name, records, partitions)
    cmd = [sys.executable, "-m", "airflow_kafka_retry.cli", "drain", "--topology", str(topology_file)]
    cmd += ["--tier", "0", "--bootstrap", bootstrap, "--handler", f"{HANDLER_MODULE}:handle"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(work), str(REPO)))}
    env["AKR_BENCH_HANDLER_MS"] = str(handler_ms)
    if engine.startswith("local-p"):
        cmd += ["--parallelism", engine.removeprefix("local-p")]
    elif engine != "local":
        master = cluster.master_url if engine == "cluster" else engine
        cmd += ["--engine", "spark", "--master", master]
        for key, value in spark_conf(engine, handler_ms).items():
            cmd += ["--conf", f"{key}={value}"]
        if engine == "cluster":
            env.update(cluster.client_env())
    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.monotonic()
    done = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=DRAIN_TIMEOUT_S, check=False, cwd=work
    )
    wall = time.monotonic() - started
    what = f"{engine}, {records} records, {handler_ms:g} ms/record"
    if done.returncode != 0:
        raise RuntimeError(
            f"drain ({what}) exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
        )
    summary = json.loads(done.stdout)
    totals = summary["totals"]
    if totals["drained"] != records or totals["succeeded"] != records or totals["failed_partitions"]:
        raise RuntimeError(f"drain ({what}) drained {totals} of {records} records")
    return {
        "engine": engine,
        "records": records,
        "handler_ms": handler_ms,
        "wall_s": round(wall, 2),
        "records_per_s": round(records / wall, 1),
        "drain_duration_s": summary["duration_s"],
        "outside_drain_s": round(wall - summary["duration_s"], 2),
        "totals": totals,
        "partition_s": [p["duration_s"] for p in summary["partitions"]],
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }


def fit(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each engine and cost with two sizes or more: wall = fixed + records x per-record (ends)."""
    lines = []
    for key in sorted({(r["engine"], r["handler_ms"]) for r in runs}):
        rows = sorted((r for r in runs if (r["engine"], r["handler_ms"]) == key), key=lambda r: r["records"])
        if len(rows) < 2 or rows[-1]["records"] == rows[0]["records"]:
            continue
        slope = (rows[-1]["wall_s"] - rows[0]["wall_s"]) / (rows[-1]["records"] - rows[0]["records"])
        fixed = rows[0]["wall_s"] - slope * rows[0]["records"]
        lines.append(
            {
                "engine": key[0],
                "handler_ms": key[1],
                "fixed_s": round(fixed, 2),
                "per_record_ms": round(slope * 1000, 4),
                "records_per_s_marginal": round(1 / slope, 1) if slope > 0 else None,
            }
        )
    return lines


def table(runs: list[dict[str, Any]], lines: list[dict[str, Any]]) -> str:
    out = [
        "| engine | records | handler ms | wall s | records/s | drain s | outside drain s | load 1 min |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        out.append(
            f"| {r['engine']} | {r['records']} | {r['handler_ms']:g} | {r['wall_s']} | {r['records_per_s']} "
            f"| {r['drain_duration_s']} | {r['outside_drain_s']} | {r['load_average_before'][0]} |"
        )
    if lines:
        out += [
            "",
            "| engine | handler ms | fixed s | per record ms | marginal records/s |",
            "|---|---:|---:|---:|---:|",
        ]
        for f in lines:
            out.append(
                f"| {f['engine']} | {f['handler_ms']:g} | {f['fixed_s']} | {f['per_record_ms']} "
                f"| {f['records_per_s_marginal']} |"
            )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_engines", description=__doc__.split("\n")[1])
    parser.add_argument("--records", type=_numbers, default=[2000, 20000], help="sizes (2000,20000)")
    parser.add_argument("--handler-ms", type=_numbers, default=[0.0, 1.0], help="CPU ms per record (0,1)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the main topic (4)")
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"among {','.join(ENGINES)}")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the results file")
    args = parser.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    if not all(e in ENGINES or e.removeprefix("local-p").isdigit() for e in engines):
        parser.error(f"--engines: among {ENGINES} (local-p<N>: any N)")

    from airflow_kafka_retry.engine.local.engine import available_cores
    from airflow_kafka_retry.sandbox.kafka import ApacheKafka
    from bench.results_file import write_new_result
    from testkit.spark_cluster import SparkCluster

    now = datetime.datetime.now(datetime.UTC)
    load_start = [round(x, 2) for x in os.getloadavg()]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-spark-engines-") as tmp:
        work = Path(tmp)
        (work / f"{HANDLER_MODULE}.py").write_text(HANDLER_SOURCE)
        with ApacheKafka() as kafka, SparkCluster(work / "cluster") as cluster:
            where: dict[str, Any] = {"bootstrap": kafka.bootstrap, "work": work, "cluster": cluster}
            where["partitions"] = args.partitions
            for records in args.records:
                for handler_ms in args.handler_ms:
                    for engine in engines:
                        run = run_drain(engine, int(records), handler_ms, **where)
                        print(
                            f"{engine:9} {int(records):7} records {handler_ms:g} ms: {run['wall_s']} s "
                            f"({run['records_per_s']}/s), load {run['load_average_before'][0]}",
                            flush=True,
                        )
                        runs.append(run)
            cluster_ready = round(cluster.start_seconds or 0.0, 2)
    lines = fit(runs)
    document = {
        "date": now.isoformat(timespec="seconds"),
        "command": "python -m bench.spark_engines " + " ".join(argv if argv is not None else sys.argv[1:]),
        "workload": {
            "partitions": args.partitions,
            "value_bytes": len(VALUE),
            "handler": "burns handler_ms of thread CPU time per record (time.thread_time), never fails",
            "local": "the CLI's default engine at its defaults (parallelism cores + 1, worker processes)",
            "local-p<N>": "the local engine with --parallelism N",
            "local[2]": "--engine spark --master local[2]",
            "cluster": "--engine spark --master spark://: 2 workers x 1 core, 1 GB; executors of 512 MB; "
            "RPC authenticated and encrypted",
        },
        "machine": {
            "cores": available_cores(),
            "shared": "the cores are shared with other engineers' tests: see the load averages",
            "load_average": load_start,
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
            "cluster_ready_s": cluster_ready,
        },
        "runs": runs,
        "fit": lines,
    }
    path = write_new_result(args.out / f"{now:%Y-%m-%dT%H%M%SZ}-spark-engines.json", document)
    print(table(runs, lines))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
