"""Case 3: a destination tier or DLT deleted during a run, or missing when the run starts.

The engine's producer never auto-creates a topic, so a deleted destination fails the chunk that
routes to it: nothing of the chunk is committed and the error names the topic. Once the topic is
back (created by whoever deleted it), the next runs finish and the ledger holds.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer

from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.sandbox.scratch_topics import (
    CLIENT_LOGGER,
    create_topics,
    delete_topics,
    unique_topic,
)

from tests.faults.helpers import options, run_all_tiers
from tests.support import ledger
from tests.support.ledger import FaultInput

PARTITIONS = 2
MODES = ("ok", "transient:1", "permanent", "fatal", "transient:2")


_PROBED: dict[tuple[str, bool], str | None] = {}


def write_to_deleted_topic(bootstrap: str, transactional: bool) -> str | None:
    """Measured once per mode: None when producing to a just-deleted topic fails (as on Kafka), else what
    happened.

    The producer is the engine's kind (idempotent, or transactional) and has seen the topic before it
    is deleted, as the engine's producer has once it routed a record there.
    """
    if (bootstrap, transactional) not in _PROBED:
        topic = unique_topic("probe-deleted")
        create_topics(bootstrap, [topic], 1)
        config = {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "allow.auto.create.topics": False,
            "topic.metadata.propagation.max.ms": 3000,
            "message.timeout.ms": 10000,
            "logger": CLIENT_LOGGER,
        }
        if transactional:
            config["transactional.id"] = unique_topic("probe-txn")
        producer = Producer(config)
        producer.list_topics(topic, timeout=10)
        if transactional:
            producer.init_transactions(10)
        delete_topics(bootstrap, [topic])
        delivered: list = []
        if transactional:
            producer.begin_transaction()
        producer.produce(
            topic, value=b"x", partition=0, on_delivery=lambda err, msg: delivered.append((err, msg.offset()))
        )
        try:
            producer.commit_transaction(30) if transactional else producer.flush(30)
        except KafkaException:
            delivered.append((True, None))
        ok = bool(delivered) and delivered[0][0] is None
        mode = "a transactional" if transactional else "an idempotent"
        _PROBED[(bootstrap, transactional)] = (
            f"measured: the broker acknowledged {mode} write to a deleted topic (offset {delivered[0][1]}) "
            "and the "
            "record is nowhere to be read (Kafka answers UNKNOWN_TOPIC_OR_PARTITION), so a run cannot notice "
            "the deletion"
            if ok
            else None
        )
    return _PROBED[(bootstrap, transactional)]


def _variant(which: str, when: str, transactional: bool):
    mode = "transactional" if transactional else "idempotent (--no-transactions)"
    what = (
        "deleted by the first handler call of the run (before the run wrote to it)"
        if when == "mid-run"
        else "missing when the run starts"
    )
    return pytest.param(
        which,
        when,
        transactional,
        id=f"{which}-{when}-{'txn' if transactional else 'idempotent'}",
        marks=pytest.mark.fault_case(
            "3", f"the {which} topic {what}; {mode} run; the engine's producer never auto-creates topics"
        ),
    )


@pytest.mark.parametrize(
    ("which", "when", "transactional"),
    [
        # each destination kind, each mode and each moment once: a chunk's routing to a retry tier or to the
        # DLT goes through the same producer (and transaction), and the check of a run's destinations at its
        # start is the same for both kinds and both modes
        _variant("retry-1", "mid-run", True),
        _variant("dlt", "mid-run", False),
        _variant("retry-1", "at-start", False),
    ],
)
def test_a_deleted_or_missing_destination_fails_the_chunk_and_names_the_topic(
    kafka_bootstrap, tmp_path, monkeypatch, fault_result, which, when, transactional
):
    if when == "mid-run" and (reason := write_to_deleted_topic(kafka_bootstrap, transactional)):
        pytest.skip(reason)
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_fault_topology(f"gone-{which}")
    inputs = ledger.produce_fault_inputs(
        kafka_bootstrap, topology, [FaultInput(MODES[i % 5]) for i in range(60)], PARTITIONS
    )
    gone = topology.dlt_topic if which == "dlt" else topology.tier(1).topic
    # librdkafka waits topic.metadata.propagation.max.ms (30 s by default) for a topic it cannot see
    config = {"bootstrap.servers": kafka_bootstrap, "topic.metadata.propagation.max.ms": 3000}
    if when == "at-start":
        delete_topics(kafka_bootstrap, [gone])
    else:
        monkeypatch.setenv("AKR_DELETE_TOPIC", gone)
        monkeypatch.setenv("AKR_DELETE_BOOTSTRAP", kafka_bootstrap)
        monkeypatch.setenv("AKR_DELETE_MARKER", str(tmp_path / "deleted"))

    opts = options(transactional=transactional)
    failed = run_local(topology, topology.tier(0), config, opts)

    assert not failed.ok
    for p in failed.partitions:
        assert p.status == "failed", p.error
        assert gone in p.error, p.error
        assert p.committed_offset is None
        assert p.drained == 0
    assert ledger.committed(kafka_bootstrap, topology.group_id, topology.topic, PARTITIONS) == {
        p: -1001 for p in range(PARTITIONS)
    }, "an offset was committed past records whose destination is gone"

    ensure_topics(
        topology, {"bootstrap.servers": kafka_bootstrap}, partitions=PARTITIONS
    )  # the operator puts it back
    monkeypatch.delenv("AKR_DELETE_TOPIC", raising=False)
    run_all_tiers(topology, config, opts)

    # handled before the failure and again after: handling is at least once, homes are exactly one; without
    # transactions, what the failed chunk routed before the failure is routed again (at least once by design)
    account = ledger.account(
        kafka_bootstrap,
        topology,
        inputs,
        ledger_file,
        PARTITIONS,
        allow_duplicates=not transactional,
        handled_once=False,
    )
    error = failed.partitions[0].error
    fault_result(
        f"the run failed on both partitions, nothing committed, error names the topic "
        f'("{error[:160]}..."); after the topic was re-created the next runs finished',
        account,
    )
