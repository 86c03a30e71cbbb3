"""Retry-tier records carrying Spring Kafka's headers continue their attempts.

No Spring service runs here (there is no JVM on these machines): the records are produced by this test,
from Python, with the header names and byte encodings Spring for Apache Kafka writes, spelled out by hand
from its source: the attempts as a 4-byte big-endian int (``ByteBuffer.putInt``) or the legacy single byte,
the original and back-off timestamps as ``BigInteger.toByteArray()`` of epoch milliseconds, partitions and
offsets as 4- and 8-byte big-endian ints, and both families of coordinate/exception header names
(``kafka_original-*``/``kafka_exception-*`` and ``kafka_dlt-*``). What is checked is that the engine reads
such records as Spring would, not that it interoperates with a running Spring application.
"""

from __future__ import annotations

import json
import struct
import time

import pytest
from confluent_kafka import Producer

from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.kafka.topic_admin import ensure_topics
from airflow_kafka_retry.engine.local.engine import run_local
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.support import ledger

pytestmark = [pytest.mark.integration]

JAVA_EXCEPTION = b"org.springframework.kafka.listener.ListenerExecutionFailedException"
#: Spring's two spellings of the coordinate and exception headers, from its KafkaHeaders constants:
#: non-blocking retries (DeadLetterPublishingRecovererFactory: ORIGINAL_*, EXCEPTION_*) and a plain
#: DeadLetterPublishingRecoverer (DLT_*). ORIGINAL_CONSUMER_GROUP is spelled with "dlt-" in both.
SPRING_FAMILIES = {
    "retry-topics": {
        "topic": "kafka_original-topic",
        "partition": "kafka_original-partition",
        "offset": "kafka_original-offset",
        "timestamp": "kafka_original-timestamp",
        "timestamp-type": "kafka_original-timestamp-type",
        "group": "kafka_dlt-original-consumer-group",
        "fqcn": "kafka_exception-fqcn",
        "cause": "kafka_exception-cause-fqcn",
        "message": "kafka_exception-message",
        "stacktrace": "kafka_exception-stacktrace",
    },
    "dead-letter-recoverer": {
        "topic": "kafka_dlt-original-topic",
        "partition": "kafka_dlt-original-partition",
        "offset": "kafka_dlt-original-offset",
        "timestamp": "kafka_dlt-original-timestamp",
        "timestamp-type": "kafka_dlt-original-timestamp-type",
        "group": "kafka_dlt-original-consumer-group",
        "fqcn": "kafka_dlt-exception-fqcn",
        "cause": "kafka_dlt-exception-cause-fqcn",
        "message": "kafka_dlt-exception-message",
        "stacktrace": "kafka_dlt-exception-stacktrace",
    },
}


def spring_headers(
    family: dict[str, str], *, attempts: bytes, due_ms: int, original_ts: int, main_topic: str, offset: int
) -> list:
    """The headers Spring writes on a retry-topic record, as bytes built here by hand (no Spring involved)."""
    return [
        ("traceparent", b"00-abc-01"),
        (family["topic"], main_topic.encode()),
        (family["partition"], struct.pack(">i", 0)),
        (family["offset"], struct.pack(">q", offset)),
        (family["timestamp"], struct.pack(">q", original_ts)),
        (family["timestamp-type"], b"CreateTime"),
        (family["group"], b"orders-service"),
        (family["fqcn"], JAVA_EXCEPTION),
        (family["cause"], b"java.lang.IllegalStateException"),
        (family["message"], b"Listener method threw exception"),
        (family["stacktrace"], b"java.lang.IllegalStateException: boom\n\tat ..."),
        # BigInteger.toByteArray() of the millisecond timestamps; attempts as ByteBuffer.putInt (or
        # legacy byte)
        ("retry_topic-original-timestamp", original_ts.to_bytes(6, "big")),
        ("retry_topic-attempts", attempts),
        ("retry_topic-backoff-timestamp", due_ms.to_bytes(6, "big")),
    ]


#: Two ways to get Spring's pre-3.2 names (orders-retry-0, -1, -2 for a fixed back-off): index_start 0 on
#: this provider's defaults, or the builder-4.0 preset (which also brings Spring's groups and cause header).
NAMING = {"index_start-0": {"index_start": 0}, "compat-spring-builder-4.0": {"compat": "spring-builder-4.0"}}


