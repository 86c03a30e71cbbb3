"""Spring's two header families, and records that carry the other family (pure, no network).

Spring writes the original-coordinate and exception headers under two sets of names:

* non-blocking retries (``DeadLetterPublishingRecovererFactory.create`` sets a ``HeaderNames``
  supplier of ``KafkaHeaders.ORIGINAL_*`` / ``EXCEPTION_*`` / ``KEY_EXCEPTION_*``): ``kafka_original-*``,
  ``kafka_exception-*``, ``kafka_key-exception-*`` -- and ``KafkaHeaders.ORIGINAL_CONSUMER_GROUP``,
  which Spring spells ``kafka_dlt-original-consumer-group``;
* a plain ``DeadLetterPublishingRecoverer`` (``KafkaHeaders.DLT_*``): ``kafka_dlt-*``.

The names below are copied from Spring's ``KafkaHeaders`` constants, not from the codec.
"""

from __future__ import annotations

import pytest

from airflow_kafka_retry.policy.headers import codec as h
from airflow_kafka_retry.policy.headers.codec import read_original_coordinates
from airflow_kafka_retry.policy.headers.failure import ExceptionInfo, Failure, forward_headers
from airflow_kafka_retry.policy.headers.header_policy import HEADER_NAMINGS, HeaderPolicy

T0 = 1_700_000_000_000  # hex 018bcfe56800
INFO = ExceptionInfo(
    fqcn="myapp.errors.InvalidOrder", message="no customer", stacktrace="trace", cause_fqcn="KeyError"
)

SPRING_RETRY_TOPIC_ORIGINALS = (
    "kafka_original-topic",
    "kafka_original-partition",
    "kafka_original-offset",
    "kafka_original-timestamp",
    "kafka_original-timestamp-type",
    "kafka_dlt-original-consumer-group",
)
SPRING_RETRY_TOPIC_EXCEPTIONS = (
    "kafka_exception-fqcn",
    "kafka_exception-cause-fqcn",
    "kafka_exception-message",
    "kafka_exception-stacktrace",
    "kafka_key-exception-fqcn",
    "kafka_key-exception-message",
    "kafka_key-exception-stacktrace",
)
# What a Spring DeadLetterPublishingRecoverer wrote for orders-retry-0[5]@17 at T0 - 1000 (a blocking
# error handler's DLT record, later fed into a retry path)
DLT_FAMILY_RECORD = [
    ("kafka_dlt-original-topic", b"orders"),
    ("kafka_dlt-original-partition", bytes.fromhex("00000005")),
    ("kafka_dlt-original-offset", bytes.fromhex("0000000000000011")),
    ("kafka_dlt-original-timestamp", bytes.fromhex("0000018bcfe56418")),
    ("kafka_dlt-original-timestamp-type", b"LogAppendTime"),
    ("kafka_dlt-original-consumer-group", b"legacy-service"),
    ("kafka_dlt-exception-fqcn", b"org.springframework.kafka.listener.ListenerExecutionFailedException"),
    ("kafka_dlt-exception-message", b"Listener failed"),
    ("kafka_dlt-exception-stacktrace", b"java stack " * 50),
]


def failure(**overrides) -> Failure:
    data = dict(
        topic="orders-retry-1",
        partition=3,
        offset=42,
        timestamp_ms=T0,
        timestamp_type=1,
        consumer_group="orders-service",
        next_attempt=3,
        due_ms=T0 + 30_000,
        exception=INFO,
    )
    data.update(overrides)
    return Failure(**data)


def names_of(headers) -> list[str]:
    return [k for k, _ in headers]


def test_the_retry_topic_family_is_what_springs_non_blocking_retries_write() -> None:
    assert h.RETRY_TOPIC_NAMES.originals == SPRING_RETRY_TOPIC_ORIGINALS
    assert h.RETRY_TOPIC_NAMES.exceptions == SPRING_RETRY_TOPIC_EXCEPTIONS
    assert tuple(h.HEADER_NAMES) == HEADER_NAMINGS
    assert HeaderPolicy().naming == "retry_topic"


def test_first_failure_with_the_default_naming_byte_for_byte() -> None:
    out = forward_headers(None, failure(topic="orders", next_attempt=2), HeaderPolicy())
    assert out == [
        ("kafka_original-topic", b"orders"),
        ("kafka_original-partition", bytes.fromhex("00000003")),
        ("kafka_original-offset", bytes.fromhex("000000000000002a")),
        ("kafka_original-timestamp", bytes.fromhex("0000018bcfe56800")),
        ("kafka_original-timestamp-type", b"CreateTime"),
        ("kafka_dlt-original-consumer-group", b"orders-service"),
        ("kafka_exception-fqcn", b"myapp.errors.InvalidOrder"),
        ("kafka_exception-cause-fqcn", b"KeyError"),
        ("kafka_exception-message", b"no customer"),
        ("kafka_exception-stacktrace", b"trace"),
        ("retry_topic-original-timestamp", bytes.fromhex("018bcfe56800")),
        ("retry_topic-attempts", bytes.fromhex("00000002")),
        ("retry_topic-backoff-timestamp", bytes.fromhex("018bcfe5dd30")),
    ]


