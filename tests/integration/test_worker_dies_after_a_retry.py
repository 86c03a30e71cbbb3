"""A worker process that dies after its partition was retried keeps the counts of every attempt (issue 48
item 8): the engine builds the partition's summary from the worker's last progress report, and that report
counted only the attempt in progress, so the chunks attempt 1 committed disappeared from the run's totals."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.local.engine import run_local

from tests.support import ledger

pytestmark = [pytest.mark.integration]

PARTITIONS, COUNT, CHUNK = 2, 200, 20  # 100 records a partition: 5 chunks


def test_a_worker_that_dies_after_a_retry_reports_what_every_attempt_committed(
    kafka_bootstrap, tmp_path, monkeypatch
):
    monkeypatch.setenv("AKR_RETRY_DIE", "1")
    ledger.ledger_path(tmp_path)
    topology = ledger.make_topology("retry-die")
    ledger.produce_inputs(kafka_bootstrap, topology, COUNT, PARTITIONS)
    options = DrainOptions(
        handler="tests.support.retry_then_die:indexed",
        value_deserializer="tests.support.retry_then_die:decode",
        batch_size=10,
        chunk_size=CHUNK,
    )
    config = {"bootstrap.servers": kafka_bootstrap}
    summary = run_local(topology, topology.tier(0), config, options, parallelism=PARTITIONS)
    [died] = [p for p in summary.partitions if p.partition == 0]
    assert died.status == "failed"
    assert "WorkerDiedError" in (died.error or ""), died.error
    # attempt 1 committed chunk 1, attempt 2 chunk 2, then the worker died inside chunk 3
    assert died.committed_offset == 2 * CHUNK, died.to_dict()
    assert died.drained == 2 * CHUNK, died.to_dict()
    assert died.retries == 1
    assert "injected: the transaction coordinator did not answer" in died.retry_errors[0]
    assert ledger.committed(kafka_bootstrap, topology.group_id, topology.topic, PARTITIONS)[0] == 2 * CHUNK
