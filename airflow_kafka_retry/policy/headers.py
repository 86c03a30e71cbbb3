"""Header codec, byte-compatible with Spring for Apache Kafka 3.x.

Encodings (as Spring writes them):

* ``retry_topic-attempts``: 4-byte big-endian int (``ByteBuffer.putInt``); a 1-byte value is the
  legacy encoding and reads as an unsigned byte; any other length, or a value outside
  1..32767, reads as 1.
* ``retry_topic-backoff-timestamp`` and ``retry_topic-original-timestamp``: ``BigInteger.toByteArray``
  of epoch milliseconds (minimal big-endian two's complement); an original timestamp longer
  than 8 bytes or empty is ignored in favour of the record timestamp.
* ``kafka_dlt-original-partition``: 4-byte big-endian int; ``-offset`` and ``-timestamp``:
  8-byte big-endian long; ``-topic``, ``-timestamp-type`` (``CreateTime``/``LogAppendTime``),
  ``-consumer-group`` and every ``kafka_dlt-*exception*`` header: UTF-8 text.

Like Spring's retry-topic recoverer, original coordinates are written once (the first failure)
and never replaced. Beyond Spring: retry headers are replaced, not appended (readers take the
last value either way), and all headers fit a byte budget.
"""

from __future__ import annotations

import struct
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from airflow_kafka_retry.policy.classify import class_path
from airflow_kafka_retry.policy.header_policy import HeaderPolicy

Header = tuple[str, bytes | None]

ATTEMPTS = "retry_topic-attempts"
BACKOFF_TIMESTAMP = "retry_topic-backoff-timestamp"
ORIGINAL_TIMESTAMP = "retry_topic-original-timestamp"

DLT_ORIGINAL_TOPIC = "kafka_dlt-original-topic"
DLT_ORIGINAL_PARTITION = "kafka_dlt-original-partition"
DLT_ORIGINAL_OFFSET = "kafka_dlt-original-offset"
DLT_ORIGINAL_TIMESTAMP = "kafka_dlt-original-timestamp"
DLT_ORIGINAL_TIMESTAMP_TYPE = "kafka_dlt-original-timestamp-type"
DLT_ORIGINAL_CONSUMER_GROUP = "kafka_dlt-original-consumer-group"
DLT_EXCEPTION_FQCN = "kafka_dlt-exception-fqcn"
DLT_EXCEPTION_CAUSE_FQCN = "kafka_dlt-exception-cause-fqcn"
DLT_EXCEPTION_MESSAGE = "kafka_dlt-exception-message"
DLT_EXCEPTION_STACKTRACE = "kafka_dlt-exception-stacktrace"
DLT_KEY_EXCEPTION_FQCN = "kafka_dlt-key-exception-fqcn"
DLT_KEY_EXCEPTION_MESSAGE = "kafka_dlt-key-exception-message"
DLT_KEY_EXCEPTION_STACKTRACE = "kafka_dlt-key-exception-stacktrace"

RETRY_HEADERS = (ORIGINAL_TIMESTAMP, ATTEMPTS, BACKOFF_TIMESTAMP)
ORIGINAL_HEADERS = (
    DLT_ORIGINAL_TOPIC, DLT_ORIGINAL_PARTITION, DLT_ORIGINAL_OFFSET, DLT_ORIGINAL_TIMESTAMP,
    DLT_ORIGINAL_TIMESTAMP_TYPE, DLT_ORIGINAL_CONSUMER_GROUP,
)
EXCEPTION_HEADERS = (
    DLT_EXCEPTION_FQCN, DLT_EXCEPTION_CAUSE_FQCN, DLT_EXCEPTION_MESSAGE, DLT_EXCEPTION_STACKTRACE,
    DLT_KEY_EXCEPTION_FQCN, DLT_KEY_EXCEPTION_MESSAGE, DLT_KEY_EXCEPTION_STACKTRACE,
)
# Truncated, in this order, when a record's headers exceed the budget.
_SHRINKABLE = (DLT_EXCEPTION_STACKTRACE, DLT_KEY_EXCEPTION_STACKTRACE, DLT_EXCEPTION_MESSAGE,
               DLT_KEY_EXCEPTION_MESSAGE)
ATTEMPTS_HARD_CAP = 32_767  # Spring's Short.MAX_VALUE
TIMESTAMP_TYPES = {0: "NoTimestampType", 1: "CreateTime", 2: "LogAppendTime"}
_TRUNCATED = "...[truncated]"


class HeaderBudgetError(ValueError):
    """A record's headers cannot fit ``max_header_bytes`` even with stack trace and message removed."""


# ---------------------------------------------------------------------- primitive encodings
def encode_int32(value: int) -> bytes:
    return struct.pack(">i", value)


def encode_int64(value: int) -> bytes:
    return struct.pack(">q", value)


