"""
Every framework's dead letters read into one description, from header bytes exactly as each source writes
them (policy/dead_letters/families.py cites the files): Spring's ByteBuffer.putInt/putLong and
BigInteger.toByteArray, Kafka Connect's and the share-group DLQ's decimal text.
"""

from __future__ import annotations

import random
import struct

import pytest

from airflow_kafka_retry.policy.dead_letters import families as F
from airflow_kafka_retry.policy.dead_letters.families import describe_dead_letter, families_seen
from airflow_kafka_retry.policy.dead_letters.framework_headers import check_mode, framework_headers_kept
from airflow_kafka_retry.policy.errors import ReplayError

T_SOURCE = 1_795_428_000_000  # when the source record was produced
T_DLT = T_SOURCE + 60_000  # when it was dead-lettered


def put_int(n: int) -> bytes:  # ByteBuffer.allocate(Integer.BYTES).putInt(n).array()
    return struct.pack(">i", n)


def put_long(n: int) -> bytes:  # ByteBuffer.allocate(Long.BYTES).putLong(n).array()
    return struct.pack(">q", n)


def big_integer(n: int) -> bytes:  # BigInteger.valueOf(n).toByteArray(): minimal two's complement
    return n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)


def utf8(text: str) -> bytes:
    return text.encode("utf-8")


def spring_retry_topic_dlt() -> list:
    """What DeadLetterPublishingRecovererFactory's recoverer writes on a record it sends to the DLT."""
    return [
        ("trace-id", b"t-1"),  # the source's own header, kept
        ("kafka_original-topic", utf8("orders")),
        ("kafka_original-partition", put_int(3)),
        ("kafka_original-offset", put_long(41)),
        ("kafka_original-timestamp", put_long(T_SOURCE)),
        ("kafka_original-timestamp-type", utf8("CreateTime")),
        ("kafka_dlt-original-consumer-group", utf8("orders-svc")),
        ("kafka_exception-fqcn", utf8("org.springframework.kafka.listener.ListenerExecutionFailedException")),
        ("kafka_exception-cause-fqcn", utf8("com.example.InvalidOrder")),
        ("kafka_exception-message", utf8("Listener failed; bad order")),
        ("kafka_exception-stacktrace", utf8("...")),
        ("retry_topic-original-timestamp", big_integer(T_SOURCE)),
        ("retry_topic-attempts", put_int(4)),  # the factory writes attempts + 1: 3 deliveries
        ("retry_topic-backoff-timestamp", big_integer(T_DLT)),
    ]


def connect_dlq() -> list:
    """DeadLetterQueueReporter with context headers: the source's headers first, then its own, as text."""
    return [
        ("trace-id", b"t-2"),
        ("__connect.errors.topic", utf8("orders")),
        ("__connect.errors.partition", utf8("2")),  # String.valueOf(int)
        ("__connect.errors.offset", utf8("9000000000")),  # String.valueOf(long)
        ("__connect.errors.connector.name", utf8("orders-sink")),
        ("__connect.errors.task.id", utf8("0")),
        ("__connect.errors.stage", utf8("VALUE_CONVERTER")),
        ("__connect.errors.class.name", utf8("org.apache.kafka.connect.json.JsonConverter")),
        ("__connect.errors.exception.class.name", utf8("org.apache.kafka.connect.errors.DataException")),
        ("__connect.errors.exception.message", utf8("Converting byte[] to Kafka Connect data failed")),
        ("__connect.errors.exception.stacktrace", utf8("org.apache.kafka.connect.errors.DataException: ...")),
    ]


def share_dlq(delivery_count: bool = True) -> list:
    """ShareGroupDLQStateManager.headers(offset): decimal text; delivery count only when known."""
    headers = [
        ("__dlq.errors.topic", utf8("orders")),
        ("__dlq.errors.partition", utf8("1")),  # Integer.toString
        ("__dlq.errors.offset", utf8("77")),  # Long.toString
        ("__dlq.errors.group", utf8("workers")),
    ]
    if delivery_count:
        headers.append(("__dlq.errors.delivery.count", utf8("5")))  # Short.toString
    headers.append(("__dlq.errors.message", utf8("Offset delivery count exceeded the threshold.")))
    return headers


