"""
``python -m bench.spark_cluster``: how quickly the Spark standalone test cluster is ready, and its memory.

Starts ``SparkCluster`` (``testkit/spark_cluster.py``: a master and two workers of 1 core
and 1 GB, RPC authenticated and encrypted) ``--starts`` times one after the other, and records for each the
seconds until the master's JSON lists both workers ALIVE, and the RSS of the three daemon JVMs once ready.
Target (issue 40): ready in at most 30 s on 2 cores.

Writes ``bench/results/<UTC date and time>-spark-cluster.json`` (or ``--out DIR``) with the machine's facts
(cores, load average before and after) and prints a summary.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import psutil

from airflow_kafka_retry.engine.local.engine import available_cores
from bench.results_file import write_new_result
from testkit.spark_cluster import SparkCluster

RESULTS = Path(__file__).resolve().parent / "results"
READY_TARGET_S = 30.0


def measure_once() -> dict[str, Any]:
    """One start of the cluster: its start-up time and its daemons' RSS once ready."""
    with tempfile.TemporaryDirectory(prefix="bench-spark-cluster-") as tmp:
        cluster = SparkCluster(Path(tmp) / "cluster")
        try:
            cluster.start()
            rss = 0
            for daemon in (cluster.master, *cluster.workers):
                if daemon is None or daemon.pid is None:
                    raise RuntimeError("a daemon of the cluster has no process")
                process = psutil.Process(daemon.pid)
                rss += sum(p.memory_info().rss for p in (process, *process.children(recursive=True)))
            return {"ready_s": round(cluster.start_seconds or 0.0, 2), "rss_mb": round(rss / 2**20, 1)}
        finally:
            cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_cluster", description=__doc__.split("\n")[1])
    parser.add_argument("--starts", type=int, default=3, help="measured starts (default 3)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the results file")
    args = parser.parse_args(argv)
    now = datetime.datetime.now(datetime.UTC)
    load_start = [round(x, 2) for x in os.getloadavg()]
    starts = [measure_once() for _ in range(args.starts)]
    worst = max(s["ready_s"] for s in starts)
    document = {
        "date": now.isoformat(timespec="seconds"),
        "command": "python -m bench.spark_cluster " + " ".join(argv if argv is not None else sys.argv[1:]),
        "cluster": "a master and 2 workers (1 core, 1 GB each), RPC authenticated and encrypted",
        "machine": {
            "cores": available_cores(),
            "load_average": load_start,
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
        },
        "starts": starts,
        "targets": {"ready_s": {"target": READY_TARGET_S, "worst": worst, "met": worst <= READY_TARGET_S}},
    }
    stamp = document["date"][:19].replace(":", "")
    path = write_new_result(args.out / f"{stamp}-spark-cluster.json", document)
    print(
        f"Spark standalone cluster ready in {[s['ready_s'] for s in starts]} s (target {READY_TARGET_S:g} s),"
    )
    print(f"daemons' RSS {[s['rss_mb'] for s in starts]} MB; {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