def encode_big_integer(value: int) -> bytes:
    """Java's ``BigInteger.valueOf(value).toByteArray()``: minimal two's complement, big-endian."""
    magnitude_bits = value.bit_length() if value >= 0 else (~value).bit_length()
    return value.to_bytes(magnitude_bits // 8 + 1, "big", signed=True)


def decode_big_integer_long(value: bytes) -> int:
    """Java's ``new BigInteger(value).longValue()``: two's complement, wrapped to 64 bits."""
    number = int.from_bytes(value, "big", signed=True)
    number &= (1 << 64) - 1
    return number - (1 << 64) if number >= 1 << 63 else number


def last_header(headers: Iterable[Header] | None, name: str) -> bytes | None:
    """The value of the last header called ``name`` (Kafka's ``Headers.lastHeader``), or None."""
    found = None
    for key, value in headers or ():
        if key == name:
            found = value
    return found


# ---------------------------------------------------------------------- reading
def read_attempts(headers: Iterable[Header] | None) -> int:
    """The delivery attempt a record is on: 1 on the main topic, n+1 after n failures."""
    value = last_header(headers, ATTEMPTS)
    if value is None:
        return 1
    if len(value) == 1:
        raw = value[0]
    elif len(value) == 4:
        raw = struct.unpack(">i", value)[0]
    else:
        return 1
    return raw if 1 <= raw <= ATTEMPTS_HARD_CAP else 1


def read_due_ms(headers: Iterable[Header] | None) -> int | None:
    """When the record is due (``retry_topic-backoff-timestamp``), or None when it carries no due time."""
    value = last_header(headers, BACKOFF_TIMESTAMP)
    if not value:
        return None
    return decode_big_integer_long(value)


def original_timestamp_bytes(headers: Iterable[Header] | None, record_timestamp_ms: int) -> bytes:
    """The bytes to carry forward as ``retry_topic-original-timestamp`` (Spring's rules)."""
    value = last_header(headers, ORIGINAL_TIMESTAMP)
    if value is None or len(value) == 0 or len(value) > 8:
        return encode_big_integer(record_timestamp_ms)
    return value


def read_original_timestamp(headers: Iterable[Header] | None, record_timestamp_ms: int) -> int:
    """When the record was first produced, for timeouts: the header, else the record timestamp."""
    return decode_big_integer_long(original_timestamp_bytes(headers, record_timestamp_ms))


@dataclass(frozen=True)
class OriginalCoordinates:
    """Where a dead-lettered or retried record first failed, read from ``kafka_dlt-original-*``."""

    topic: str | None
    partition: int | None
    offset: int | None
    timestamp_ms: int | None
    timestamp_type: str | None
    consumer_group: str | None


def _text(headers: Iterable[Header] | None, name: str) -> str | None:
    value = last_header(headers, name)
    return None if value is None else value.decode("utf-8", errors="replace")


def _fixed(headers: Iterable[Header] | None, name: str, fmt: str) -> int | None:
    value = last_header(headers, name)
    if value is None or len(value) != struct.calcsize(fmt):
        return None
    return struct.unpack(fmt, value)[0]


def read_original_coordinates(headers: Iterable[Header] | None) -> OriginalCoordinates:
    headers = list(headers or ())
    return OriginalCoordinates(
        topic=_text(headers, DLT_ORIGINAL_TOPIC),
        partition=_fixed(headers, DLT_ORIGINAL_PARTITION, ">i"),
        offset=_fixed(headers, DLT_ORIGINAL_OFFSET, ">q"),
        timestamp_ms=_fixed(headers, DLT_ORIGINAL_TIMESTAMP, ">q"),
        timestamp_type=_text(headers, DLT_ORIGINAL_TIMESTAMP_TYPE),
        consumer_group=_text(headers, DLT_ORIGINAL_CONSUMER_GROUP),
    )


# ---------------------------------------------------------------------- writing
@dataclass(frozen=True)
class ExceptionInfo:
    """What the exception headers say about a failure; built with :func:`describe_exception`."""

    fqcn: str
    message: str | None
    stacktrace: str | None
    cause_fqcn: str | None = None
    key: bool = False  # the key, not the value, failed (kafka_dlt-key-exception-*)


def describe_exception(exc: BaseException, *, include_stacktrace: bool = True, key: bool = False) -> ExceptionInfo:
    """Describe ``exc`` for the ``kafka_dlt-exception-*`` headers (class, cause class, message, trace)."""
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    message = str(exc)
    stack = "".join(traceback.format_exception(exc)) if include_stacktrace else None
    return ExceptionInfo(
        fqcn=class_path(type(exc)),
        message=message if message else None,
        stacktrace=stack,
        cause_fqcn=class_path(type(cause)) if cause is not None else None,
        key=key,
    )


@dataclass(frozen=True)
class Failure:
    """A failed record and where it goes next, as the header writer needs it.

    :param topic, partition, offset, timestamp_ms, timestamp_type: the record that failed
        (``timestamp_type`` is confluent-kafka's number: 0 none, 1 create time, 2 log-append time).
    :param consumer_group: the group that consumed it.
    :param next_attempt: the attempt number it will be delivered at next.
    :param due_ms: when it is due at its destination (``retry_topic-backoff-timestamp``).
    :param exception: what went wrong.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: int
    consumer_group: str
    next_attempt: int
    due_ms: int
    exception: ExceptionInfo


def _size(headers: Sequence[Header]) -> int:
    return sum(len(k.encode("utf-8")) + len(v or b"") for k, v in headers)


def _truncate(value: bytes, keep: int) -> bytes:
    marker = _TRUNCATED.encode()
    if keep <= len(marker):
        return b""
    return value[: keep - len(marker)].decode("utf-8", errors="ignore").encode("utf-8") + marker


def _exception_headers(info: ExceptionInfo) -> list[Header]:
    fqcn, message, stack = ((DLT_KEY_EXCEPTION_FQCN, DLT_KEY_EXCEPTION_MESSAGE, DLT_KEY_EXCEPTION_STACKTRACE)
                            if info.key else (DLT_EXCEPTION_FQCN, DLT_EXCEPTION_MESSAGE, DLT_EXCEPTION_STACKTRACE))
    out: list[Header] = [(fqcn, info.fqcn.encode("utf-8"))]
    if info.cause_fqcn and not info.key:
        out.append((DLT_EXCEPTION_CAUSE_FQCN, info.cause_fqcn.encode("utf-8")))
    if info.message is not None:
        out.append((message, info.message.encode("utf-8")))
    if info.stacktrace is not None:
        out.append((stack, info.stacktrace.encode("utf-8")))
    return out


def forward_headers(existing: Sequence[Header] | None, failure: Failure, policy: HeaderPolicy) -> list[Header]:
    """The headers of the record produced to the next tier or DLT for ``failure``.

    Keeps the record's own headers, adds ``kafka_dlt-original-*`` only where absent (they keep
    pointing at the first failure), writes the exception headers (replacing earlier ones unless
    the policy says append) and replaces the ``retry_topic-*`` headers. Raises
    :class:`HeaderBudgetError` when the headers cannot fit ``policy.max_header_bytes``.
    """
    existing = list(existing or ())
    replaced = set(RETRY_HEADERS)
    if policy.strip_previous_exception_headers:
        replaced.update(EXCEPTION_HEADERS)
    kept = [(k, v) for k, v in existing if k not in replaced]
    present = {k for k, _ in existing}
    originals: list[Header] = [
        (DLT_ORIGINAL_TOPIC, failure.topic.encode("utf-8")),
        (DLT_ORIGINAL_PARTITION, encode_int32(failure.partition)),
        (DLT_ORIGINAL_OFFSET, encode_int64(failure.offset)),
        (DLT_ORIGINAL_TIMESTAMP, encode_int64(failure.timestamp_ms)),
        (DLT_ORIGINAL_TIMESTAMP_TYPE, TIMESTAMP_TYPES.get(failure.timestamp_type, "CreateTime").encode("utf-8")),
        (DLT_ORIGINAL_CONSUMER_GROUP, failure.consumer_group.encode("utf-8")),
    ]
    info = failure.exception
    if not policy.include_stacktrace and info.stacktrace is not None:
        info = ExceptionInfo(info.fqcn, info.message, None, info.cause_fqcn, info.key)
    headers = [
        *kept,
        *(h for h in originals if h[0] not in present),
        *_exception_headers(info),
        (ORIGINAL_TIMESTAMP, original_timestamp_bytes(existing, failure.timestamp_ms)),
        (ATTEMPTS, encode_int32(failure.next_attempt)),
        (BACKOFF_TIMESTAMP, encode_big_integer(failure.due_ms)),
    ]
    return fit_budget(headers, policy.max_header_bytes, failure)


def fit_budget(headers: list[Header], budget: int, failure: Failure | None = None) -> list[Header]:
    """Truncate stack traces, then messages (newest first) until ``headers`` fit ``budget`` bytes."""
    excess = _size(headers) - budget
    for name in _SHRINKABLE:
        if excess <= 0:
            return headers
        for i in range(len(headers) - 1, -1, -1):
            key, value = headers[i]
            if key != name or not value or excess <= 0:
                continue
            shrunk = _truncate(value, max(0, len(value) - excess))
            excess -= len(value) - len(shrunk)
            headers[i] = (key, shrunk)
    if excess > 0:
        where = (f" for record {failure.topic}[{failure.partition}]@{failure.offset}" if failure else "")
        raise HeaderBudgetError(
            f"headers need {budget + excess} bytes{where} but headers.max_header_bytes is {budget}, even "
            "with stack trace and message truncated; raise the budget or trim the record's own headers"
        )
    return headers