# ---------------------------------------------------------------------- each family
def test_spring_retry_topics():
    d = describe_dead_letter(spring_retry_topic_dlt(), T_DLT)
    assert d.family == "spring-retry-topic"
    assert (d.original_topic, d.original_partition, d.original_offset) == ("orders", 3, 41)
    assert (d.original_timestamp_ms, d.original_timestamp_type, d.failed_at_ms) == (
        T_SOURCE,
        "CreateTime",
        T_DLT,
    )
    assert (d.group, d.failure_cause, d.failure_message) == (
        "orders-svc",
        "com.example.InvalidOrder",
        "Listener failed; bad order",
    )
    assert d.failure_class == "org.springframework.kafka.listener.ListenerExecutionFailedException"
    assert d.delivery_count == 3
    assert (d.missing, d.unreadable) == ((), ())


def test_spring_plain_recoverer_without_group_or_attempts():
    headers = [
        ("kafka_dlt-original-topic", utf8("orders")),
        ("kafka_dlt-original-partition", put_int(0)),
        ("kafka_dlt-original-offset", put_long(5)),
        ("kafka_dlt-original-timestamp", put_long(T_SOURCE)),
        ("kafka_dlt-original-timestamp-type", utf8("CreateTime")),
        ("kafka_dlt-exception-fqcn", utf8("java.lang.IllegalStateException")),
        ("kafka_dlt-exception-message", utf8("boom")),
    ]
    d = describe_dead_letter(headers, T_DLT)
    assert d.family == "spring-dead-letter"
    assert (d.original_topic, d.original_partition, d.original_offset, d.original_timestamp_ms) == (
        "orders",
        0,
        5,
        T_SOURCE,
    )
    assert d.missing == ("group_or_connector", "delivery_count")  # no ListenerExecutionFailedException group


def test_spring_key_exception_counts_when_the_value_has_none_and_legacy_one_byte_attempts():
    headers = [
        ("kafka_original-topic", utf8("orders")),
        ("kafka_key-exception-fqcn", utf8("org.apache.kafka.common.errors.SerializationException")),
        ("kafka_key-exception-message", utf8("bad key")),
        ("retry_topic-attempts", bytes([3])),  # older Spring: one unsigned byte
    ]
    d = describe_dead_letter(headers, T_DLT)
    assert (d.failure_class, d.failure_message, d.delivery_count) == (
        "org.apache.kafka.common.errors.SerializationException",
        "bad key",
        2,
    )


def test_spring_big_integer_and_long_timestamps():
    """kafka_original-timestamp is a putLong; retry_topic-original-timestamp a BigInteger (6 bytes here)."""
    assert len(big_integer(T_SOURCE)) == 6
    only_big = [
        ("kafka_original-topic", b"orders"),
        ("retry_topic-original-timestamp", big_integer(T_SOURCE)),
    ]
    assert describe_dead_letter(only_big, T_DLT).original_timestamp_ms == T_SOURCE
    # a BigInteger where Spring writes a long: unreadable by name, the retry header read instead
    mixed = [("kafka_original-timestamp", big_integer(T_SOURCE + 5)), *only_big]
    d = describe_dead_letter(mixed, T_DLT)
    assert d.original_timestamp_ms == T_SOURCE
    assert dict(d.unreadable) == {"kafka_original-timestamp": "6 byte(s), expected 8 (big-endian)"}


def test_kafka_connect():
    d = describe_dead_letter(connect_dlq(), T_SOURCE)  # the reporter keeps the source's timestamp
    assert d.family == "kafka-connect"
    assert (d.original_topic, d.original_partition, d.original_offset) == ("orders", 2, 9_000_000_000)
    assert (d.connector, d.task, d.stage) == ("orders-sink", 0, "VALUE_CONVERTER")
    assert d.executing_class == "org.apache.kafka.connect.json.JsonConverter"
    assert d.failure_class == "org.apache.kafka.connect.errors.DataException"
    assert d.failure_message == "Converting byte[] to Kafka Connect data failed"
    assert (d.original_timestamp_ms, d.failed_at_ms) == (T_SOURCE, None)
    assert d.missing == ("failed_at", "delivery_count")
    assert d.unreadable == ()


