"""Spring's two dead-letter families as spring-kafka writes them, decoded (issue 41), and how their
exception messages are shown.

The headers are built here exactly as ``DeadLetterPublishingRecoverer`` (spring-kafka 3.3 and 4.0:
``maybeAddOriginalHeaders``, ``addExceptionInfoHeaders``, ``buildMessage``) and
``DeadLetterPublishingRecovererFactory.addHeaders`` write them; the real service's records are checked in
``tests/interop/test_blocking_dlt_replay.py``.
"""

from __future__ import annotations

import struct

import pytest

from airflow_kafka_retry.dlt.groups import sample_of
from airflow_kafka_retry.dlt.records import DltRecord
from airflow_kafka_retry.policy.dead_letters.families import describe_dead_letter
from airflow_kafka_retry.policy.headers.bounds import MAX_VALUE_CHARS, bound_message, bound_value

WRAPPER = "org.springframework.kafka.listener.ListenerExecutionFailedException"
CAUSE = "com.example.orders.OrderFailures$PoisonOrderException"
#: ``buildMessage``: the wrapper's message, "; ", the root cause's
MESSAGE = (
    "Listener method 'public void com.example.orders.PaymentsListener.onPayment(org.apache.kafka.clients."
    "consumer.ConsumerRecord<java.lang.String, java.lang.String>)' threw exception; no exchange rate for CHF"
)


def spring_headers(prefix: str, exception_prefix: str) -> list[tuple[str, bytes]]:
    """A source header, then the original headers and the exception headers, in Spring's order."""
    return [
        ("trace-id", b"abc"),
        (f"{prefix}topic", b"payments"),
        (f"{prefix}partition", struct.pack(">i", 3)),  # ByteBuffer.allocate(4).putInt
        (f"{prefix}offset", struct.pack(">q", 2**40 + 7)),  # ByteBuffer.allocate(8).putLong
        (f"{prefix}timestamp", struct.pack(">q", 1_795_915_856_839)),
        (f"{prefix}timestamp-type", b"CreateTime"),  # TimestampType.toString()
        ("kafka_dlt-original-consumer-group", b"payments-service"),  # one name in both spellings
        (f"{exception_prefix}fqcn", WRAPPER.encode()),
        (f"{exception_prefix}cause-fqcn", CAUSE.encode()),  # ErrorHandlingUtils.findRootCause
        (f"{exception_prefix}message", MESSAGE.encode()),
        (f"{exception_prefix}stacktrace", f"{WRAPPER}: {MESSAGE}\n\tat ...".encode()),
    ]


def test_a_plain_recoverers_kafka_dlt_headers():
    letter = describe_dead_letter(
        spring_headers("kafka_dlt-original-", "kafka_dlt-exception-"), 1_795_915_861_590
    )
    assert letter.family == "spring-dead-letter"
    assert (letter.original_topic, letter.original_partition, letter.original_offset) == (
        "payments",
        3,
        2**40 + 7,
    )
    assert (letter.original_timestamp_ms, letter.original_timestamp_type) == (1_795_915_856_839, "CreateTime")
    assert (letter.failed_at_ms, letter.group) == (1_795_915_861_590, "payments-service")
    assert (letter.failure_class, letter.failure_cause, letter.failure_message) == (WRAPPER, CAUSE, MESSAGE)
    assert (letter.delivery_count, letter.missing, letter.unreadable) == (None, ("delivery_count",), ())


def test_retry_topics_kafka_original_headers_and_the_next_attempts_number():
    headers = spring_headers("kafka_original-", "kafka_exception-") + [
        ("retry_topic-original-timestamp", (1_795_915_856_839).to_bytes(6, "big")),  # BigInteger.toByteArray
        ("retry_topic-attempts", struct.pack(">i", 5)),  # putInt(attempts + 1): 4 deliveries
        ("retry_topic-backoff-timestamp", (1_795_915_861_000).to_bytes(6, "big")),
    ]
    letter = describe_dead_letter(headers, 1_795_915_861_590)
    assert letter.family == "spring-retry-topic"
    assert (letter.original_partition, letter.original_offset, letter.original_timestamp_ms) == (
        3,
        2**40 + 7,
        1_795_915_856_839,
    )
    assert (letter.failure_class, letter.failure_cause, letter.delivery_count) == (WRAPPER, CAUSE, 4)
    assert (letter.missing, letter.unreadable) == ((), ())


def test_a_key_exception_is_the_failure_when_the_value_had_none():
    """``addExceptionInfoHeaders(isKey=true)``: ``kafka_dlt-key-exception-fqcn`` and ``-message``; the cause
    goes to the one cause header of both."""
    headers = [
        ("kafka_dlt-original-topic", b"payments"),
        (
            "kafka_dlt-key-exception-fqcn",
            b"org.springframework.kafka.support.serializer.DeserializationException",
        ),
        ("kafka_dlt-exception-cause-fqcn", b"java.lang.NumberFormatException"),
        ("kafka_dlt-key-exception-message", b'failed to deserialize; For input string: "x"'),
    ]
    letter = describe_dead_letter(headers, 1)
    assert letter.failure_class == "org.springframework.kafka.support.serializer.DeserializationException"
    assert letter.failure_cause == "java.lang.NumberFormatException"
    assert letter.failure_message == 'failed to deserialize; For input string: "x"'


def test_a_long_spring_message_keeps_the_root_causes_message_in_inspect():
    record = DltRecord(
        "payments-dlt",
        0,
        9,
        1_795_915_861_590,
        b"p3",
        b"poison",
        tuple(spring_headers("kafka_dlt-original-", "kafka_dlt-exception-")),
    )
    sample = sample_of(record, record.dead_letter)
    assert len(MESSAGE) > MAX_VALUE_CHARS
    assert sample["failure_message"].startswith("Listener method 'public void com.example.orders.")
    assert sample["failure_message"].endswith("threw exception; no exchange rate for CHF")
    assert f"...({len(MESSAGE)} characters)..." in sample["failure_message"]
    assert len(sample["failure_message"]) == MAX_VALUE_CHARS
    assert "value" not in sample
    assert "key" not in sample


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (None, None),
        ("short; message", "short; message"),
        ("x" * MAX_VALUE_CHARS, "x" * MAX_VALUE_CHARS),
        ("line\nbreak", "line\\nbreak"),
    ],
)
def test_bound_message_leaves_short_messages_as_bound_value_does(raw, shown):
    assert bound_message(raw) == shown == bound_value(raw)


def test_bound_message_keeps_head_and_tail_escaped_within_the_bound():
    raw = "\x1b[31m" + "h" * 300 + "; " + "t" * 50 + "\u202eend"
    shown = bound_message(raw)
    assert shown is not None
    assert len(shown) <= MAX_VALUE_CHARS
    assert shown.startswith("\\x1b[31mhhh")
    assert shown.endswith("ttt\\u202eend")
    assert f"...({len(raw)} characters)..." in shown
    assert "\x1b" not in shown
    assert "\u202e" not in shown
    # escapes that make a short message too long are bounded too
    escaped = bound_message("\n" * MAX_VALUE_CHARS)
    assert escaped is not None
    assert len(escaped) <= MAX_VALUE_CHARS
    assert escaped.endswith("\\n")
