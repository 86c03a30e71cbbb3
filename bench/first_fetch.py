"""
``python -m bench.first_fetch``: how soon a consumer of a group that never committed gets its first record.

    python -m bench.first_fetch                        # a fresh Apache Kafka broker, 10 rounds
    python -m bench.first_fetch --bootstrap HOST:PORT  # an existing broker instead

A tier's first records, a watcher taken over by another triggerer before any run committed, a DLT read
from its start: each reads a partition from its beginning. Each round creates a topic of 2 partitions
with 10 records each, and for a group with no committed offset measures, from the assignment to the
first record of both partitions:

* ``logical``: ``committed()`` (as every reader asks first), then an assignment at ``OFFSET_BEGINNING``,
  which librdkafka resolves with an offset query of its own (the behaviour before ``from_log_start``);
* ``log_start``: the same, with ``engine.kafka.clients.from_log_start`` asking the broker for the log start
  first (what the engine's readers do now; its ListOffsets request is inside the time);
* ``head_watch``: a trigger's :class:`~airflow_kafka_retry.engine.heads.head_watch.HeadWatch` (its own
  consumer) from construction until both heads are known.

Writes ``bench/results/<UTC date and time>-first-fetch.json`` (or ``--out DIR``) and prints a summary.
Figures are measured, never asserted.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from airflow_kafka_retry.engine.heads.head_watch import HeadWatch
from airflow_kafka_retry.engine.kafka.clients import consumer_config, from_log_start
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, delete_topics, unique_topic
from bench.given_broker import given_broker
from bench.results_file import write_new_result

RESULTS = Path(__file__).resolve().parent / "results"
PARTITIONS = 2


def _first_records(consumer: Consumer, resolve: bool, topic: str) -> float:
    started = time.perf_counter()
    consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
    consumer.assign(from_log_start(consumer, tps) if resolve else tps)
    seen: set[int] = set()
    while len(seen) < PARTITIONS:
        if time.perf_counter() - started > 30:
            raise TimeoutError(f"{topic}: no record within 30 s")
        seen.update(
            p
            for m in consumer.consume(100, timeout=0.01)
            if m.error() is None and (p := m.partition()) is not None
        )
    return time.perf_counter() - started


def _head_watch(bootstrap: str, topic: str) -> float:
    started = time.perf_counter()
    watch = HeadWatch({"bootstrap.servers": bootstrap}, [topic], f"{topic}-watch", read_due=False)
    try:
        while len(watch.heads) < PARTITIONS:
            if time.perf_counter() - started > 30:
                raise TimeoutError(f"{topic}: no head within 30 s")
            watch.poll()
            time.sleep(0.005)
        return time.perf_counter() - started
    finally:
        watch.close()


def measure(bootstrap: str, rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"logical": [], "log_start": [], "head_watch": []}
    for _ in range(rounds):
        topic = unique_topic("first-fetch")
        create_topics(bootstrap, [topic], PARTITIONS)
        try:
            producer = Producer({"bootstrap.servers": bootstrap})
            for i in range(10 * PARTITIONS):
                producer.produce(topic, value=b"x", partition=i % PARTITIONS)
            if producer.flush(30):
                raise RuntimeError(f"{topic}: records not acknowledged within 30 s")
            times["logical"].append(_consumed(bootstrap, topic, resolve=False))
            times["log_start"].append(_consumed(bootstrap, topic, resolve=True))
            times["head_watch"].append(_head_watch(bootstrap, topic))
        finally:
            delete_topics(bootstrap, [topic])
    return times


def _consumed(bootstrap: str, topic: str, *, resolve: bool) -> float:
    consumer = Consumer(consumer_config({"bootstrap.servers": bootstrap}, f"{topic}-{resolve}"))
    try:
        return _first_records(consumer, resolve, topic)
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.first_fetch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="an existing broker (default: start Apache Kafka)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    stamp = datetime.datetime.now(datetime.UTC)
    load_before = os.getloadavg()
    with given_broker(args.bootstrap) as (bootstrap, _):
        times = measure(bootstrap, args.rounds)
    summary = {
        case: {
            "p50_s": round(statistics.median(t), 4),
            "max_s": round(max(t), 4),
            "runs_s": [round(x, 4) for x in t],
        }
        for case, t in times.items()
    }
    document = {
        "bench": "first_fetch",
        "started": stamp.isoformat(),
        "broker": "external" if args.bootstrap else "Apache Kafka from its jars",
        "cores": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "partitions": PARTITIONS,
        "cases": summary,
    }
    out = write_new_result(args.out / f"{stamp:%Y-%m-%dT%H%M%SZ}-first-fetch.json", document)
    for case, figures in summary.items():
        print(f"{case:>10}: p50 {figures['p50_s']:.3f} s, max {figures['max_s']:.3f} s")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
