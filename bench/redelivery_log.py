"""
``python -m bench.redelivery_log``: what the share-group input lane holds and reads of a big redelivery log.

    python -m bench.redelivery_log                        # 1,000,000 redeliveries logged over 6 days
    python -m bench.redelivery_log --entries 20000 --in-flight 500 --dead-letters 50   # a smoke run
    python -m bench.redelivery_log --accepted-every 2     # half the redelivered records accepted

A real Apache Kafka (``sandbox/kafka.py``, or ``--bootstrap``) and a share-group topology
(``on_due: redeliver``). One fast producer writes the log as a week of tier runs and input-lane runs would
have: ``--entries`` entries (timestamps spread over ``--span-days``), each followed ``--in-flight`` entries
later by its tombstone (its record was dead-lettered again and the input lane used the entry), except every
``--accepted-every``-th, whose record the share consumer accepted (never used: it stays until retention).
Then ``--dead-letters`` dead letters of records still in flight go to the DLQ.

In a child process of its own: the input lane's first run (``run_local``, in-process, as an Airflow task
runs it): its wall time and the log records it read; then more redeliveries, tombstones and dead letters,
and a second run: what it read; lookups of the view; the view's memory (``sys.getsizeof`` of what it
holds, ``tracemalloc`` of a fresh view's read, and the child's peak RSS). Against the old behaviour's
figure: every entry ever logged held, 416 bytes each (issue 48). The result, with the command, the machine
and its load, goes whole to ``bench/results/<UTC start>-redelivery-log.json``. Measured, never asserted.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import shlex
import sys
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.logs.redelivery_log import ensure_redelivery_log, redelivery_log_topic
from airflow_kafka_retry.policy.routing.share_redelivery import Redelivery, entry_key
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import CLIENT_LOGGER, create_topics
from bench.given_broker import given_broker
from bench.results_file import write_new_result

RESULTS = Path(__file__).parent / "results"
OLD_BYTES_PER_ENTRY = 416  # issue 48: the old view held every entry ever logged
DAY_MS = 24 * 3600 * 1000


def _topology(source: str, dlq: str) -> dict[str, Any]:
    return {
        "topic": source,
        "group_id": f"{source}-retrier",
        "input": {"family": "share-group", "dlq": dlq},
        "on_due": "redeliver",
        "attempts": 5,
        "backoff": {"kind": "fixed", "delay": "60s"},
    }


def _producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 500_000,
            "compression.type": "lz4",
            "logger": CLIENT_LOGGER,
        }
    )


def _produce(producer: Producer, topic: str, **record: Any) -> None:
    while True:
        try:
            producer.produce(topic, **record)
            return
        except BufferError:
            producer.poll(0.05)


def write_log(
    bootstrap: str, source: str, first: int, count: int, *, in_flight: int, accepted_every: int, span_ms: int
) -> dict[str, int]:
    """Entries ``first`` to ``first + count - 1``, each tombstoned ``in_flight`` later unless accepted."""
    log_topic, producer = redelivery_log_topic(source), _producer(bootstrap)
    now = int(time.time() * 1000)
    entries = tombstones = 0
    for i in range(first, first + count):
        ts = now - span_ms + (i - first) * span_ms // max(1, count)
        value = Redelivery(2, (source, 0, i), ts, ts).encode()
        _produce(producer, log_topic, key=entry_key((source, 0, i)), value=value, timestamp=ts)
        entries += 1
        used = i - in_flight
        if used >= 0 and used % accepted_every != 0:
            _produce(producer, log_topic, key=entry_key((source, 0, used)), value=None, timestamp=ts)
            tombstones += 1
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError(f"{log_topic}: records not acknowledged within 120 s")
    return {"entries": entries, "tombstones": tombstones}


def write_dead_letters(bootstrap: str, source: str, dlq: str, offsets: list[int]) -> None:
    producer = _producer(bootstrap)
    for offset in offsets:
        headers = [
            ("__dlq.errors.topic", source.encode()),
            ("__dlq.errors.partition", b"0"),
            ("__dlq.errors.offset", str(offset).encode()),
            ("__dlq.errors.group", dlq.removeprefix("dlq.").encode()),  # the DLQ's own group
            ("__dlq.errors.delivery.count", b"1"),
        ]
        _produce(producer, dlq, key=str(offset).encode(), value=b"x" * 100, headers=headers, partition=0)
    if producer.flush(60):
        raise RuntimeError(f"{dlq}: dead letters not acknowledged within 60 s")


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def held_bytes(entries: dict[bytes, tuple[bytes, int]]) -> int:
    """What the view's entries take: the dict, each key, (value, timestamp) pair, value and timestamp."""
    total = sys.getsizeof(entries)
    for key, pair in entries.items():
        total += sys.getsizeof(key) + sys.getsizeof(pair) + sys.getsizeof(pair[0]) + sys.getsizeof(pair[1])
    return total