@pytest.mark.parametrize("naming", sorted(NAMING))
@pytest.mark.parametrize("family", sorted(SPRING_FAMILIES))
def test_spring_written_records_are_drained_with_their_attempt_count_continued(
    kafka_bootstrap, tmp_path, family, naming
):
    names = SPRING_FAMILIES[family]
    ledger_file = ledger.ledger_path(tmp_path)
    topic = unique_topic("spring")
    topology = Topology.from_mapping(
        {
            "topic": topic,
            "group_id": "orders-service",
            "attempts": 4,
            "backoff": {"kind": "fixed", "delay": "5s"},
            **NAMING[naming],
        }
    )
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=1)
    tier = topology.select(f"{topic}-retry-1")  # Spring names retry topics from 0: this is the 2nd tier
    assert tier.index == 2
    now = int(time.time() * 1000)
    original_ts = now - 60_000
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    cases = {
        "ok-int": (struct.pack(">i", 3), "ok"),  # 4-byte attempts (Spring 3.x)
        "fail-int": (struct.pack(">i", 3), "permanent"),
        "fail-legacy": (bytes([3]), "permanent"),  # legacy 1-byte attempts still read
    }
    for offset, (rid, (attempts, mode)) in enumerate(cases.items()):
        producer.produce(
            tier.topic,
            json.dumps({"id": rid, "mode": mode}).encode(),
            key=rid.encode(),
            partition=0,
            timestamp=now - 1000,
            headers=spring_headers(
                names,
                attempts=attempts,
                due_ms=now - 1000,
                original_ts=original_ts,
                main_topic=topic,
                offset=100 + offset,
            ),
        )
    assert producer.flush(10) == 0

    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed", value_deserializer=f"{ledger.HANDLER_MODULE}:decode"
    )
    summary = run_local(topology, tier, {"bootstrap.servers": kafka_bootstrap}, options)
    assert summary.ok
    assert summary.partitions[0].drained == 3
    assert summary.group == (
        "orders-service-retry-1" if naming.startswith("compat") else f"orders-service-{topic}-retry-1"
    )
    assert ledger.processed_ids(ledger_file) == {"ok-int": 1}

    routed = {m.key().decode(): m for m in ledger.read_all(kafka_bootstrap, topology.tier(3).topic)}
    assert set(routed) == {"fail-int", "fail-legacy"}
    for rid, msg in routed.items():
        headers = msg.headers()
        # attempt 3 failed -> the record goes on at attempt 4, written as Spring 3.x writes it
        assert H.last_header(headers, H.ATTEMPTS) == b"\x00\x00\x00\x04"
        # the original timestamp is carried byte for byte; coordinates still point at the main topic
        assert H.last_header(headers, H.ORIGINAL_TIMESTAMP) == original_ts.to_bytes(6, "big")
        coords = H.read_original_coordinates(headers)
        assert (coords.topic, coords.partition, coords.consumer_group) == (topic, 0, "orders-service")
        assert coords.offset == {"fail-int": 101, "fail-legacy": 102}[rid]
        # written the way Spring's retry topics spell them, once each (carried over from the other
        # spelling when the record came with it); the Spring exception headers are replaced
        written = [k for k, _ in headers]
        for once in (
            "kafka_original-topic",
            "kafka_original-offset",
            "kafka_exception-fqcn",
            H.ATTEMPTS,
            H.BACKOFF_TIMESTAMP,
        ):
            assert written.count(once) == 1, once
        assert H.last_header(headers, "kafka_original-offset") == struct.pack(">q", coords.offset)
        assert (
            H.last_header(headers, "kafka_exception-fqcn")
            == f"{ledger.HANDLER_MODULE}.PermanentError".encode()
        )
        java_values = (JAVA_EXCEPTION, b"java.lang.IllegalStateException", b"Listener method threw exception")
        assert not [k for k, v in headers if v in java_values or (v or b"").startswith(b"java.lang")], (
            "the Java failure's exception headers were kept"
        )
        assert (
            H.last_header(headers, SPRING_FAMILIES["dead-letter-recoverer"]["cause"]) is None
        )  # no stale cause
        # the cause header: none for a cause-less exception by default; Spring's rule (the handler's own
        # exception) under the preset
        assert H.last_header(headers, "kafka_exception-cause-fqcn") == (
            f"{ledger.HANDLER_MODULE}.PermanentError".encode() if naming.startswith("compat") else None
        )
        assert H.last_header(headers, "traceparent") == b"00-abc-01"
        due = H.read_due_ms(headers)
        assert now + 5_000 <= due <= int(time.time() * 1000) + 5_000


