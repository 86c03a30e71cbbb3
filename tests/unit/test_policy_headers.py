"""Unit tests for airflow_kafka_retry.policy.headers.codec and .header_policy (pure, no network, no Airflow).

Expected bytes are derived independently of the codec, from Spring for Apache Kafka 3.x's Java
encodings:

* ``retry_topic-attempts``: ``ByteBuffer.wrap(new byte[4]).putInt(attempts + 1)`` -> 4-byte big-endian int;
* ``retry_topic-backoff-timestamp`` / ``retry_topic-original-timestamp``:
  ``BigInteger.valueOf(ms).toByteArray()`` -> minimal two's-complement big-endian
  (length ``bitLength() / 8 + 1``);
* ``kafka_dlt-original-partition``: 4-byte big-endian int; ``-offset`` / ``-timestamp``: 8-byte
  big-endian long;
* text headers: UTF-8.

The reference encoders below use only shifts and masks (never ``int.to_bytes`` / ``struct``), and
many expectations are hard-coded hex literals.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.headers import codec as h
from airflow_kafka_retry.policy.headers.codec import (
    OriginalCoordinates,
    decode_big_integer_long,
    encode_big_integer,
    encode_int32,
    encode_int64,
    last_header,
    original_timestamp_bytes,
    read_attempts,
    read_due_ms,
    read_original_coordinates,
    read_original_timestamp,
)
from airflow_kafka_retry.policy.headers.failure import (
    ExceptionInfo,
    Failure,
    HeaderBudgetError,
    describe_exception,
    fit_budget,
    forward_headers,
    header_bytes,
)
from airflow_kafka_retry.policy.headers.header_policy import MIN_HEADER_BYTES, HeaderPolicy

T0 = 1_700_000_000_000  # hex 018bcfe56800
T0_BIGINT = bytes.fromhex("018bcfe56800")
T0_LONG = bytes.fromhex("0000018bcfe56800")
DUE = T0 + 30_000  # hex 018bcfe5dd30
DUE_BIGINT = bytes.fromhex("018bcfe5dd30")


# ---------------------------------------------------------------------- independent Java reference encoders
def java_put_int(value: int) -> bytes:
    """``ByteBuffer.allocate(4).putInt(value).array()``."""
    return bytes((value >> shift) & 0xFF for shift in (24, 16, 8, 0))


def java_put_long(value: int) -> bytes:
    """``ByteBuffer.allocate(8).putLong(value).array()``."""
    return bytes((value >> shift) & 0xFF for shift in range(56, -1, -8))


def java_big_integer_to_byte_array(value: int) -> bytes:
    """``BigInteger.valueOf(value).toByteArray()``: bitLength()/8 + 1 bytes of two's complement, big-endian.

    ``bitLength`` is the number of bits of the minimal two's-complement form without the sign bit:
    of ``value`` when non-negative, of ``-value - 1`` when negative.
    """
    magnitude = value if value >= 0 else -value - 1
    bit_length = 0
    while magnitude:
        magnitude >>= 1
        bit_length += 1
    length = bit_length // 8 + 1
    return bytes((value >> (8 * (length - 1 - i))) & 0xFF for i in range(length))


def header_size(headers: Sequence[tuple[str, bytes | None]]) -> int:
    return sum(len(k.encode("utf-8")) + len(v or b"") for k, v in headers)


def values(headers: Sequence[tuple[str, bytes | None]], name: str) -> list[bytes | None]:
    return [v for k, v in headers if k == name]


def the(headers: Sequence[tuple[str, bytes | None]], name: str) -> bytes | None:
    found = values(headers, name)
    assert len(found) == 1, (name, found)
    return found[0]


INFO = ExceptionInfo(
    fqcn="myapp.errors.InvalidOrder",
    message="no customer",
    stacktrace="Traceback (most recent call last):\n  boom\nmyapp.errors.InvalidOrder: no customer\n",
    cause_fqcn="KeyError",
)


def dlt_policy(**settings) -> HeaderPolicy:
    """The ``dead_letter`` naming (``kafka_dlt-*``), which the codec tests of this module spell out.

    The ``retry_topic`` naming (the default) and the rules across the two families are covered by
    ``test_policy_header_names.py``.
    """
    return HeaderPolicy(naming="dead_letter", **settings)


def failure(**overrides) -> Failure:
    data = dict(
        topic="orders",
        partition=3,
        offset=42,
        timestamp_ms=T0,
        timestamp_type=1,
        consumer_group="orders-service",
        next_attempt=2,
        due_ms=DUE,
        exception=INFO,
    )
    data.update(overrides)
    return Failure(**data)


# ---------------------------------------------------------------------- header names
def test_header_names_are_springs() -> None:
    assert (h.ATTEMPTS, h.BACKOFF_TIMESTAMP, h.ORIGINAL_TIMESTAMP) == (
        "retry_topic-attempts",
        "retry_topic-backoff-timestamp",
        "retry_topic-original-timestamp",
    )
    assert h.DEAD_LETTER_NAMES.originals == (
        "kafka_dlt-original-topic",
        "kafka_dlt-original-partition",
        "kafka_dlt-original-offset",
        "kafka_dlt-original-timestamp",
        "kafka_dlt-original-timestamp-type",
        "kafka_dlt-original-consumer-group",
    )
    assert h.DEAD_LETTER_NAMES.exceptions == (
        "kafka_dlt-exception-fqcn",
        "kafka_dlt-exception-cause-fqcn",
        "kafka_dlt-exception-message",
        "kafka_dlt-exception-stacktrace",
        "kafka_dlt-key-exception-fqcn",
        "kafka_dlt-key-exception-message",
        "kafka_dlt-key-exception-stacktrace",
    )
    assert h.ATTEMPTS_HARD_CAP == 32_767


# ---------------------------------------------------------------------- primitive encodings
@pytest.mark.parametrize(
    ("value", "hex_bytes"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "0080"),
        (255, "00ff"),
        (256, "0100"),
        (32_767, "7fff"),
        (32_768, "008000"),
        (65_535, "00ffff"),
        (-1, "ff"),
        (-127, "81"),
        (-128, "80"),
        (-129, "ff7f"),
        (-256, "ff00"),
        (-32_768, "8000"),
        (-32_769, "ff7fff"),
        (1_700_000_000_000, "018bcfe56800"),
        (1_700_000_030_000, "018bcfe5dd30"),
        (1_735_689_600_000, "01941f297c00"),  # 2025-01-01T00:00:00Z
        (2**31 - 1, "7fffffff"),
        (2**31, "0080000000"),
        (2**63 - 1, "7fffffffffffffff"),  # Long.MAX_VALUE
        (-(2**63), "8000000000000000"),  # Long.MIN_VALUE
    ],
)
def test_big_integer_literals(value: int, hex_bytes: str) -> None:
    assert java_big_integer_to_byte_array(value).hex() == hex_bytes  # the reference agrees with the literal
    assert encode_big_integer(value) == bytes.fromhex(hex_bytes)
    assert decode_big_integer_long(bytes.fromhex(hex_bytes)) == value


def _sweep() -> list[int]:
    values_ = set(range(-1_000, 1_000))
    for bits in range(1, 64):
        for base in (1 << bits, -(1 << bits)):
            values_.update({base - 1, base, base + 1})
    values_.update({T0, -T0, DUE, 2**63 - 1, -(2**63)})
    return sorted(v for v in values_ if -(2**63) <= v < 2**63)


def test_big_integer_matches_java_reference_across_ranges() -> None:
    for value in _sweep():
        expected = java_big_integer_to_byte_array(value)
        assert encode_big_integer(value) == expected, value
        assert decode_big_integer_long(expected) == value, value


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (bytes.fromhex("00" * 8), 0),
        (bytes.fromhex("ff" * 8), -1),  # non-minimal forms decode too
        (bytes.fromhex("0000000000000001"), 1),
        (bytes.fromhex("0080") + bytes(7), -(2**63)),  # 2**63 as BigInteger -> longValue wraps
        (bytes.fromhex("01") + bytes(8), 0),  # 2**64 -> low 64 bits are 0
        (bytes.fromhex("01") + bytes(7) + b"\x05", 5),
        (bytes.fromhex("ff7f"), -129),
    ],
)
def test_decode_big_integer_long_is_java_long_value(data: bytes, expected: int) -> None:
    assert decode_big_integer_long(data) == expected


@pytest.mark.parametrize(
    ("value", "hex_bytes"),
    [
        (0, "00000000"),
        (1, "00000001"),
        (2, "00000002"),
        (3, "00000003"),
        (255, "000000ff"),
        (256, "00000100"),
        (32_767, "00007fff"),
        (2**31 - 1, "7fffffff"),
        (-1, "ffffffff"),
        (-(2**31), "80000000"),
    ],
)
def test_int32_literals(value: int, hex_bytes: str) -> None:
    assert java_put_int(value).hex() == hex_bytes
    assert encode_int32(value) == bytes.fromhex(hex_bytes)


@pytest.mark.parametrize(
    ("value", "hex_bytes"),
    [
        (0, "0000000000000000"),
        (42, "000000000000002a"),
        (1_234_567_890_123, "0000011f71fb04cb"),
        (T0, "0000018bcfe56800"),
        (2**63 - 1, "7fffffffffffffff"),
        (-1, "ffffffffffffffff"),
    ],
)
def test_int64_literals(value: int, hex_bytes: str) -> None:
    assert java_put_long(value).hex() == hex_bytes
    assert encode_int64(value) == bytes.fromhex(hex_bytes)


def test_fixed_width_encodings_match_reference_across_ranges() -> None:
    for value in _sweep():
        assert encode_int64(value) == java_put_long(value), value
        if -(2**31) <= value < 2**31:
            assert encode_int32(value) == java_put_int(value), value


# ---------------------------------------------------------------------- reading
def test_last_header() -> None:
    headers = [("a", b"1"), ("b", b"2"), ("a", b"3"), ("c", None)]
    assert last_header(headers, "a") == b"3"
    assert last_header(headers, "b") == b"2"
    assert last_header(headers, "c") is None
    assert last_header(headers, "missing") is None
    assert last_header(None, "a") is None
    assert last_header([], "a") is None


@pytest.mark.parametrize(
    ("value", "attempt"),
    [
        (bytes.fromhex("00000002"), 2),  # Spring 3.x: putInt
        (bytes.fromhex("00000001"), 1),
        (bytes.fromhex("00000007"), 7),
        (bytes.fromhex("00000100"), 256),
        (bytes.fromhex("00007fff"), 32_767),
        (bytes.fromhex("00008000"), 1),  # above Short.MAX_VALUE -> 1
        (bytes.fromhex("ffffffff"), 1),  # negative -> 1
        (bytes.fromhex("80000000"), 1),
        (bytes.fromhex("00000000"), 1),  # zero -> 1
        (bytes.fromhex("05"), 5),  # legacy single byte
        (bytes.fromhex("7f"), 127),
        (bytes.fromhex("80"), 128),  # read as an unsigned byte
        (bytes.fromhex("ff"), 255),
        (bytes.fromhex("00"), 1),
        (bytes.fromhex("0002"), 1),  # any other length -> 1
        (bytes.fromhex("000002"), 1),
        (bytes.fromhex("0000000000000002"), 1),
        (b"", 1),
        (None, 1),  # a null header value
    ],
)
def test_read_attempts(value: bytes | None, attempt: int) -> None:
    assert read_attempts([("other", b"x"), (h.ATTEMPTS, value)]) == attempt


def test_read_attempts_absent_is_first_delivery() -> None:
    assert read_attempts(None) == 1
    assert read_attempts([]) == 1
    assert read_attempts([("retry_topic-attemptsX", java_put_int(5))]) == 1


def test_read_attempts_takes_last_header() -> None:
    assert read_attempts([(h.ATTEMPTS, java_put_int(2)), (h.ATTEMPTS, java_put_int(4))]) == 4
    assert read_attempts([(h.ATTEMPTS, java_put_int(4)), (h.ATTEMPTS, b"\x03")]) == 3


def test_read_attempts_round_trips_spring_values() -> None:
    for attempts in range(1, 32_768, 97):
        assert read_attempts([(h.ATTEMPTS, java_put_int(attempts))]) == attempts


@pytest.mark.parametrize(
    ("value", "due"),
    [
        (T0_BIGINT, T0),
        (DUE_BIGINT, DUE),
        (bytes.fromhex("00"), 0),
        (bytes.fromhex("ff"), -1),
        (bytes.fromhex("7fffffffffffffff"), 2**63 - 1),
        (b"", None),
        (None, None),
    ],
)
def test_read_due_ms(value: bytes | None, due: int | None) -> None:
    assert read_due_ms([(h.BACKOFF_TIMESTAMP, value)]) == due


def test_read_due_ms_absent() -> None:
    assert read_due_ms(None) is None
    assert read_due_ms([("x", b"1")]) is None
    assert (
        read_due_ms(
            [
                (h.BACKOFF_TIMESTAMP, java_big_integer_to_byte_array(5)),
                (h.BACKOFF_TIMESTAMP, java_big_integer_to_byte_array(9)),
            ]
        )
        == 9
    )


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (T0_BIGINT, T0_BIGINT),  # 6 bytes: carried forward as is
        (bytes.fromhex("7fffffffffffffff"), bytes.fromhex("7fffffffffffffff")),  # 8 bytes: still valid
        (bytes.fromhex("ff"), bytes.fromhex("ff")),
        (bytes.fromhex("000000018bcfe56800"), java_big_integer_to_byte_array(DUE)),  # 9 bytes: ignored
        (bytes.fromhex("01") * 12, java_big_integer_to_byte_array(DUE)),
        (b"", java_big_integer_to_byte_array(DUE)),  # empty: ignored
        (None, java_big_integer_to_byte_array(DUE)),
    ],
)
def test_original_timestamp_bytes(header: bytes | None, expected: bytes) -> None:
    assert original_timestamp_bytes([(h.ORIGINAL_TIMESTAMP, header)], DUE) == expected


def test_original_timestamp_falls_back_to_record_timestamp() -> None:
    assert original_timestamp_bytes(None, T0) == T0_BIGINT
    assert original_timestamp_bytes([], 0) == b"\x00"
    assert read_original_timestamp(None, T0) == T0
    assert read_original_timestamp([(h.ORIGINAL_TIMESTAMP, T0_BIGINT)], DUE) == T0
    assert read_original_timestamp([(h.ORIGINAL_TIMESTAMP, bytes(9))], DUE) == DUE
    assert read_original_timestamp([(h.ORIGINAL_TIMESTAMP, b"")], DUE) == DUE


def test_read_original_coordinates_from_spring_bytes() -> None:
    headers = [
        ("kafka_dlt-original-topic", b"orders"),
        ("kafka_dlt-original-partition", bytes.fromhex("00000003")),
        ("kafka_dlt-original-offset", bytes.fromhex("000000000000002a")),
        ("kafka_dlt-original-timestamp", T0_LONG),
        ("kafka_dlt-original-timestamp-type", b"CreateTime"),
        ("kafka_dlt-original-consumer-group", b"orders-service"),
    ]
    assert read_original_coordinates(headers) == OriginalCoordinates(
        topic="orders",
        partition=3,
        offset=42,
        timestamp_ms=T0,
        timestamp_type="CreateTime",
        consumer_group="orders-service",
    )


def test_read_original_coordinates_missing_or_malformed() -> None:
    assert read_original_coordinates(None) == OriginalCoordinates(None, None, None, None, None, None)
    malformed = [
        ("kafka_dlt-original-partition", bytes.fromhex("0003")),  # not 4 bytes
        ("kafka_dlt-original-offset", bytes.fromhex("2a")),  # not 8 bytes
        ("kafka_dlt-original-timestamp", bytes.fromhex("018bcfe56800")),  # BigInteger form, not a long
        ("kafka_dlt-original-topic", b"ord\xffers"),  # invalid UTF-8 is replaced, not an error
    ]
    coordinates = read_original_coordinates(malformed)
    assert (coordinates.partition, coordinates.offset, coordinates.timestamp_ms) == (None, None, None)
    assert coordinates.topic == "ord\ufffders"


# ---------------------------------------------------------------------- describe_exception
class InvalidOrder(ValueError):
    pass


InvalidOrder.__module__ = "myapp.errors"


def raise_wrapped() -> BaseException:
    try:
        try:
            {}["customer"]
        except KeyError as exc:
            raise InvalidOrder("no customer") from exc
    except InvalidOrder as exc:
        return exc
    raise AssertionError("unreachable")


def test_describe_exception_with_cause() -> None:
    info = describe_exception(raise_wrapped())
    assert info.fqcn == "myapp.errors.InvalidOrder"
    assert info.cause_fqcn == "KeyError"
    assert info.message == "no customer"
    assert info.key is False
    assert info.stacktrace is not None
    assert info.stacktrace.startswith("Traceback (most recent call last):")
    assert "The above exception was the direct cause of the following exception" in info.stacktrace
    assert info.stacktrace.rstrip().endswith("myapp.errors.InvalidOrder: no customer")


def test_describe_exception_fqcn_is_the_real_class_path() -> None:
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads("{")
    assert describe_exception(info.value).fqcn == "json.decoder.JSONDecodeError"
    assert describe_exception(ValueError("x")).fqcn == "ValueError"


def test_describe_exception_options_and_edge_cases() -> None:
    assert describe_exception(ValueError("x"), include_stacktrace=False).stacktrace is None
    assert describe_exception(ValueError()).message is None  # empty message -> no header
    assert describe_exception(ValueError("x")).cause_fqcn is None
    assert describe_exception(ValueError("x"), key=True).key is True
    # a never-raised exception still gets a (short) trace
    assert describe_exception(ValueError("x")).stacktrace == "ValueError: x\n"


def _fail_while_handling(*, suppress_context: bool) -> None:
    try:
        raise OSError("disk")
    except OSError:
        if suppress_context:
            raise RuntimeError("clean") from None
        raise RuntimeError("while handling")


def test_describe_exception_uses_context_unless_suppressed() -> None:
    with pytest.raises(RuntimeError, match="while handling") as info:
        _fail_while_handling(suppress_context=False)
    assert describe_exception(info.value).cause_fqcn == "OSError"
    with pytest.raises(RuntimeError, match="clean") as info:
        _fail_while_handling(suppress_context=True)
    assert describe_exception(info.value).cause_fqcn is None


# ---------------------------------------------------------------------- forward_headers: first failure
def test_first_failure_headers_byte_for_byte() -> None:
    out = forward_headers(None, failure(), dlt_policy())
    assert out == [
        ("kafka_dlt-original-topic", b"orders"),
        ("kafka_dlt-original-partition", bytes.fromhex("00000003")),
        ("kafka_dlt-original-offset", bytes.fromhex("000000000000002a")),
        ("kafka_dlt-original-timestamp", bytes.fromhex("0000018bcfe56800")),
        ("kafka_dlt-original-timestamp-type", b"CreateTime"),
        ("kafka_dlt-original-consumer-group", b"orders-service"),
        ("kafka_dlt-exception-fqcn", b"myapp.errors.InvalidOrder"),
        ("kafka_dlt-exception-cause-fqcn", b"KeyError"),
        ("kafka_dlt-exception-message", b"no customer"),
        ("kafka_dlt-exception-stacktrace", INFO.stacktrace.encode()),
        ("retry_topic-original-timestamp", bytes.fromhex("018bcfe56800")),
        ("retry_topic-attempts", bytes.fromhex("00000002")),
        ("retry_topic-backoff-timestamp", bytes.fromhex("018bcfe5dd30")),
    ]


@pytest.mark.parametrize(
    ("partition", "offset", "timestamp"),
    [(0, 0, 0), (11, 1_234_567_890_123, 1_735_689_600_000), (2**31 - 1, 2**63 - 1, 127), (5, 9, 128)],
)
def test_coordinates_and_retry_headers_match_reference(partition: int, offset: int, timestamp: int) -> None:
    out = forward_headers(
        [],
        failure(
            partition=partition, offset=offset, timestamp_ms=timestamp, next_attempt=5, due_ms=timestamp + 1
        ),
        dlt_policy(),
    )
    assert the(out, "kafka_dlt-original-partition") == java_put_int(partition)
    assert the(out, "kafka_dlt-original-offset") == java_put_long(offset)
    assert the(out, "kafka_dlt-original-timestamp") == java_put_long(timestamp)
    assert the(out, "retry_topic-original-timestamp") == java_big_integer_to_byte_array(timestamp)
    assert the(out, "retry_topic-attempts") == java_put_int(5)
    assert the(out, "retry_topic-backoff-timestamp") == java_big_integer_to_byte_array(timestamp + 1)


@pytest.mark.parametrize(
    ("timestamp_type", "text"),
    [(0, b"NoTimestampType"), (1, b"CreateTime"), (2, b"LogAppendTime"), (7, b"CreateTime")],
)
def test_timestamp_type(timestamp_type: int, text: bytes) -> None:
    out = forward_headers(None, failure(timestamp_type=timestamp_type), dlt_policy())
    assert the(out, "kafka_dlt-original-timestamp-type") == text


def test_text_headers_are_utf8() -> None:
    info = ExceptionInfo(fqcn="myapp.errors.Ungültig", message="café ✓", stacktrace="é", cause_fqcn="Ärger")
    out = forward_headers(None, failure(consumer_group="grüppe", exception=info), dlt_policy())
    assert the(out, "kafka_dlt-original-consumer-group") == b"gr\xc3\xbcppe"
    assert the(out, "kafka_dlt-exception-fqcn") == b"myapp.errors.Ung\xc3\xbcltig"
    assert the(out, "kafka_dlt-exception-message") == b"caf\xc3\xa9 \xe2\x9c\x93"
    assert the(out, "kafka_dlt-exception-stacktrace") == b"\xc3\xa9"
    assert the(out, "kafka_dlt-exception-cause-fqcn") == b"\xc3\x84rger"


def test_no_message_and_no_cause_means_no_header() -> None:
    info = ExceptionInfo(fqcn="ValueError", message=None, stacktrace=None)
    out = forward_headers(None, failure(exception=info), dlt_policy())
    assert the(out, "kafka_dlt-exception-fqcn") == b"ValueError"
    for name in (
        "kafka_dlt-exception-message",
        "kafka_dlt-exception-stacktrace",
        "kafka_dlt-exception-cause-fqcn",
    ):
        assert values(out, name) == []


def test_include_stacktrace_false_drops_the_trace() -> None:
    out = forward_headers(None, failure(), dlt_policy(include_stacktrace=False))
    assert values(out, "kafka_dlt-exception-stacktrace") == []
    assert the(out, "kafka_dlt-exception-message") == b"no customer"


def test_key_exception_headers() -> None:
    info = ExceptionInfo(
        fqcn="airflow_kafka_retry.errors.DeserializationError",
        message="bad key",
        stacktrace="trace",
        cause_fqcn="UnicodeDecodeError",
        key=True,
    )
    out = forward_headers(None, failure(exception=info), dlt_policy())
    assert the(out, "kafka_dlt-key-exception-fqcn") == b"airflow_kafka_retry.errors.DeserializationError"
    assert the(out, "kafka_dlt-key-exception-message") == b"bad key"
    assert the(out, "kafka_dlt-key-exception-stacktrace") == b"trace"
    for name in ("kafka_dlt-exception-fqcn", "kafka_dlt-exception-message", "kafka_dlt-exception-stacktrace"):
        assert values(out, name) == []
    # Spring has no key variant of the cause header and writes it for key failures too
    # (v3.2.10 DeadLetterPublishingRecoverer.java:817-823, no isKey check)
    assert the(out, "kafka_dlt-exception-cause-fqcn") == b"UnicodeDecodeError"


def test_describe_then_forward() -> None:
    out = forward_headers(None, failure(exception=describe_exception(raise_wrapped())), dlt_policy())
    assert the(out, "kafka_dlt-exception-fqcn") == b"myapp.errors.InvalidOrder"
    assert the(out, "kafka_dlt-exception-cause-fqcn") == b"KeyError"
    assert the(out, "kafka_dlt-exception-stacktrace").startswith(b"Traceback (most recent call last):")


# ---------------------------------------------------------------------- forward_headers: later tiers
def second_failure(**overrides) -> Failure:
    data = dict(
        topic="orders-retry-1",
        partition=3,
        offset=7,
        timestamp_ms=T0 + 31_000,
        timestamp_type=2,
        consumer_group="orders-service-orders-retry-1",
        next_attempt=3,
        due_ms=T0 + 91_000,
        exception=ExceptionInfo("TimeoutError", "slow", "trace 2"),
    )
    data.update(overrides)
    return Failure(**data)


def test_originals_keep_the_first_failure_across_tiers() -> None:
    first = forward_headers(None, failure(), dlt_policy())
    second = forward_headers(first, second_failure(), dlt_policy())
    third_failure = second_failure(topic="orders-retry-2", offset=99, next_attempt=4)
    third = forward_headers(second, third_failure, dlt_policy())
    for out in (second, third):
        assert the(out, "kafka_dlt-original-topic") == b"orders"
        assert the(out, "kafka_dlt-original-partition") == bytes.fromhex("00000003")
        assert the(out, "kafka_dlt-original-offset") == bytes.fromhex("000000000000002a")
        assert the(out, "kafka_dlt-original-timestamp") == T0_LONG
        assert the(out, "kafka_dlt-original-timestamp-type") == b"CreateTime"
        assert the(out, "kafka_dlt-original-consumer-group") == b"orders-service"
        # the original timestamp is the first record's, not the retry record's own timestamp
        assert the(out, "retry_topic-original-timestamp") == T0_BIGINT
    assert read_original_coordinates(third).offset == 42


def test_retry_headers_are_replaced() -> None:
    first = forward_headers(None, failure(), dlt_policy())
    second = forward_headers(first, second_failure(), dlt_policy())
    assert the(second, "retry_topic-attempts") == bytes.fromhex("00000003")
    assert the(second, "retry_topic-backoff-timestamp") == java_big_integer_to_byte_array(T0 + 91_000)
    assert read_attempts(second) == 3
    assert read_due_ms(second) == T0 + 91_000


def test_legacy_and_duplicate_retry_headers_from_spring_are_replaced() -> None:
    existing = [
        (h.ATTEMPTS, b"\x02"),  # legacy 1-byte
        (h.ATTEMPTS, java_put_int(2)),
        (h.BACKOFF_TIMESTAMP, java_big_integer_to_byte_array(T0)),
        (h.ORIGINAL_TIMESTAMP, java_big_integer_to_byte_array(T0 - 5)),
    ]
    out = forward_headers(existing, second_failure(), dlt_policy())
    assert the(out, h.ATTEMPTS) == java_put_int(3)
    assert the(out, h.BACKOFF_TIMESTAMP) == java_big_integer_to_byte_array(T0 + 91_000)
    assert the(out, h.ORIGINAL_TIMESTAMP) == java_big_integer_to_byte_array(T0 - 5)  # carried forward


def test_oversized_original_timestamp_header_is_replaced_by_record_timestamp() -> None:
    existing = [(h.ORIGINAL_TIMESTAMP, bytes.fromhex("01" * 9))]
    out = forward_headers(existing, failure(timestamp_ms=T0), dlt_policy())
    assert the(out, h.ORIGINAL_TIMESTAMP) == T0_BIGINT


def test_previous_exception_headers_replaced_by_default() -> None:
    first = forward_headers(None, failure(), dlt_policy())
    second = forward_headers(first, second_failure(), dlt_policy(strip_previous_exception_headers=True))
    assert the(second, "kafka_dlt-exception-fqcn") == b"TimeoutError"
    assert the(second, "kafka_dlt-exception-message") == b"slow"
    assert the(second, "kafka_dlt-exception-stacktrace") == b"trace 2"
    assert values(second, "kafka_dlt-exception-cause-fqcn") == []  # the old cause does not linger


def test_previous_key_exception_headers_replaced_by_default() -> None:
    key_info = ExceptionInfo("airflow_kafka_retry.errors.DeserializationError", "bad key", "t", key=True)
    first = forward_headers(None, failure(exception=key_info), dlt_policy())
    second = forward_headers(first, second_failure(), dlt_policy())
    for name in (
        "kafka_dlt-key-exception-fqcn",
        "kafka_dlt-key-exception-message",
        "kafka_dlt-key-exception-stacktrace",
    ):
        assert values(second, name) == []


def test_previous_exception_headers_appended_when_not_stripping() -> None:
    policy = dlt_policy(strip_previous_exception_headers=False)
    first = forward_headers(None, failure(), policy)
    second = forward_headers(first, second_failure(), policy)
    assert values(second, "kafka_dlt-exception-fqcn") == [b"myapp.errors.InvalidOrder", b"TimeoutError"]
    assert values(second, "kafka_dlt-exception-message") == [b"no customer", b"slow"]
    assert values(second, "kafka_dlt-exception-cause-fqcn") == [b"KeyError"]
    assert last_header(second, "kafka_dlt-exception-fqcn") == b"TimeoutError"
    # retry headers are still replaced, originals still single
    assert the(second, h.ATTEMPTS) == java_put_int(3)
    assert the(second, "kafka_dlt-original-topic") == b"orders"


def test_user_headers_are_kept_in_order() -> None:
    user = [("trace-id", b"abc"), ("empty", None), ("dup", b"1"), ("content-type", b"json"), ("dup", b"2")]
    out = forward_headers(user, failure(), dlt_policy())
    assert out[: len(user)] == user
    second = forward_headers(out, second_failure(), dlt_policy())
    assert second[: len(user)] == user


def test_original_headers_only_added_when_absent() -> None:
    # a record that already carries (Spring-written) coordinates keeps them
    existing = [("kafka_dlt-original-topic", b"upstream"), ("kafka_dlt-original-offset", java_put_long(1))]
    out = forward_headers(existing, failure(), dlt_policy())
    assert the(out, "kafka_dlt-original-topic") == b"upstream"
    assert the(out, "kafka_dlt-original-offset") == java_put_long(1)
    assert the(out, "kafka_dlt-original-partition") == java_put_int(3)


def test_existing_input_is_not_mutated() -> None:
    existing = forward_headers(None, failure(), dlt_policy())
    snapshot = list(existing)
    forward_headers(existing, second_failure(), dlt_policy())
    assert existing == snapshot


# ---------------------------------------------------------------------- byte budget
BIG_TRACE = "Traceback (most recent call last):\n" + '  File "x.py", line 1, in f\n' * 300
BIG_MESSAGE = "m" * 3_000


def test_within_budget_nothing_is_truncated() -> None:
    out = forward_headers(None, failure(), dlt_policy(max_header_bytes=MIN_HEADER_BYTES))
    assert header_size(out) <= 1_024
    assert the(out, "kafka_dlt-exception-stacktrace") == INFO.stacktrace.encode()


def test_stack_trace_is_truncated_first() -> None:
    info = ExceptionInfo("ValueError", "short message", BIG_TRACE)
    policy = dlt_policy(max_header_bytes=2_048)
    out = forward_headers(None, failure(exception=info), policy)
    assert header_size(out) <= 2_048
    trace = the(out, "kafka_dlt-exception-stacktrace")
    assert trace.endswith(b"...[truncated]")
    assert BIG_TRACE.encode().startswith(trace[: -len(b"...[truncated]")])
    assert the(out, "kafka_dlt-exception-message") == b"short message"
    # the budget is used, not wasted: only what had to go is cut
    assert header_size(out) == 2_048


def test_message_is_truncated_after_the_trace() -> None:
    info = ExceptionInfo("ValueError", BIG_MESSAGE, BIG_TRACE)
    out = forward_headers(None, failure(exception=info), dlt_policy(max_header_bytes=1_024))
    assert header_size(out) <= 1_024
    assert the(out, "kafka_dlt-exception-stacktrace") == b""
    message = the(out, "kafka_dlt-exception-message")
    assert message.endswith(b"...[truncated]")
    assert message.startswith(b"mmm")


def test_budget_never_touches_coordinates_or_retry_headers() -> None:
    untouched = forward_headers(None, failure(), dlt_policy())
    info = ExceptionInfo("myapp.errors.InvalidOrder", BIG_MESSAGE, BIG_TRACE, cause_fqcn="KeyError")
    out = forward_headers(None, failure(exception=info), dlt_policy(max_header_bytes=1_024))
    for name in (
        *h.DEAD_LETTER_NAMES.originals,
        *h.RETRY_HEADERS,
        "kafka_dlt-exception-fqcn",
        "kafka_dlt-exception-cause-fqcn",
    ):
        assert the(out, name) == the(untouched, name), name


def test_truncation_keeps_valid_utf8() -> None:
    info = ExceptionInfo("ValueError", "é" * 2_000, "€" * 2_000)
    out = forward_headers(None, failure(exception=info), dlt_policy(max_header_bytes=1_500))
    assert header_size(out) <= 1_500
    for name in ("kafka_dlt-exception-message", "kafka_dlt-exception-stacktrace"):
        the(out, name).decode("utf-8")  # does not raise


def test_key_exception_trace_is_truncated_too() -> None:
    info = ExceptionInfo("airflow_kafka_retry.errors.DeserializationError", "bad key", BIG_TRACE, key=True)
    out = forward_headers(None, failure(exception=info), dlt_policy(max_header_bytes=1_024))
    assert header_size(out) <= 1_024
    assert the(out, "kafka_dlt-key-exception-stacktrace").endswith(b"...[truncated]")
    assert the(out, "kafka_dlt-key-exception-message") == b"bad key"


def test_budget_impossible_raises_naming_the_record() -> None:
    user = [("big-user-header", b"u" * 2_000)]
    with pytest.raises(HeaderBudgetError) as info:
        forward_headers(
            user, failure(topic="orders", partition=3, offset=42), dlt_policy(max_header_bytes=1_024)
        )
    message = str(info.value)
    assert "orders[3]@42" in message
    assert "headers.max_header_bytes is 1024" in message
    assert isinstance(info.value, ValueError)


def test_fit_budget_directly() -> None:
    headers = [("a", b"x" * 10), ("kafka_dlt-exception-stacktrace", b"s" * 100)]
    assert fit_budget(list(headers), 1_000) == headers
    fitted = fit_budget(list(headers), 70)
    assert header_size(fitted) <= 70
    with pytest.raises(HeaderBudgetError) as info:
        fit_budget([("a", b"x" * 100)], 50)
    assert "for record" not in str(info.value)
    assert "headers need 101 bytes" in str(info.value)


def test_record_through_many_tiers_stays_within_budget() -> None:
    policy = dlt_policy(max_header_bytes=2_048)
    user = [("trace-id", b"abc123")]
    headers: list = list(user)
    sizes = []
    for tier in range(1, 11):
        info = ExceptionInfo("RuntimeError", f"failure {tier}: " + "x" * 500, BIG_TRACE, cause_fqcn="OSError")
        headers = forward_headers(
            headers,
            failure(
                topic="orders" if tier == 1 else f"orders-retry-{tier - 1}",
                offset=tier,
                next_attempt=tier + 1,
                due_ms=T0 + tier * 1_000,
                exception=info,
            ),
            policy,
        )
        sizes.append(header_size(headers))
        assert header_size(headers) <= 2_048
        assert headers[:1] == user
        assert read_attempts(headers) == tier + 1
        assert read_original_coordinates(headers).offset == 1
    assert len(set(sizes)) == 1  # it does not grow


def test_record_through_many_tiers_small_headers_does_not_grow() -> None:
    headers: list = []
    sizes = []
    for tier in range(1, 8):
        headers = forward_headers(headers, failure(next_attempt=tier + 1, due_ms=T0 + tier), dlt_policy())
        sizes.append(header_size(headers))
    assert len(set(sizes)) == 1
    assert len(headers) == 13


# ---------------------------------------------------------------------- HeaderPolicy
@pytest.mark.parametrize(
    ("kwargs", "field", "fragment"),
    [
        ({"include_stacktrace": "yes"}, "include_stacktrace", "must be true or false, got 'yes'"),
        ({"strip_previous_exception_headers": 0}, "strip_previous_exception_headers", "got 0"),
        ({"max_header_bytes": 1_023}, "max_header_bytes", "must be an integer >= 1024, got 1023"),
        ({"max_header_bytes": True}, "max_header_bytes", "got True"),
        ({"max_header_bytes": "16384"}, "max_header_bytes", "got '16384'"),
        ({"naming": "spring"}, "naming", "must be one of retry_topic, dead_letter, got 'spring'"),
        ({"naming": ["retry_topic"]}, "naming", "got ['retry_topic']"),
    ],
)
def test_header_policy_validation(kwargs: dict, field: str, fragment: str) -> None:
    with pytest.raises(TopologyError) as info:
        HeaderPolicy(**kwargs)
    assert info.value.field == field
    assert fragment in str(info.value)


def test_header_policy_from_mapping() -> None:
    assert HeaderPolicy.from_mapping({}) == HeaderPolicy()
    assert HeaderPolicy.from_mapping({"max_header_bytes": 4_096}).max_header_bytes == 4_096
    with pytest.raises(TopologyError, match="must be a mapping, got"):
        HeaderPolicy.from_mapping([("max_header_bytes", 4_096)])
    with pytest.raises(TopologyError) as info:
        HeaderPolicy.from_mapping({"stacktrace": True})
    assert info.value.field == "stacktrace"
    assert HeaderPolicy(False, False, 2_000).to_dict() == {
        "include_stacktrace": False,
        "strip_previous_exception_headers": False,
        "max_header_bytes": 2_000,
        "naming": "retry_topic",
        "cause": "immediate",
    }
    assert HeaderPolicy.from_mapping({"naming": "dead_letter"}).naming == "dead_letter"


# ----------------------------------------------------------------------------- poison headers (faults case 9)
@pytest.mark.parametrize(
    ("value", "now", "due"),
    [
        (b"\x01" * 9, None, None),  # longer than a long: Spring ignores it
        (java_big_integer_to_byte_array(2**63 - 1), T0, None),  # more than a day ahead of now: ignored
        (
            java_big_integer_to_byte_array(T0 + h.MAX_BACKOFF_MS),
            T0,
            T0 + h.MAX_BACKOFF_MS,
        ),  # exactly a day: kept
        (java_big_integer_to_byte_array(T0 + h.MAX_BACKOFF_MS + 1), T0, None),
        (java_big_integer_to_byte_array(-5), T0, -5),  # in the past: due now
        (java_big_integer_to_byte_array(2**63 - 1), None, 2**63 - 1),  # no clock given: no horizon check
    ],
)
def test_read_due_ms_ignores_what_spring_ignores(value: bytes, now: int | None, due: int | None) -> None:
    """Regression: a huge back-off timestamp held a partition back for ever (Spring: MAX_BACKOFF_MS, 1..8
    bytes)."""
    assert read_due_ms([(h.BACKOFF_TIMESTAMP, value)], now_ms=now) == due


def test_read_due_ms_horizon_can_be_widened_for_long_tiers() -> None:
    two_days = java_big_integer_to_byte_array(T0 + 2 * h.MAX_BACKOFF_MS)
    assert read_due_ms([(h.BACKOFF_TIMESTAMP, two_days)], now_ms=T0) is None
    assert (
        read_due_ms([(h.BACKOFF_TIMESTAMP, two_days)], now_ms=T0, horizon_ms=3 * h.MAX_BACKOFF_MS)
        == T0 + 2 * h.MAX_BACKOFF_MS
    )


def test_header_bytes_counts_names_and_values() -> None:
    assert header_bytes([("ab", b"xyz"), ("é", None)]) == 2 + 3 + 2
