"""
``python -m bench.kafka_broker``: how quickly the real Apache Kafka broker is ready, and its memory.

Starts ``ApacheKafka()`` (``airflow_kafka_retry/sandbox/kafka.py``) with its jars already cached (a
first start resolves them; that start is not measured), ``--starts`` times one after the other, and
records for each: seconds to the first metadata answer, seconds to ready (coordinators warmed up, what
``ApacheKafka.ready_seconds`` reports), and the RSS of the broker's JVM after the suite's capability
probe ran against it. Targets (issue 26): ready in at most 20 s on 2 cores, RSS at most 1.2 GB.

Writes ``bench/results/<UTC date and time>-kafka-broker.json`` (or ``--out DIR``) with the machine's
facts (cores, load average before and after) and prints a summary.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path
from typing import Any

import psutil

from airflow_kafka_retry.engine.local.engine import available_cores
from airflow_kafka_retry.sandbox.kafka import ApacheKafka
from airflow_kafka_retry.sandbox.kafka_jars import ensure_kafka_jars, pinned_version
from bench.results_file import write_new_result
from testkit.capabilities import probe_capabilities

RESULTS = Path(__file__).resolve().parent / "results"
READY_TARGET_S = 20.0
RSS_TARGET_MB = 1.2 * 1024


def measure_once() -> dict[str, Any]:
    """One start of the broker: its start-up times and its RSS after the capability probe."""
    with ApacheKafka() as kafka:
        if kafka.pid is None:
            raise RuntimeError("the broker has no process")
        caps = probe_capabilities(kafka.bootstrap)
        process = psutil.Process(kafka.pid)
        rss = sum(p.memory_info().rss for p in (process, *process.children(recursive=True)))
        return {
            "metadata_s": round(kafka.metadata_seconds or 0.0, 2),
            "ready_s": round(kafka.ready_seconds or 0.0, 2),
            "rss_mb_after_probe": round(rss / 2**20, 1),
            "capabilities_missing": sorted(caps.missing()),
            "probe_s": round(caps.probe_seconds, 2),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kafka_broker", description=__doc__.split("\n")[0])
    parser.add_argument("--starts", type=int, default=3, help="measured starts (default 3)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the results file")
    args = parser.parse_args(argv)
    ensure_kafka_jars()  # resolved (and cached) before anything is timed
    now = datetime.datetime.now(datetime.UTC)
    load_start = [round(x, 2) for x in os.getloadavg()]
    starts = [measure_once() for _ in range(args.starts)]
    best_ready = min(s["ready_s"] for s in starts)
    worst_rss = max(s["rss_mb_after_probe"] for s in starts)
    document = {
        "date": now.isoformat(timespec="seconds"),
        "command": "python -m bench.kafka_broker " + " ".join(argv if argv is not None else sys.argv[1:]),
        "kafka_version": pinned_version(),
        "machine": {
            "cores": available_cores(),
            "load_average": load_start,
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
        },
        "starts": starts,
        "targets": {
            "ready_s": {"target": READY_TARGET_S, "best": best_ready, "met": best_ready <= READY_TARGET_S},
            "rss_mb": {"target": RSS_TARGET_MB, "worst": worst_rss, "met": worst_rss <= RSS_TARGET_MB},
        },
    }
    stamp = document["date"][:19].replace(":", "")  # one file per run: the time is in the name
    path = write_new_result(args.out / f"{stamp}-kafka-broker.json", document)
    for start in starts:
        sys.stdout.write(
            f"metadata {start['metadata_s']:.1f} s, ready {start['ready_s']:.1f} s, "
            f"RSS after probe {start['rss_mb_after_probe']:.0f} MB, missing {start['capabilities_missing']}\n"
        )
    sys.stdout.write(
        f"ready (best) {best_ready:.1f} s (target <= {READY_TARGET_S:.0f} s); RSS (worst) {worst_rss:.0f} MB "
        f"(target <= {RSS_TARGET_MB:.0f} MB); load average {load_start} on {available_cores()} cores\n"
        f"results: {path}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
