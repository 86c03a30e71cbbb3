"""``airflow-kafka-retry demo``: the retry path end to end on an embedded broker.

Orders are produced to a main topic; the demo handler fails some transiently, some for good
and rejects some as invalid (not retryable); the local engine then runs tier after tier, on
schedule with each tier's delay, until every order is processed or dead-lettered. Prints one
JSON summary line per run and a final account that must add up to the orders produced.
"""

from __future__ import annotations

import json
import sys
import time
import zlib
from collections.abc import Callable
from typing import Any

from airflow_kafka_retry.errors import BatchFailedError

DEMO_TOPOLOGY: dict[str, Any] = {
    "topic": "orders",
    "group_id": "orders-service",
    "attempts": 4,
    "backoff": {"kind": "exponential", "initial": "1s", "multiplier": 2.0, "max": "2s"},
    "not_retryable": ["airflow_kafka_retry.demo.InvalidOrder"],
    "dlt_routing": {"-validation-dlt": ["airflow_kafka_retry.demo.InvalidOrder"]},
}


class InvalidOrder(ValueError):
    """An order that can never be processed (routed to orders-validation-dlt)."""


class PaymentServiceUnavailable(RuntimeError):
    """A transient failure: the order succeeds on a later attempt."""


def _fate(order_id: int) -> str:
    bucket = zlib.crc32(str(order_id).encode()) % 20
    return {0: "invalid", 1: "flaky-2", 2: "flaky-2", 3: "flaky-3", 4: "broken"}.get(bucket, "ok")


def handle_orders(records: list) -> None:
    """The demo handler: batch-failure indexing, like a Spring batch listener."""
    for index, record in enumerate(records):
        order = json.loads(record.value)
        fate = _fate(order["id"])
        try:
            if fate == "invalid":
                raise InvalidOrder(f"order {order['id']} has no customer")
            if fate.startswith("flaky-") and record.attempt < int(fate.split("-")[1]):
                raise PaymentServiceUnavailable(f"payment service timed out for order {order['id']}")
            if fate == "broken":
                raise PaymentServiceUnavailable(f"payment service rejects order {order['id']}")
        except Exception as exc:
            raise BatchFailedError(index, exc) from exc


def _produce_orders(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for order_id in range(count):
        value = json.dumps({"id": order_id, "amount": 10 + order_id % 90}).encode()
        producer.produce(topic, value=value, key=str(order_id).encode(), partition=order_id % partitions)
    if producer.flush(30):
        raise RuntimeError("could not produce the demo orders")


def run_demo(bootstrap: str, *, orders: int, partitions: int, out: Callable[[str], None]) -> int:
    from airflow_kafka_retry.engine.local import run_local
    from airflow_kafka_retry.engine.options import DrainOptions
    from airflow_kafka_retry.engine.topics import ensure_topics
    from airflow_kafka_retry.policy.topology import Topology

    topology = Topology.from_mapping(DEMO_TOPOLOGY, source="<demo>")
    config = {"bootstrap.servers": bootstrap}
    ensure_topics(topology, config, partitions=partitions)
    _produce_orders(bootstrap, topology.topic, orders, partitions)
    out(json.dumps({"event": "produced", "topic": topology.topic, "orders": orders, "path": [
        {"topic": t.topic, "delay_ms": t.delay_ms} for t in topology.tiers] + [
        {"topic": t.topic, "dlt": True} for t in topology.dlt_tiers]}))
    options = DrainOptions(handler="airflow_kafka_retry.demo:handle_orders", batch_size=25)
    processed, dead = 0, {}
    deadline = time.monotonic() + 120
    pending = True
    while pending and time.monotonic() < deadline:
        pending = False
        for tier in topology.tiers:  # what a scheduler does: each tier on its own cadence
            summary = run_local(topology, tier, config, options)
            totals = summary.to_dict()["totals"]
            if not summary.ok:
                out(json.dumps({"event": "failed", "tier": tier.topic, "summary": summary.to_dict()}))
                return 1
            processed += totals["succeeded"]
            for exc, n in totals["dead_lettered"].items():
                dead[exc] = dead.get(exc, 0) + n
            waiting = [p for p in summary.partitions if p.stop_reason == "not_due"]
            pending = pending or bool(waiting) or any(n for t, n in totals["routed"].items()
                                                      if t not in {d.topic for d in topology.dlt_tiers})
            if totals["drained"] or waiting:
                out(json.dumps({"event": "run", "tier": tier.index, "topic": tier.topic, "drained": totals["drained"],
                                "succeeded": totals["succeeded"], "routed": totals["routed"],
                                "waiting_partitions": len(waiting)}))
        if pending:
            time.sleep(0.5)
    accounted = processed + sum(dead.values())
    out(json.dumps({"event": "done", "orders": orders, "processed": processed, "dead_lettered": dead,
                    "accounted_for": accounted}))
    return 0 if accounted == orders else 1


def main(bootstrap: str | None, *, orders: int = 200, partitions: int = 3) -> int:
    """Run the demo on ``bootstrap``, or on an embedded broker started for the occasion."""

    def out(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    if bootstrap:
        return run_demo(bootstrap, orders=orders, partitions=partitions, out=out)
    from airflow_kafka_retry.testing.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        out(json.dumps({"event": "broker", "bootstrap": broker.bootstrap}))
        return run_demo(broker.bootstrap, orders=orders, partitions=partitions, out=out)