def test_key_failures_use_the_families_key_exception_names() -> None:
    key_info = ExceptionInfo(
        "airflow_kafka_retry.errors.DeserializationError", "bad key", "t", None, key=True
    )
    out = forward_headers(None, failure(exception=key_info), HeaderPolicy())
    assert [n for n in names_of(out) if "exception" in n] == [
        "kafka_key-exception-fqcn",
        "kafka_key-exception-message",
        "kafka_key-exception-stacktrace",
    ]


@pytest.mark.parametrize("naming", HEADER_NAMINGS)
def test_coordinates_of_the_other_family_are_carried_over_not_restamped(naming: str) -> None:
    out = forward_headers(DLT_FAMILY_RECORD, failure(), HeaderPolicy(naming=naming))
    coordinates = read_original_coordinates(out, prefer=h.HEADER_NAMES[naming])
    # the first failure (orders[5]@17), not this one (orders-retry-1[3]@42)
    assert (
        coordinates.topic,
        coordinates.partition,
        coordinates.offset,
        coordinates.timestamp_ms,
        coordinates.timestamp_type,
        coordinates.consumer_group,
    ) == ("orders", 5, 17, T0 - 1_000, "LogAppendTime", "legacy-service")
    names = h.HEADER_NAMES[naming]
    for name in names.originals:
        assert names_of(out).count(name) == 1, name
    if naming == "retry_topic":  # copied byte for byte into the Spring retry-topic names
        assert dict(out)["kafka_original-offset"] == bytes.fromhex("0000000000000011")
        assert dict(out)["kafka_original-timestamp-type"] == b"LogAppendTime"


def test_a_spring_retry_topic_record_keeps_its_coordinates_under_the_dead_letter_naming() -> None:
    first = forward_headers(
        None, failure(topic="orders", partition=1, offset=7, next_attempt=2), HeaderPolicy()
    )
    out = forward_headers(first, failure(), HeaderPolicy(naming="dead_letter"))
    coords = read_original_coordinates(out, prefer=h.DEAD_LETTER_NAMES)
    assert (coords.topic, coords.partition, coords.offset) == ("orders", 1, 7)
    assert dict(out)["kafka_dlt-original-offset"] == bytes.fromhex("0000000000000007")
    assert dict(out)["kafka_original-offset"] == bytes.fromhex("0000000000000007")  # kept, never dropped


@pytest.mark.parametrize("naming", HEADER_NAMINGS)
def test_exception_headers_of_both_families_are_replaced(naming: str) -> None:
    out = forward_headers(DLT_FAMILY_RECORD, failure(), HeaderPolicy(naming=naming))
    exception_names = [n for n in names_of(out) if "exception" in n]
    assert exception_names == list(h.HEADER_NAMES[naming].exceptions[:4])
    assert dict(out)[h.HEADER_NAMES[naming].exception_fqcn] == b"myapp.errors.InvalidOrder"


def test_without_stripping_the_other_familys_exception_headers_stay_and_shrink_first() -> None:
    policy = HeaderPolicy(strip_previous_exception_headers=False, max_header_bytes=1_024)
    out = forward_headers(DLT_FAMILY_RECORD, failure(), policy)
    assert dict(out)["kafka_dlt-exception-fqcn"].startswith(b"org.springframework")
    assert dict(out)["kafka_exception-fqcn"] == b"myapp.errors.InvalidOrder"
    assert sum(len(k) + len(v or b"") for k, v in out) <= 1_024
    assert dict(out)["kafka_dlt-exception-stacktrace"].endswith(b"...[truncated]")


@pytest.mark.parametrize(("prefer", "offset"), [(h.RETRY_TOPIC_NAMES, 1), (h.DEAD_LETTER_NAMES, 2)])
def test_reading_prefers_one_family_and_falls_back_to_the_other(prefer, offset) -> None:
    both = [
        ("kafka_original-offset", bytes.fromhex("0000000000000001")),
        ("kafka_dlt-original-offset", bytes.fromhex("0000000000000002")),
        ("kafka_dlt-original-topic", b"orders"),
    ]
    coords = read_original_coordinates(both, prefer=prefer)
    assert coords.offset == offset
    assert coords.topic == "orders"  # only the kafka_dlt family has it
    assert read_original_coordinates(both).offset == 1  # retry_topic names first by default
