"""Cases 9 and 10: poison headers, and records without a key, with an empty or a 10 MB value.

Each is read defensively (the way Spring reads it) and never crashes a partition: every run of
every tier succeeds on every partition, and each record ends where its fate says.
"""

from __future__ import annotations

import pytest

from airflow_kafka_retry.engine.kafka.topic_admin import topology_topics
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.sandbox.scratch_topics import create_topics

from tests.faults.helpers import options, run_all_tiers, totals
from tests.support import ledger
from tests.support.ledger import FaultInput

PARTITIONS = 2


def _normal(count: int) -> list[FaultInput]:
    modes = ("ok", "transient:1", "permanent", "fatal", "transient:2")
    return [FaultInput(modes[i % len(modes)]) for i in range(count)]


POISON = {
    # Spring reads a 4-byte int (or the legacy 1 byte); any other length, or a value outside 1..32767, is
    # attempt 1
    "truncated attempts (3 bytes)": FaultInput("transient:1", headers=[(H.ATTEMPTS, b"\x00\x00\x02")]),
    "attempts 0x7fffffff": FaultInput("permanent", headers=[(H.ATTEMPTS, H.encode_int32(2**31 - 1))]),
    "negative attempts": FaultInput("transient:1", headers=[(H.ATTEMPTS, H.encode_int32(-3))]),
    # a due time in the past is due now; one more than a day ahead (Spring's MAX_BACKOFF_MS) or longer than 8
    # bytes is ignored, as Spring ignores it, instead of holding the partition back for ever
    "negative backoff timestamp": FaultInput("ok", headers=[(H.BACKOFF_TIMESTAMP, H.encode_big_integer(-5))]),
    "huge backoff timestamp (2^63-1)": FaultInput(
        "transient:1", headers=[(H.BACKOFF_TIMESTAMP, H.encode_big_integer(2**63 - 1))]
    ),
    "9-byte backoff timestamp": FaultInput("ok", headers=[(H.BACKOFF_TIMESTAMP, b"\x01" * 9)]),
    "12-byte original timestamp": FaultInput("permanent", headers=[(H.ORIGINAL_TIMESTAMP, b"\x7f" * 12)]),
    "non-UTF-8 exception headers": FaultInput(
        "permanent",
        headers=[
            (H.RETRY_TOPIC_NAMES.exception_fqcn, b"\xc3\x28"),
            (H.RETRY_TOPIC_NAMES.exception_message, b"\xff\xfe\x80"),
            (H.DEAD_LETTER_NAMES.exception_stacktrace, b"\x80" * 100),
        ],
    ),
    "10,000 headers (150 kB, over the 16 kB budget)": FaultInput(
        "transient:1", headers=[(f"x-poison-{i:05d}", b"v") for i in range(10_000)]
    ),
    "10,000 headers, failing to the DLT": FaultInput(
        "permanent", headers=[(f"x-poison-{i:05d}", b"v") for i in range(10_000)]
    ),
}


@pytest.mark.fault_case("9", "poison headers on input records: " + "; ".join(POISON))
def test_poison_headers_never_crash_a_partition(kafka_bootstrap, tmp_path, fault_result):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_fault_topology("poison")
    specs = _normal(30)
    specs[3:3] = POISON.values()  # in the first chunk of partition 0 and 1, between normal records
    inputs = ledger.produce_fault_inputs(kafka_bootstrap, topology, specs, PARTITIONS)

    summaries = run_all_tiers(topology, {"bootstrap.servers": kafka_bootstrap}, options())

    account = ledger.account(kafka_bootstrap, topology, inputs, ledger_file, PARTITIONS)
    poison_ids = {str(i) for i in range(3, 3 + len(POISON))}
    assert poison_ids <= set(ledger.processed_ids(ledger_file)) | {
        H.last_header(m.headers(), ledger.FAULT_ID).decode()
        for m in ledger.read_all(kafka_bootstrap, topology.dlt_topic)
    }
    # the 10,000 headers went along with the record, every one of them, to the DLT
    big = [
        m
        for m in ledger.read_all(kafka_bootstrap, topology.dlt_topic)
        if H.last_header(m.headers(), "x-poison-09999") is not None
    ]
    assert len(big) == 1
    assert sum(1 for k, _ in big[0].headers() if k.startswith("x-poison-")) == 10_000
    assert H.read_attempts(big[0].headers()) == topology.attempts + 1
    t = totals(summaries)
    fault_result(
        f"every run ok on every partition; {t['drained']} records drained over {len(summaries)} tier runs, "
        "bad attempts read as 1 and bad or far-future due times as due now (Spring's checks), over-budget "
        "own headers kept and routed",
        account,
    )


@pytest.mark.fault_case(
    "10", "a record with no key; with an empty value; with a 10 MB value (failing and not)"
)
def test_keyless_empty_and_10_mb_records_route_like_any_other(kafka_bootstrap, tmp_path, fault_result):
    ledger_file = ledger.ledger_path(tmp_path)
    topology = ledger.make_fault_topology("odd-records")
    big = b"x" * 10_000_000
    specs = [
        *_normal(10),
        FaultInput("ok", key=None),
        FaultInput("transient:1", key=None),
        FaultInput("permanent", key=None),
        FaultInput("ok", value=b""),
        FaultInput("transient:1", value=b""),
        FaultInput("fatal", value=b""),
        FaultInput("ok", key=None, value=b""),
        FaultInput("ok", value=big),
        FaultInput("transient:1", value=big),
        FaultInput("permanent", value=big, key=None),
        *_normal(6),
    ]
    # a real broker takes records up to a topic's max.message.bytes (1 MB by default): the operator
    # raised it on every topic of the path for 10 MB records
    create_topics(
        kafka_bootstrap, topology_topics(topology), PARTITIONS, config={"max.message.bytes": "30000000"}
    )
    inputs = ledger.produce_fault_inputs(
        kafka_bootstrap, topology, specs, PARTITIONS, **{"message.max.bytes": 30_000_000}
    )

    summaries = run_all_tiers(topology, {"bootstrap.servers": kafka_bootstrap}, options())

    account = ledger.account(kafka_bootstrap, topology, inputs, ledger_file, PARTITIONS)
    dead = {
        H.last_header(m.headers(), ledger.FAULT_ID).decode(): m
        for m in ledger.read_all(kafka_bootstrap, topology.dlt_topic)
    }
    assert dead["12"].key() is None
    assert dead["15"].value() in (b"", None)
    assert dead["19"].value() == big
    retried = {
        H.last_header(m.headers(), ledger.FAULT_ID).decode(): m
        for m in ledger.read_all(kafka_bootstrap, topology.tier(1).topic)
    }
    assert retried["18"].value() == big
    assert retried["11"].key() is None
    assert retried["14"].value() in (b"", None)
    t = totals(summaries)
    fault_result(
        f"every run ok; {t['routed']} records routed (three 10 MB ones among them, byte for byte), "
        "null keys and empty values kept as they were",
        account,
    )
