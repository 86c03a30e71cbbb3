"""The embedded default keeps working: a short engine drain through a Tansu broker of this test's own.

The suite runs on Apache Kafka by default; this test (with the demo, which starts its own embedded broker)
keeps the embedded Tansu path -- ``EmbeddedBroker``, the engine's transactions and commits on it -- under
test in every run, whatever broker the session uses (it needs no session broker). Nothing is killed, so no
transaction is aborted and the full ledger holds on Tansu too: every record in exactly one home, no
copies, headers and committed offsets.
"""

from __future__ import annotations

import pytest

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.sandbox.broker import EmbeddedBroker

from tests.support import ledger

pytestmark = [pytest.mark.integration]

PARTITIONS = 2


def test_a_drain_through_the_embedded_broker_gives_every_record_one_home(tmp_path):
    ledger_file = ledger.ledger_path(tmp_path)
    with EmbeddedBroker(log_dir=tmp_path / "tansu", keep_log=True) as tansu:
        topology = ledger.make_topology("embedded")
        inputs = ledger.produce_inputs(tansu.bootstrap, topology, 140, PARTITIONS)
        options = DrainOptions(
            handler=f"{ledger.HANDLER_MODULE}:indexed",
            value_deserializer=f"{ledger.HANDLER_MODULE}:decode",
            batch_size=20,
            chunk_size=50,
        )
        config = {"bootstrap.servers": tansu.bootstrap}

        summaries = ledger.run_tiers(topology, lambda tier: run_local(topology, tier, config, options))

        ledger.check_ledger(tansu.bootstrap, topology, inputs, ledger_file, PARTITIONS)
        assert summaries[0].to_dict()["totals"]["drained"] == 140
