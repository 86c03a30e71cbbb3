"""Chunks larger than a piece: read and handled a piece at a time, committed once per chunk.

The engine hands a chunk (one transaction) to the handler a few hundred records at a time and
keeps only its failed records until the commit. Here a chunk spans several pieces and ends in
the middle of one, with and without transactions: every record still ends in exactly one home,
offsets land after each partition's last record, and each partition commits once per chunk.
"""

from __future__ import annotations

import math

import pytest

from airflow_kafka_retry.engine.drain import partition as partition_module
from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.local.engine import run_local

from tests.support import ledger

pytestmark = [pytest.mark.integration]

PARTITIONS = 2
COUNT = 1400  # 700 per partition


@pytest.mark.parametrize("transactional", [True, False], ids=["transactional", "idempotent"])
def test_a_chunk_spanning_pieces_commits_once_and_loses_nothing(
    kafka_bootstrap, tmp_path, monkeypatch, transactional
):
    monkeypatch.setattr(
        partition_module, "_PIECE_RECORDS", 120
    )  # pieces of 120: a chunk of 300 is 2.5 pieces
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_topology("pieces")
    inputs = ledger.produce_inputs(kafka_bootstrap, topology, COUNT, PARTITIONS)
    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed",
        value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
        batch_size=40,
        chunk_size=300,
        transactional=transactional,
    )
    config = {"bootstrap.servers": kafka_bootstrap}

    # in-process: the piece size is patched in this process
    summaries = ledger.run_tiers(
        topology, lambda tier: run_local(topology, tier, config, options, in_process=True)
    )

    ledger.check_ledger(kafka_bootstrap, topology, inputs, ledger_file, PARTITIONS)
    main = summaries[0]
    per_partition = COUNT // PARTITIONS
    for p in main.partitions:
        assert (p.drained, p.first_offset, p.last_offset, p.committed_offset) == (
            per_partition,
            0,
            per_partition - 1,
            per_partition,
        )
        assert p.succeeded + sum(p.routed.values()) + p.dropped == per_partition
        if transactional:
            assert p.transactions == math.ceil(per_partition / options.chunk_size)  # 300 + 300 + 100
        # pieces are whole batches: the handler never saw a batch cut short by a piece boundary
        assert p.handler_calls >= math.ceil(per_partition / options.batch_size)