def measure_lane(bootstrap: str, mapping: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """In a child process: the input lane's two runs, its lookups and its memory (see the module)."""
    import tracemalloc

    from airflow_kafka_retry.engine.drain.options import DrainOptions
    from airflow_kafka_retry.engine.local.engine import run_local
    from airflow_kafka_retry.engine.logs.compacted_log import LogState, log_state
    from airflow_kafka_retry.engine.logs.redelivery_log import RedeliveryLogView

    config = {"bootstrap.servers": bootstrap}
    topology = Topology.from_mapping(mapping, source="bench")
    options = DrainOptions(handler="airflow_kafka_retry.engine.drain.redelivery:no_handler")
    state = log_state(config, redelivery_log_topic(topology.topic))
    out: dict[str, Any] = {"rss_before_mb": _peak_rss_mb()}

    def lane_run(name: str) -> None:
        read, started = state.read, time.perf_counter()
        run = run_local(topology, topology.tier(0), config, options, in_process=True)
        failed = [p.error for p in run.partitions if p.status != "ok"]
        if failed:
            raise RuntimeError(f"the input lane failed: {failed}")
        out[name] = {
            "wall_s": round(time.perf_counter() - started, 3),
            "dead_letters": sum(p.drained for p in run.partitions),
            "routed": {t: n for p in run.partitions for t, n in p.routed.items()},  # round 2: retry-2
            "log_records_read": state.read - read,
            "live_entries": len(state.entries),
            "held_bytes": held_bytes(state.entries),
            "peak_rss_mb": _peak_rss_mb(),
        }

    lane_run("first_run")
    out["appended"] = write_log(bootstrap, topology.topic, **more["log"])
    write_dead_letters(
        bootstrap, topology.topic, str(topology.input.dlq if topology.input else ""), more["dls"]
    )
    lane_run("second_run")

    view = RedeliveryLogView(config, state.topic)
    keys = list(state.entries)[:10_000]
    started = time.perf_counter()
    found = sum(1 for key in keys if view.get(key) is not None)
    took = time.perf_counter() - started
    out["lookups"] = {"count": len(keys), "found": found, "us_each": round(took / max(1, len(keys)) * 1e6, 2)}

    view.state = LogState(state.topic)  # a fresh process's first read, under tracemalloc
    tracemalloc.start()
    started = time.perf_counter()
    view.refresh()
    took = time.perf_counter() - started
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    view.close()
    out["fresh_view_traced"] = {
        "records_read": view.state.read,
        "live_entries": len(view.state.entries),
        "current_mb": round(current / 2**20, 2),
        "peak_mb": round(peak / 2**20, 2),
        "wall_s_under_tracemalloc": round(took, 3),
    }
    return out


def run(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    source, dlq = f"orders-{tag}", f"dlq.share-{tag}"
    create_topics(bootstrap, [source, dlq], 1)
    mapping = _topology(source, dlq)
    config = {"bootstrap.servers": bootstrap}
    ensure_topics(Topology.from_mapping(mapping, source="bench"), config, partitions=1)
    ensure_redelivery_log(config, redelivery_log_topic(source))
    span_ms = int(args.span_days * DAY_MS)
    shape = {"in_flight": args.in_flight, "accepted_every": args.accepted_every}
    started = time.perf_counter()
    written = write_log(bootstrap, source, 0, args.entries, span_ms=span_ms, **shape)
    write_s = time.perf_counter() - started
    # dead letters of records still in flight: the last `in_flight` entries have no tombstone yet
    live = range(max(0, args.entries - args.in_flight), args.entries)
    step = max(1, len(live) // max(1, args.dead_letters))
    write_dead_letters(bootstrap, source, dlq, list(live[::step][: args.dead_letters]))
    added = max(1, args.entries // 1000)  # the second run: a thousandth more redeliveries
    more = {
        "log": {"first": args.entries, "count": added, "span_ms": 60_000, **shape},
        "dls": list(range(args.entries, args.entries + added))[:: max(1, added // 10)],
    }
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        lane = pool.submit(measure_lane, bootstrap, mapping, more).result()
    held = lane["second_run"]["held_bytes"]
    entries_logged = args.entries + added
    return {
        "log_written": {**written, "seconds": round(write_s, 1)},
        "lane": lane,
        "old_behaviour_bytes": OLD_BYTES_PER_ENTRY * entries_logged,
        "held_bytes_per_live_entry": round(held / max(1, lane["second_run"]["live_entries"]), 1),
        "held_vs_old": round(held / (OLD_BYTES_PER_ENTRY * entries_logged), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.redelivery_log", description=__doc__.split("\n")[1]
    )
    parser.add_argument("--entries", type=int, default=1_000_000, help="redeliveries logged")
    parser.add_argument("--in-flight", type=int, default=10_000, help="entries logged before one is used")
    parser.add_argument("--accepted-every", type=int, default=100, help="every n-th entry is never used")
    parser.add_argument("--dead-letters", type=int, default=1_000)
    parser.add_argument("--span-days", type=float, default=6.0)
    parser.add_argument("--bootstrap", help="an existing broker (default: start Apache Kafka)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    stamp = datetime.datetime.now(datetime.UTC)
    load_before = os.getloadavg()
    with given_broker(args.bootstrap) as (bootstrap, _):
        result = run(args, bootstrap)
    document = {
        "bench": "redelivery-log",
        "started_utc": stamp.isoformat(),
        "command": shlex.join([sys.executable, "-m", "bench.redelivery_log", *(argv or sys.argv[1:])]),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "broker": "external" if args.bootstrap else "Apache Kafka from its jars (sandbox/kafka.py)",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "result": result,
    }
    path = write_new_result(args.out / f"{stamp:%Y-%m-%dT%H%M%SZ}-redelivery-log.json", document)
    lane = result["lane"]
    print(
        f"{result['log_written']['entries']:,} redeliveries logged: the view holds "
        f"{lane['second_run']['live_entries']:,} entries, {lane['second_run']['held_bytes'] / 2**20:.1f} MB "
        f"(old behaviour: {result['old_behaviour_bytes'] / 2**20:.0f} MB); first run "
        f"{lane['first_run']['wall_s']:.1f} s reading {lane['first_run']['log_records_read']:,} log records, "
        f"second run read {lane['second_run']['log_records_read']:,}; written to {path}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
