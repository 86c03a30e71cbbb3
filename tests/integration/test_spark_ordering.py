"""Key-ordered retries (``ordering: key``) with the main tier drained by the Spark engine.

The keeper (``engine/drain/ordering/keeper.py``) runs wherever a main partition runs: here in a PySpark
worker of ``spark-submit`` on ``local[2]``, one Spark task per Kafka partition, its hold copies, state
entries and offsets in the task's own transaction. The first two passes drain the main tier with Spark (the
first holds records behind the keys that failed; the second reads the retry tiers' marks and releases
them); the local engine drains the retry tiers and settles the rest. Then, per key, the handled sequence is
the produced one minus the dead-lettered records, in order; the DLT holds exactly those; nothing lost,
nothing handled twice (``testkit/ordering_ledger.py``).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import pytest
import yaml

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic
from testkit import ordering_ledger as ol

from tests.integration.test_spark_app import SparkRunner
from tests.support import ledger

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.summary import RunSummary
    from airflow_kafka_retry.policy.topology.model import Tier

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 2
RECORDS, KEYS, SEED = 600, 60, 7
SPARK_PASSES = 2


def test_the_keeper_holds_and_releases_keys_in_spark_tasks_in_order(kafka_bootstrap, tmp_path, monkeypatch):
    path = str(tmp_path / "order-ledger.txt")
    monkeypatch.setenv(ol.LEDGER_ENV, path)  # spark-submit and its Python workers inherit it
    monkeypatch.setenv(ol.SEED_ENV, str(SEED))
    topic = unique_topic("spark-ordered")
    topology_file = tmp_path / "topology.yaml"
    topology_file.write_text(
        yaml.safe_dump(
            {
                "topic": topic,
                "group_id": f"{topic}-svc",
                "attempts": 3,
                "backoff": {"kind": "fixed", "delay": "0ms"},
                "ordering": "key",
            }
        )
    )
    topology = load_topology(topology_file)
    config = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(topology, config, partitions=PARTITIONS)
    plan = ol.plan(RECORDS, KEYS, SEED)
    ol.produce(kafka_bootstrap, topology.topic, plan.records)
    options = DrainOptions(handler=ol.HANDLER, batch_size=50, chunk_size=200)
    spark = SparkRunner(topology_file=topology_file, kafka_config=config, options=options)
    by_spark: list[RunSummary] = []

    def run_tier(tier: Tier) -> RunSummary:
        if tier.index == 0 and len(by_spark) < SPARK_PASSES:
            by_spark.append(spark(tier))
            return by_spark[-1]
        return run_local(topology, tier, config, options, in_process=True)

    passes, _ = ol.settle(topology.tiers, run_tier, plan, path)

    assert [s.engine for s in by_spark] == ["spark"] * SPARK_PASSES
    first, second = (s.to_dict()["totals"] for s in by_spark)
    assert first["drained"] == RECORDS
    assert first["ordering"]["held"] > 0, f"the first Spark pass held no record behind a failed key: {first}"
    assert second["ordering"]["released"] > 0, f"the second Spark pass released no held record: {second}"
    report = ol.check_order(plan, ol.read_ledger(path))
    assert report.holds, f"seed {SEED}, after {passes} passes: " + "; ".join(report.problems)
    assert report.handled == RECORDS - len(plan.dead())
    dead = Counter(ol.parse(m.value())[:2] for m in ledger.read_all(kafka_bootstrap, topology.dlt_topic))
    assert set(dead) == plan.dead()
    assert max(dead.values(), default=1) == 1, "a record dead-lettered twice"
