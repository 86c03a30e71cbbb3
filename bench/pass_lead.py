"""
``python -m bench.pass_lead``: how late a wave's records reach the handler when the run waits for the wave.

    python -m bench.pass_lead                        # a fresh Apache Kafka broker, 3 rounds
    python -m bench.pass_lead --bootstrap HOST:PORT  # an existing broker instead

Each round writes a wave to tier 1 of a new two-partition topology: 20 records per partition due at ``T``
(one every 5 ms, as a burst routed by a main run lands), and 20 more due at ``T + 1.5 s`` (a follow
pass's). About 2 s before ``T`` it takes the local operator's path (``ReprocessTierOperator.execute``): the
engine and its worker processes start, the run waits for the wave (``follow.wait_for_pass``), then
``drain_following`` with ``follow="10s"``; ``--lead-ms 0`` is the path before the lead (wait until due,
cutoff then). The handler notes when each record reached it; the bench
prints lateness (handled - due) per record, p50 and max, and how many were early (handled before due).
Figures are measured, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from airflow_kafka_retry.engine.drain import follow
from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import LocalEngine
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import delete_topics, unique_topic
from bench.given_broker import given_broker

PARTITIONS, PER_WAVE, SPREAD_MS, SECOND_WAVE_MS = 2, 20, 5, 1_500
LOG_ENV = "AKR_PASS_LEAD_LOG"


def handle(records: list) -> None:
    """The bench's handler (``bench.pass_lead:handle``): notes each record's due time and when it came."""
    now = time.time() * 1000
    lines = "".join(f"{json.dumps([r.key.decode(), r.due_ms, now])}\n" for r in records)
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, lines.encode())
    finally:
        os.close(fd)


def _wave(bootstrap: str, topic: str, due_ms: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for wave, start in enumerate((due_ms, due_ms + SECOND_WAVE_MS)):
        for i in range(PER_WAVE):
            due = start + i * SPREAD_MS
            headers = [(H.ATTEMPTS, H.encode_int32(2)), (H.BACKOFF_TIMESTAMP, H.encode_big_integer(due))]
            for p in range(PARTITIONS):
                producer.produce(topic, b"x", key=f"{wave}-{i}-{p}".encode(), partition=p, headers=headers)
    if producer.flush(30):
        raise RuntimeError(f"{topic}: records not acknowledged within 30 s")


def one_round(bootstrap: str, lead_ms: int) -> list[float]:
    topic = unique_topic("pass-lead")
    backoff = {"kind": "fixed", "delay": "10s"}
    mapping = {"topic": topic, "group_id": f"{topic}-svc", "attempts": 3, "backoff": backoff}
    topology = Topology.from_mapping(mapping)
    config = {"bootstrap.servers": bootstrap}
    ensure_topics(topology, config, partitions=PARTITIONS)
    tier = topology.tier(1)
    due = int(time.time() * 1000) + 3_000
    _wave(bootstrap, tier.topic, due)
    while (wait := due - 2_000 - time.time() * 1000) > 0:  # the task starts about 2 s ahead of the wave
        time.sleep(wait / 1000)
    options = DrainOptions(handler="bench.pass_lead:handle")
    try:
        with LocalEngine(topology, tier, config, options) as engine:
            cutoff = follow.wait_for_pass(due, lead_ms=lead_ms)
            summary = follow.drain_following(
                engine.drain, cutoff_ms=cutoff, follow_ms=10_000, lead_ms=lead_ms
            )
        if not summary.ok:
            raise RuntimeError(f"the run failed: {summary.to_dict()}")
    finally:
        delete_topics(bootstrap, [topic, tier.topic])
    rows = [json.loads(line) for line in Path(os.environ[LOG_ENV]).read_text().splitlines()]
    Path(os.environ[LOG_ENV]).unlink()
    keys = [r[0] for r in rows]
    if len(keys) != 2 * PER_WAVE * PARTITIONS or len(set(keys)) != len(keys):
        raise RuntimeError(f"{len(keys)} records handled, {len(set(keys))} distinct")
    return [(handled - due_ms) / 1000 for _, due_ms, handled in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pass_lead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="an existing broker (default: start Apache Kafka)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--lead-ms", type=int, default=follow.PASS_LEAD_MS, help="0: as before the lead (wait until due)"
    )
    args = parser.parse_args(argv)
    os.environ[LOG_ENV] = os.path.join(tempfile.mkdtemp(prefix="pass-lead-"), "handled.jsonl")
    with given_broker(args.bootstrap) as (bootstrap, _):
        for n in range(args.rounds):
            late = one_round(bootstrap, args.lead_ms)
            early = sum(1 for s in late if s < 0)
            print(
                f"round {n + 1}: {len(late)} records, lateness p50 {statistics.median(late):.3f} s, "
                f"max {max(late):.3f} s, min {min(late):.3f} s, early {early}; load {os.getloadavg()[0]:.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
