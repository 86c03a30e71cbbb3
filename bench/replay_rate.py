"""
``python -m bench.replay_rate``: a DLT replay held at ``--rate``, measured over every window, exactly once.

    python -m bench.replay_rate                          # 20,000 records at 200/s, 10 s windows (~100 s)
    python -m bench.replay_rate --records 2000 --rate 100/s --window 5     # a smoke run
    python -m bench.replay_rate --stop-after 40     # stopped 40 s in, as dlt replay-stop does, then resumed
    python -m bench.replay_rate --through dag       # run by the replay DAG's task (airflow dags test)

A real Apache Kafka (``sandbox/kafka.py``, or ``--bootstrap``). The DLT of a fresh topology (two
partitions) is filled with ``--records`` records, then one replay moves them all to the main topic at
``--rate`` (``dlt/replay.py``, as ``airflow-kafka-retry dlt replay --to main --rate`` does). Then the
copies are read back (``read_committed``): their count, any key copied twice or missing, and the moves in
each ``--window`` seconds, by the copies' timestamps (each chunk's copies are produced together, after its
pacing wait), from the first copy on; the last window, shorter, is reported apart. Target: every full
window within 10 % of the rate. The machine's load (``os.getloadavg`` before and after, other processes
share its cores) and the replay's own summary and status go with the figures, whole, to
``bench/results/<UTC start>-replay-rate.json``. Measured, never asserted.

``--stop-after S`` stops the replay ``S`` seconds in and resumes it by its id (``bench/replay_stop.py``:
the stop's latency and the moves after it; the windows are the resumed run's), ``-stop.json``;
``--through dag`` runs it as the replay DAG's task (``bench/replay_dag.py``), ``-dag.json``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from airflow_kafka_retry.dlt.replay import Replay, ReplayRequest
from airflow_kafka_retry.dlt.replay_status import ReplayStatusView
from airflow_kafka_retry.engine.kafka.messages import headers_of
from airflow_kafka_retry.engine.kafka.reading import TopicReader
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.policy.headers import replay as R
from airflow_kafka_retry.policy.timing.pacing import parse_rate
from airflow_kafka_retry.policy.topology.model import Topology
from bench.given_broker import given_broker
from bench.replay_dag import run_replay_dag
from bench.replay_stop import REPLAY_ID, stop_and_resume
from bench.results_file import write_new_result

RESULTS = Path(__file__).parent / "results"
PARTITIONS = 2
TOLERANCE = 0.10


def _fill(config: dict[str, Any], records: int) -> tuple[Topology, dict[str, Any]]:
    """A fresh topology (and its mapping, for a topology file) whose DLT holds ``records`` records."""
    topic = f"bench-replay-rate-{uuid.uuid4().hex[:8]}"
    mapping = {
        "topic": topic,
        "group_id": f"{topic}-svc",
        "attempts": 2,
        "backoff": {"kind": "fixed", "delay": "0ms"},
    }
    topology = Topology.from_mapping(mapping, source=f"<bench {topic}>")
    ensure_topics(topology, config, partitions=PARTITIONS)
    dlt = str(topology.dlt_topic)
    producer = Producer({**config, "enable.idempotence": True, "linger.ms": 20})
    for i in range(records):
        producer.produce(dlt, key=str(i).encode(), value=b"{}", partition=i % PARTITIONS)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(60):
        raise RuntimeError(f"{topology.dlt_topic}: not every record was acknowledged")
    return topology, mapping


def _copies(config: dict[str, Any], topic: str) -> list[tuple[str, int]]:
    """(key, timestamp ms) of each replayed copy in ``topic`` (read_committed)."""
    out = []
    with TopicReader(config) as reader:
        for partition in range(reader.partitions(topic)):
            for message in reader.read(topic, partition):
                if R.is_replayed(headers_of(message)):
                    out.append(((message.key() or b"").decode(), message.timestamp()[1]))
    return out


def windows(stamps: list[int], window_s: float) -> tuple[list[float], dict[str, float] | None]:
    """Moves per second in each full ``window_s`` window from the first stamp; the last, shorter one apart."""
    if not stamps:
        return [], None
    first, counts = min(stamps), Counter[int]()
    for stamp in stamps:
        counts[int((stamp - first) / 1000 // window_s)] += 1
    last = max(counts)
    full = [counts[i] / window_s for i in range(last)]
    tail_s = (max(stamps) - first) / 1000 - last * window_s
    tail = {"seconds": round(tail_s, 2), "records": counts[last]}
    return [round(r, 1) for r in full], tail


def _uptime() -> str:
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, timeout=5, check=False
        ).stdout.strip()
    except OSError:
        return "uptime: not available"


def measure(
    bootstrap: str,
    records: int,
    rate_text: str,
    chunk_size: int,
    window_s: float,
    *,
    stop_after_s: float | None = None,
    through: str = "process",
    home: Path | None = None,
) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap}
    rate = parse_rate(rate_text)
    if rate is None:
        raise SystemExit("--rate: give a rate such as 200/s")
    topology, mapping = _fill(config, records)
    figures: dict[str, Any] = {"records": records, "rate": rate, "through": through, "window_s": window_s}
    began = time.monotonic()
    if stop_after_s is not None:
        stop = stop_and_resume(topology, config, rate, chunk_size, stop_after_s)
        figures["stop"] = stop
        replay_id, moved, transactions = REPLAY_ID, records, None
        windows_from_ms = stop["resumed_at_ms"]  # the resumed run's windows (the stop is a gap)
        figures["chunk_size"] = stop["chunk_size"]
    elif through == "dag":
        ran = run_replay_dag(
            home or Path(tempfile.mkdtemp(prefix="bench-replay-dag-")), mapping, bootstrap, rate, records
        )
        summary = ran["summary"]
        figures["dags_test_seconds"] = ran["dags_test_seconds"]
        replay_id, moved, transactions = summary["replay_id"], summary["moved"], summary["transactions"]
        windows_from_ms, figures["chunk_size"] = 0, None
    else:
        replay = Replay(topology, config, ReplayRequest(to="main"), rate=rate, chunk_size=chunk_size)
        done = replay.run()
        replay_id, moved, transactions = done.replay_id, done.moved, done.transactions
        windows_from_ms, figures["chunk_size"] = 0, replay.chunk_size
    took = time.monotonic() - began
    copies = _copies(config, topology.topic)
    keys = Counter(key for key, _ in copies)
    full, tail = windows([stamp for _, stamp in copies if stamp >= windows_from_ms], window_s)
    within = [abs(r - rate) <= TOLERANCE * rate for r in full]
    (status,) = ReplayStatusView(topology, config).read(replay_id)
    return {
        **figures,
        "replay_seconds": round(took, 2),
        "overall_rate": round(moved / took, 1),
        "copies": len(copies),
        "duplicated_keys": sum(1 for n in keys.values() if n > 1),
        "missing_keys": records - len(keys),
        "exactly_once": len(copies) == records == len(keys),
        "window_rates": full,
        "window_min": min(full, default=None),
        "window_max": max(full, default=None),
        "windows_within_10_percent": f"{sum(within)}/{len(within)}",
        "last_window": tail,
        "transactions": transactions,
        "status": {k: status.get(k) for k in ("state", "moved", "remaining", "rate", "measured_rate")},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replay_rate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rate", default="200/s")
    parser.add_argument("--chunk-size", type=int, default=100)
    parser.add_argument("--window", type=float, default=10.0, help="seconds per window")
    parser.add_argument(
        "--stop-after",
        type=float,
        default=None,
        metavar="S",
        help="stop the replay S seconds in (as dlt replay-stop does), then resume it by its id",
    )
    parser.add_argument(
        "--through",
        choices=("process", "dag"),
        default="process",
        help="dag: run the replay DAG's task with airflow dags test (no --stop-after)",
    )
    parser.add_argument("--bootstrap", default=None, help="a running broker (default: start one)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.stop_after is not None and args.through == "dag":
        parser.error("--stop-after runs the replay in-process: not with --through dag")
    stamp = datetime.datetime.now(datetime.UTC)
    load_before, uptime_before = os.getloadavg(), _uptime()
    with given_broker(args.bootstrap) as (bootstrap, _):
        figures = measure(
            bootstrap,
            args.records,
            args.rate,
            args.chunk_size,
            args.window,
            stop_after_s=args.stop_after,
            through=args.through,
        )
    document: dict[str, Any] = {
        "bench": "replay_rate",
        "command": shlex.join([sys.executable, "-m", "bench.replay_rate", *(argv or sys.argv[1:])]),
        "started": f"{stamp:%Y-%m-%dT%H:%M:%SZ}",
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_before": load_before,
            "uptime_before": uptime_before,
        },
        "load_average_after": os.getloadavg(),
        "uptime_after": _uptime(),
        "figures": figures,
    }
    suffix = "-stop" if args.stop_after is not None else "-dag" if args.through == "dag" else ""
    path = write_new_result(args.out / f"{stamp:%Y-%m-%dT%H%M%SZ}-replay-rate{suffix}.json", document)
    for name in ("records", "rate", "chunk_size", "replay_seconds", "overall_rate", "copies", "exactly_once"):
        print(f"{name}: {figures[name]}")
    within = figures["windows_within_10_percent"]
    print(f"windows ({args.window:g}s): {figures['window_rates']} -> {within} within 10%")
    print(f"last window: {figures['last_window']}; status: {figures['status']}")
    if "stop" in figures:
        stop = figures["stop"]
        for name in (
            "stop_to_end_s",
            "stop_to_status_stopped_s",
            "moved_after_request",
            "within_one_chunk_of_request",
            "stop_written_s",
            "written_to_end_s",
            "moved_after_written",
            "within_one_chunk_of_written",
        ):
            print(f"stop: {name}: {stop[name]}")
        print(f"stop: status {stop['status_after_stop']}; resumed {stop['resumed_run']}")
    print(f"load: before {uptime_before}; after {document['uptime_after']}")
    print(f"result: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