def test_kafka_connect_minus_one_when_it_had_no_source_record():
    headers = [("__connect.errors.topic", b""), ("__connect.errors.partition", b"-1")]
    headers += [("__connect.errors.offset", b"-1")]
    d = describe_dead_letter(headers, T_SOURCE)
    assert (d.original_topic, d.original_partition, d.original_offset) == (None, None, None)
    assert sorted(dict(d.unreadable)) == [
        "__connect.errors.offset",
        "__connect.errors.partition",
        "__connect.errors.topic",
    ]


def test_share_group():
    d = describe_dead_letter(share_dlq(), T_DLT, key=b"k", value=b"v")
    assert d.family == "share-group"
    assert (d.original_topic, d.original_partition, d.original_offset) == ("orders", 1, 77)
    assert (d.group, d.delivery_count, d.failed_at_ms) == ("workers", 5, T_DLT)
    assert d.failure_message == "Offset delivery count exceeded the threshold."
    assert d.record_copied
    assert d.missing == ("original_timestamp", "failure_class")


def test_share_group_without_the_copied_record_or_a_delivery_count():
    d = describe_dead_letter(share_dlq(delivery_count=False), T_DLT, key=None, value=None)
    assert not d.record_copied
    assert (d.original_topic, d.original_partition, d.original_offset) == (
        "orders",
        1,
        77,
    )  # metadata still read
    assert "delivery_count" in d.missing


def test_airflow_and_unknown():
    """Airflow's provider writes key and value only: told from any other headerless record only when named."""
    unknown = describe_dead_letter([("trace-id", b"x")], T_DLT)
    assert (unknown.family, unknown.failed_at_ms) == ("unknown", T_DLT)
    airflow = describe_dead_letter([], T_DLT, assume="airflow")
    assert airflow.family == "airflow"
    assert airflow.missing == tuple(f for f in F.FIELDS if f != "failed_at")
    connect_without_context = describe_dead_letter([], T_SOURCE, assume="kafka-connect")
    assert (connect_without_context.original_timestamp_ms, connect_without_context.failed_at_ms) == (
        T_SOURCE,
        None,
    )
    # a named family never overrides the headers
    assert describe_dead_letter(share_dlq(), T_DLT, assume="airflow").family == "share-group"


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("kafka_original-partition", put_long(3), "8 byte(s), expected 4 (big-endian)"),
        ("kafka_original-offset", put_int(41), "4 byte(s), expected 8 (big-endian)"),
        ("kafka_original-topic", b"\xff\xfeorders", "not UTF-8 (byte 0)"),
        ("kafka_original-topic", None, "null value"),
        ("retry_topic-attempts", b"\x00\x00", "2 byte(s), expected 4 (or 1 in older Spring versions)"),
        ("retry_topic-original-timestamp", bytes(9), "9 byte(s), expected 1 to 8 (BigInteger of a long)"),
    ],
)
def test_a_spring_header_of_the_wrong_shape_is_named_and_the_rest_read(name, value, reason):
    headers = [(k, v) for k, v in spring_retry_topic_dlt() if k != name] + [(name, value)]
    d = describe_dead_letter(headers, T_DLT)
    assert dict(d.unreadable) == {name: reason}
    assert d.family == "spring-retry-topic"
    assert d.failure_cause == "com.example.InvalidOrder"  # what is sound is still read


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("__dlq.errors.partition", b"1.0", "not decimal text ('1.0')"),
        ("__dlq.errors.offset", put_long(77), "not decimal text"),  # binary where text is written
        ("__dlq.errors.delivery.count", b"40000", "40000 is out of range -32768..32767"),
        ("__dlq.errors.partition", b"2147483648", "2147483648 is out of range -2147483648..2147483647"),
        ("__dlq.errors.group", b"\xc3", "not UTF-8 (byte 0)"),
    ],
)
def test_a_share_header_of_the_wrong_shape_is_named_and_the_rest_read(name, value, reason):
    headers = [(k, v) for k, v in share_dlq() if k != name] + [(name, value)]
    d = describe_dead_letter(headers, T_DLT)
    assert list(dict(d.unreadable)) == [name]
    assert dict(d.unreadable)[name].startswith(reason)
    assert d.original_topic == "orders"


