"""Issue 50's order target at test size: a ledger of keyed records through the local engine, key-ordered.

5,000 records over 500 keys (per-key sequence numbers), about 10 % failing once or twice and 1 % never
succeeding (``testkit/ordering_ledger.py``), on 4 partitions, attempts 3 (main, two retry tiers, the DLT),
delays 0. The tiers run in passes (main, retry-1, retry-2, again) until every record that can succeed has.
Then, per key, the handled sequence is the produced one minus the dead-lettered records, in order; the DLT
holds exactly those; nothing lost, nothing handled twice. ``python -m bench.ordering`` runs it at 100,000.
"""

from __future__ import annotations

from collections import Counter

import pytest

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic
from testkit import ordering_ledger as ol

from tests.support import ledger

pytestmark = [pytest.mark.integration]

PARTITIONS = 4
RECORDS, KEYS, SEED = 5_000, 500, 50


def key_ordered_topology(prefix: str, **extra) -> Topology:
    topic = unique_topic(prefix)
    mapping = {
        "topic": topic,
        "group_id": f"{topic}-svc",
        "attempts": 3,
        "backoff": {"kind": "fixed", "delay": "0ms"},
        "ordering": "key",
        **extra,
    }
    return Topology.from_mapping(mapping, source=f"<ordering ledger {topic}>")


def dead_lettered(bootstrap: str, topology: Topology) -> Counter:
    """``(key, seq)`` of every record in the DLT (read_committed), with its count."""
    assert topology.dlt_topic
    return Counter(ol.parse(m.value())[:2] for m in ledger.read_all(bootstrap, topology.dlt_topic))


def test_every_key_keeps_its_order_and_nothing_is_lost_or_doubled(kafka_bootstrap, tmp_path, monkeypatch):
    path = str(tmp_path / "order-ledger.txt")
    monkeypatch.setenv(ol.LEDGER_ENV, path)
    monkeypatch.setenv(ol.SEED_ENV, str(SEED))
    topology = key_ordered_topology("ordered")
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=PARTITIONS)
    plan = ol.plan(RECORDS, KEYS, SEED)
    ol.produce(kafka_bootstrap, topology.topic, plan.records)
    options = DrainOptions(handler=ol.HANDLER, batch_size=50, chunk_size=500)

    passes, _ = ol.settle(
        topology.tiers,
        lambda tier: run_local(topology, tier, config, options, in_process=True),
        plan,
        path,
    )

    report = ol.check_order(plan, ol.read_ledger(path))
    assert report.holds, f"seed {SEED}, after {passes} passes: " + "; ".join(report.problems)
    assert report.handled == RECORDS - len(plan.dead())
    dlt = dead_lettered(kafka_bootstrap, topology)
    assert set(dlt) == plan.dead(), (
        sorted(set(dlt) ^ plan.dead())[:5],
        "differ between the DLT and the plan",
    )
    assert max(dlt.values()) == 1, "a record dead-lettered twice"


def test_a_process_that_keeps_a_partition_between_runs_reads_what_another_process_wrote(
    kafka_bootstrap, tmp_path, monkeypatch
):
    """
    The main tier's runs alternate between this process and worker processes (another process each time).

    This process keeps each keeper partition's side between its runs (``engine/drain/ordering/kept.py``):
    its state as read, its hold consumer, its copies. After a worker process ran the partition, the state
    partition no longer ends where this process's last run left it, nor is the hold offset where its
    consumer stands: it reads what was written since, and order holds.
    """
    path = str(tmp_path / "order-ledger.txt")
    monkeypatch.setenv(ol.LEDGER_ENV, path)
    monkeypatch.setenv(ol.SEED_ENV, str(SEED))
    topology = key_ordered_topology("ordered-kept")
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, config, partitions=2)
    plan = ol.plan(1_500, 150, SEED)
    ol.produce(kafka_bootstrap, topology.topic, plan.records)
    options = DrainOptions(handler=ol.HANDLER, batch_size=50, chunk_size=200)
    mains = 0

    def run(tier):
        nonlocal mains
        mains += tier.index == 0
        elsewhere = tier.index == 0 and mains % 2 == 0  # every other main run in worker processes
        return run_local(topology, tier, config, options, parallelism=2, in_process=not elsewhere)

    passes, _ = ol.settle(topology.tiers, run, plan, path)
    assert mains >= 3, "no main run of this process came after one of another process"
    report = ol.check_order(plan, ol.read_ledger(path))
    assert report.holds, f"seed {SEED}, after {passes} passes: " + "; ".join(report.problems)
    assert report.handled == 1_500 - len(plan.dead())
    assert set(dead_lettered(kafka_bootstrap, topology)) == plan.dead()
