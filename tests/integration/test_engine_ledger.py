"""The ledger test of the local engine: thousands of records, every one ends in exactly one home."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.local.engine import run_local

from tests.support import ledger

pytestmark = [pytest.mark.integration]

PARTITIONS = 4


@pytest.mark.parametrize(
    ("handler", "transactional", "parallelism", "count"),
    [
        pytest.param("indexed", True, 1, 2000, id="batch-index-transactional"),
        pytest.param("whole_batch", True, 1, 2000, id="whole-batch-bisection-transactional"),
        pytest.param("indexed", False, 2, 800, id="batch-index-idempotent-parallel"),
        # transactional in worker processes: test_engine_processes.py's
        # test_worker_processes_give_every_record_exactly_one_home (the same run, ledger and handler)
    ],
)
def test_every_record_ends_in_exactly_one_home(
    kafka_bootstrap, tmp_path, handler, transactional, parallelism, count
):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_topology()
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, count, PARTITIONS)
    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:{handler}",
        value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
        # whole batches fail on most inputs here: small batches keep bisection in budget
        batch_size=50 if handler == "indexed" else 10,
        chunk_size=300,
        transactional=transactional,
    )
    config = {"bootstrap.servers": kafka_bootstrap}

    summaries = ledger.run_tiers(
        topology, lambda tier: run_local(topology, tier, config, options, parallelism=parallelism)
    )

    ledger.check_ledger(kafka_bootstrap, topology, inputs, ledger_file, PARTITIONS)
    first = summaries[0].to_dict()["totals"]
    assert first["drained"] == count
    assert first["succeeded"] + sum(first["routed"].values()) == count
    if handler == "whole_batch":
        # bisection isolates failures: good records of a failed batch are not sent around the tiers
        retried = sum(1 for mode, _, _ in inputs.records.values() if mode in ledger.RETRIED_MODES)
        assert first["routed"][topology.tier(1).topic] == retried
    # a second pass over every tier finds nothing left to do
    again = [run_local(topology, tier, config, options) for tier in topology.tiers]
    assert all(s.to_dict()["totals"]["drained"] == 0 for s in again)
