"""Case 4: a routed record is larger than its destination's ``max.message.bytes``.

On a broker that enforces the limit, the chunk's transaction fails: nothing of it is committed (no
offset past the record), and the error names the destination topic. Once the operator raises the
limit, the next runs finish and the ledger holds. Skipped, with the measured reason, on a broker that
does not enforce the limit (Tansu accepts any size).
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.sandbox.scratch_topics import admin_client, create_topics

from tests.faults.helpers import options, run_all_tiers
from tests.support import ledger
from tests.support.ledger import FaultInput

PARTITIONS = 1
LIMIT = 20_000
MODES = ("ok", "transient:1", "permanent", "fatal", "transient:2")


@pytest.mark.requires_capability("enforces_max_message_bytes")
@pytest.mark.fault_case(
    "4", f"a 50 kB record fails and is routed to a retry tier whose max.message.bytes is {LIMIT}"
)
def test_a_record_over_the_destination_limit_is_never_committed_past(kafka_bootstrap, tmp_path, fault_result):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_fault_topology("too-big")
    retry = topology.tier(1).topic
    create_topics(kafka_bootstrap, [retry], PARTITIONS, config={"max.message.bytes": str(LIMIT)})
    specs = [FaultInput(MODES[i % 5]) for i in range(20)]
    specs[12] = FaultInput("transient:1", value=b"x" * 50_000)
    inputs = ledger.produce_fault_inputs(kafka_bootstrap, topology, specs, PARTITIONS)
    config = {"bootstrap.servers": kafka_bootstrap}

    failed = run_local(topology, topology.tier(0), config, options(chunk_size=10))

    [partition] = failed.partitions
    assert partition.status == "failed", partition.error
    assert retry in partition.error, partition.error
    committed = ledger.committed(kafka_bootstrap, topology.group_id, topology.topic, PARTITIONS)[0]
    assert committed == 10, (
        f"committed {committed}: past the oversized record at offset 12, or not the first chunk"
    )

    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        retry,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "1000000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin = admin_client(kafka_bootstrap)  # kept alive: a collected client cancels its futures
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)  # the operator raises the limit
    run_all_tiers(topology, config, options(chunk_size=10))

    account = ledger.account(kafka_bootstrap, topology, inputs, ledger_file, PARTITIONS, handled_once=False)
    fault_result(
        f'the chunk\'s transaction failed ("{partition.error[:120]}..."); the committed offset stayed '
        "before the record; after the limit was raised the next runs finished",
        account,
    )