def test_mixed_families_use_the_latest_writer_and_report_all():
    """Connect failing on a Spring dead letter keeps Spring's headers and appends its own: Connect is used."""
    spring_then_connect = spring_retry_topic_dlt() + connect_dlq()[1:]
    d = describe_dead_letter(spring_then_connect, T_SOURCE)
    assert d.families == ("spring-retry-topic", "kafka-connect")
    assert d.family == "kafka-connect"
    assert (d.original_topic, d.original_partition, d.connector) == ("orders", 2, "orders-sink")
    assert d.failure_class == "org.apache.kafka.connect.errors.DataException"
    # the other way round: a Spring service dead-lettering a Connect dead letter it consumed
    connect_then_spring = connect_dlq() + [
        ("kafka_original-topic", utf8("connect-dlq")),
        ("kafka_original-partition", put_int(0)),
        ("kafka_original-offset", put_long(6)),
        ("kafka_exception-fqcn", utf8("a.B")),
    ]
    d = describe_dead_letter(connect_then_spring, T_DLT)
    assert (d.family, d.families) == ("spring-retry-topic", ("kafka-connect", "spring-retry-topic"))
    assert (d.original_topic, d.original_offset, d.failure_class) == ("connect-dlq", 6, "a.B")


def test_spring_spellings_are_read_field_by_field_and_a_broken_one_elsewhere_is_still_named():
    headers = [
        ("kafka_original-topic", utf8("orders")),
        ("kafka_original-partition", b"\x01"),  # broken in the used spelling
        ("kafka_dlt-original-partition", put_int(2)),
        ("kafka_dlt-original-offset", put_long(9)),
        ("__connect.errors.partition", b"zz"),  # an older family's broken header
        ("kafka_exception-fqcn", utf8("a.B")),
    ]
    d = describe_dead_letter(headers, T_DLT)
    assert d.family == "spring-retry-topic"
    assert (d.original_topic, d.original_partition, d.original_offset) == ("orders", 2, 9)
    # read from the used family only, but a broken header of any family seen is named
    assert sorted(dict(d.unreadable)) == ["__connect.errors.partition", "kafka_original-partition"]
    assert d.families == ("spring-dead-letter", "kafka-connect", "spring-retry-topic")


def test_families_seen_ignore_the_shared_spring_group_name():
    assert families_seen([("kafka_dlt-original-consumer-group", b"g")]) == []
    assert families_seen([("__dlq.errors.topic", b"t"), ("x", b"")]) == ["share-group"]


def test_never_raises_on_any_bytes():
    rng = random.Random(41)
    names = [n for h in (spring_retry_topic_dlt(), connect_dlq(), share_dlq()) for n, _ in h]
    for _ in range(2000):
        headers = [
            (rng.choice(names), None if rng.random() < 0.05 else rng.randbytes(rng.randrange(0, 12)))
            for _ in range(rng.randrange(0, 8))
        ]
        d = describe_dead_letter(headers, rng.randrange(-1, 2**40))
        assert d.family in F.FAMILIES
        assert set(d.missing) <= set(F.FIELDS)


# ---------------------------------------------------------------------- framework headers on a replayed copy
def test_framework_headers_modes():
    headers = spring_retry_topic_dlt() + connect_dlq()[1:] + share_dlq()
    auto = [k for k, _ in framework_headers_kept(headers, "auto")]
    assert "kafka_original-topic" in auto
    assert "trace-id" in auto
    assert not [k for k in auto if k.startswith(("__connect.", "__dlq."))]
    dropped = [k for k, _ in framework_headers_kept(headers, "drop")]
    assert not [k for k in dropped if k.startswith(("__connect.", "__dlq.", "kafka_original-", "kafka_dlt-"))]
    assert "trace-id" in dropped
    assert "kafka_exception-fqcn" in dropped
    assert framework_headers_kept(headers, "keep") == headers
    assert check_mode(None) == "auto"
    with pytest.raises(ReplayError, match="--framework-headers 'some': use one of auto, keep, drop"):
        check_mode("some")