@pytest.mark.parametrize("family", sorted(SPRING_FAMILIES))
def test_under_the_spring_preset_a_spring_record_in_the_shared_retry_topic_continues(
    kafka_bootstrap, tmp_path, family
):
    """compat: spring-3.2 -- Spring's @RetryableTopic names: one reusable '<topic>-retry' topic, its group
    '<group>-retry'. Records with Spring's headers (produced here from Python) are drained, and go on with
    Spring's attempt count and header family: back into '<topic>-retry' while attempts remain, then to
    '<topic>-dlt'."""
    names = SPRING_FAMILIES[family]
    ledger_file = ledger.ledger_path(tmp_path)
    topic = unique_topic("spring")
    topology = Topology.from_mapping(
        {
            "topic": topic,
            "group_id": "orders-service",
            "compat": "spring-3.2",
            "attempts": 4,
            "backoff": {"kind": "fixed", "delay": "5s"},
        }
    )
    tier = topology.select(f"{topic}-retry")
    assert (tier.index, tier.reusable, len(topology.retry_tiers)) == (1, True, 1)
    assert topology.consumer_group(tier) == "orders-service-retry"
    ensure_topics(topology, {"bootstrap.servers": kafka_bootstrap}, partitions=1)
    now = int(time.time() * 1000)
    original_ts = now - 60_000
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    cases = {  # Spring: the main topic's failure sends attempt 2 to '-retry', the retry's failure attempt 3
        "ok": (struct.pack(">i", 2), "ok"),
        "again": (struct.pack(">i", 2), "permanent"),
        "last": (struct.pack(">i", 4), "permanent"),
    }
    for offset, (rid, (attempts, mode)) in enumerate(cases.items()):
        producer.produce(
            tier.topic,
            json.dumps({"id": rid, "mode": mode}).encode(),
            key=rid.encode(),
            partition=0,
            timestamp=now - 1000,
            headers=spring_headers(
                names,
                attempts=attempts,
                due_ms=now - 1000,
                original_ts=original_ts,
                main_topic=topic,
                offset=100 + offset,
            ),
        )
    assert producer.flush(10) == 0

    options = DrainOptions(
        handler=f"{ledger.HANDLER_MODULE}:indexed", value_deserializer=f"{ledger.HANDLER_MODULE}:decode"
    )
    summary = run_local(topology, tier, {"bootstrap.servers": kafka_bootstrap}, options)
    assert summary.ok
    assert summary.partitions[0].drained == 3
    assert summary.group == "orders-service-retry"
    assert ledger.processed_ids(ledger_file) == {"ok": 1}
    assert ledger.committed(kafka_bootstrap, "orders-service-retry", tier.topic, 1) == {0: 3}

    again = [m for m in ledger.read_all(kafka_bootstrap, tier.topic) if m.offset() >= len(cases)]
    dead = ledger.read_all(kafka_bootstrap, f"{topic}-dlt")
    assert [m.key() for m in again] == [b"again"]
    assert [m.key() for m in dead] == [b"last"]
    for msg, attempt in ((again[0], 3), (dead[0], 5)):
        headers = msg.headers()
        assert H.last_header(headers, H.ATTEMPTS) == struct.pack(">i", attempt)
        assert H.last_header(headers, H.ORIGINAL_TIMESTAMP) == original_ts.to_bytes(6, "big")
        # Spring's retry-topic family, coordinates of the first failure carried over from the Java record
        assert H.last_header(headers, "kafka_original-topic") == topic.encode()
        offset = {"again": 101, "last": 102}[msg.key().decode()]
        assert H.last_header(headers, "kafka_original-offset") == struct.pack(">q", offset)
        assert H.last_header(headers, "kafka_dlt-original-consumer-group") == b"orders-service"
        # the cause header as Spring writes it (ErrorHandlingUtils.findRootCause): the handler's own exception
        error = f"{ledger.HANDLER_MODULE}.PermanentError".encode()
        assert H.last_header(headers, "kafka_exception-fqcn") == error
        assert H.last_header(headers, "kafka_exception-cause-fqcn") == error
        assert [k for k, _ in headers].count("kafka_exception-cause-fqcn") == 1
        assert not [k for k, v in headers if (v or b"").startswith(b"java.lang")]
    assert now + 5_000 <= H.read_due_ms(again[0].headers()) <= int(time.time() * 1000) + 5_000
