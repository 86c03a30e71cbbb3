"""``DrainOptions.deadline_ms`` travels to the Spark executors: a passed deadline stops every partition
unread."""

from __future__ import annotations

import dataclasses

import pytest

from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

from tests.integration.test_spark_app import OPTIONS, SparkRunner
from tests.support import ledger

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 2


def test_spark_partitions_stop_at_the_deadline_and_leave_everything_for_the_next_run(
    kafka_bootstrap, tmp_path
):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.write_topology(ledger.make_topology("spark-deadline"), tmp_path / "topology.yaml")
    ledger.produce_inputs(kafka_bootstrap, topology, 40, PARTITIONS)
    options = dataclasses.replace(OPTIONS, deadline_ms=wall_clock_ms() - 1)  # e.g. the window has closed
    runner = SparkRunner(
        topology_file=tmp_path / "topology.yaml",
        kafka_config={"bootstrap.servers": kafka_bootstrap},
        options=options,
    )

    summary = runner(topology.tier(0))

    assert summary.ok
    assert summary.engine == "spark"
    assert summary.stopped == "deadline"
    assert summary.to_dict()["stopped"] == "deadline"
    assert sorted(p.partition for p in summary.partitions) == list(range(PARTITIONS))
    for part in summary.partitions:
        assert (part.stop_reason, part.stopped_by, part.drained) == ("stopped", "deadline", 0), part
    group = topology.consumer_group(topology.tier(0))
    assert all(
        offset < 0 for offset in ledger.committed(kafka_bootstrap, group, topology.topic, PARTITIONS).values()
    )
    assert not ledger.processed_ids(ledger_file)
