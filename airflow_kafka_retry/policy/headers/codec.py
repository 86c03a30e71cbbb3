"""
Header codec, byte-compatible with Spring for Apache Kafka 3.x.

Header names. The ``retry_topic-*`` headers have one spelling. The original-coordinate and
exception headers come in two families, as in Spring:

* ``retry_topic`` naming (default): what Spring's non-blocking retries write
  (``DeadLetterPublishingRecovererFactory``): ``kafka_original-topic|partition|offset|timestamp|
  timestamp-type``, ``kafka_dlt-original-consumer-group`` (Spring's ``KafkaHeaders.ORIGINAL_CONSUMER_GROUP``
  is spelled that way), ``kafka_exception-fqcn|cause-fqcn|message|stacktrace`` and
  ``kafka_key-exception-fqcn|message|stacktrace``. Use it to share retry topics with a Spring service.
* ``dead_letter`` naming: what a plain ``DeadLetterPublishingRecoverer`` (blocking retries with
  ``DefaultErrorHandler``) writes: the same headers spelled ``kafka_dlt-original-*``,
  ``kafka_dlt-exception-*`` and ``kafka_dlt-key-exception-*``.

Both families are read. Original coordinates already present in either family are carried into
the configured one, so they keep pointing at the first failure; earlier exception headers of
either family are replaced.

Encodings (as Spring writes them):

* ``retry_topic-attempts``: 4-byte big-endian int (``ByteBuffer.putInt``); a 1-byte value is the
  legacy encoding and reads as an unsigned byte; any other length, or a value outside
  1..32767, reads as 1.
* ``retry_topic-backoff-timestamp`` and ``retry_topic-original-timestamp``: ``BigInteger.toByteArray``
  of epoch milliseconds (minimal big-endian two's complement); an original timestamp longer
  than 8 bytes or empty is ignored in favour of the record timestamp, and so is a back-off
  timestamp of that shape (the record is due at once), as is one implausibly far ahead.
* original partition: 4-byte big-endian int; original offset and timestamp: 8-byte big-endian
  long; original topic, timestamp type (``CreateTime``/``LogAppendTime``), consumer group and
  every exception header: UTF-8 text.

The headers a failed record is forwarded with are written by :mod:`.headers.failure`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.headers.header_policy import HeaderNaming

Header = tuple[str, bytes | None]
_T = TypeVar("_T")

ATTEMPTS = "retry_topic-attempts"
BACKOFF_TIMESTAMP = "retry_topic-backoff-timestamp"
ORIGINAL_TIMESTAMP = "retry_topic-original-timestamp"
RETRY_HEADERS = (ORIGINAL_TIMESTAMP, ATTEMPTS, BACKOFF_TIMESTAMP)


@dataclass(frozen=True)
class HeaderNames:
    """One family of Spring's original-coordinate and exception header names."""

    original_topic: str
    original_partition: str
    original_offset: str
    original_timestamp: str
    original_timestamp_type: str
    original_consumer_group: str
    exception_fqcn: str
    exception_cause_fqcn: str
    exception_message: str
    exception_stacktrace: str
    key_exception_fqcn: str
    key_exception_message: str
    key_exception_stacktrace: str

    @property
    def originals(self) -> tuple[str, ...]:
        """The original-coordinate headers, in the order they are written."""
        return (
            self.original_topic,
            self.original_partition,
            self.original_offset,
            self.original_timestamp,
            self.original_timestamp_type,
            self.original_consumer_group,
        )

    @property
    def exceptions(self) -> tuple[str, ...]:
        return (
            self.exception_fqcn,
            self.exception_cause_fqcn,
            self.exception_message,
            self.exception_stacktrace,
            self.key_exception_fqcn,
            self.key_exception_message,
            self.key_exception_stacktrace,
        )


#: Spring's non-blocking retries (``DeadLetterPublishingRecovererFactory``: ``KafkaHeaders.ORIGINAL_*``,
#: ``EXCEPTION_*``, ``KEY_EXCEPTION_*``).
RETRY_TOPIC_NAMES = HeaderNames(
    "kafka_original-topic",
    "kafka_original-partition",
    "kafka_original-offset",
    "kafka_original-timestamp",
    "kafka_original-timestamp-type",
    "kafka_dlt-original-consumer-group",
    "kafka_exception-fqcn",
    "kafka_exception-cause-fqcn",
    "kafka_exception-message",
    "kafka_exception-stacktrace",
    "kafka_key-exception-fqcn",
    "kafka_key-exception-message",
    "kafka_key-exception-stacktrace",
)
#: A plain ``DeadLetterPublishingRecoverer`` (``KafkaHeaders.DLT_*``).
DEAD_LETTER_NAMES = HeaderNames(
    "kafka_dlt-original-topic",
    "kafka_dlt-original-partition",
    "kafka_dlt-original-offset",
    "kafka_dlt-original-timestamp",
    "kafka_dlt-original-timestamp-type",
    "kafka_dlt-original-consumer-group",
    "kafka_dlt-exception-fqcn",
    "kafka_dlt-exception-cause-fqcn",
    "kafka_dlt-exception-message",
    "kafka_dlt-exception-stacktrace",
    "kafka_dlt-key-exception-fqcn",
    "kafka_dlt-key-exception-message",
    "kafka_dlt-key-exception-stacktrace",
)
#: ``headers.naming`` of a topology -> its family.
HEADER_NAMES: dict[HeaderNaming, HeaderNames] = {
    "retry_topic": RETRY_TOPIC_NAMES,
    "dead_letter": DEAD_LETTER_NAMES,
}
ATTEMPTS_HARD_CAP = 32_767  # Spring's Short.MAX_VALUE
#: Spring ignores a back-off timestamp more than this far in the future (``MAX_BACKOFF_MS``, one day).
MAX_BACKOFF_MS = 86_400_000
TIMESTAMP_TYPES = {0: "NoTimestampType", 1: "CreateTime", 2: "LogAppendTime"}


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
    if len(value) <= 8:
        return number  # already within a long
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
def attempts_value(value: bytes | None) -> int:
    """
    Decode a ``retry_topic-attempts`` value: 4-byte int, or the legacy 1-byte form.

    1 when absent or odd.
    """
    if value is None:
        return 1
    if len(value) == 1:
        raw = value[0]
    elif len(value) == 4:
        raw = struct.unpack(">i", value)[0]
    else:
        return 1
    return raw if 1 <= raw <= ATTEMPTS_HARD_CAP else 1


def due_value(
    value: bytes | None, *, now_ms: int | None = None, horizon_ms: int = MAX_BACKOFF_MS
) -> int | None:
    """Decode a ``retry_topic-backoff-timestamp`` value defensively (see :func:`read_due_ms`)."""
    if not value or len(value) > 8:
        return None
    due = decode_big_integer_long(value)
    if now_ms is not None and due - now_ms > horizon_ms:
        return None
    return due


def read_attempts(headers: Iterable[Header] | None) -> int:
    """The delivery attempt a record is on: 1 on the main topic, n+1 after n failures."""
    return attempts_value(last_header(headers, ATTEMPTS))


def read_due_ms(
    headers: Iterable[Header] | None, *, now_ms: int | None = None, horizon_ms: int = MAX_BACKOFF_MS
) -> int | None:
    """
    When the record is due (``retry_topic-backoff-timestamp``), or None when it carries no usable due time.

    Read defensively, as Spring's ``KafkaBackoffAwareMessageListenerAdapter`` does: a value that is
    empty or longer than 8 bytes is ignored, and so (when ``now_ms`` is given) is a due time more
    than ``horizon_ms`` after ``now_ms`` -- a corrupt or hostile header then cannot hold a
    partition back forever. A record without a usable due time is due at once.
    """
    return due_value(last_header(headers, BACKOFF_TIMESTAMP), now_ms=now_ms, horizon_ms=horizon_ms)


def read_retry_state(
    headers: Iterable[Header] | None, *, now_ms: int | None = None, horizon_ms: int = MAX_BACKOFF_MS
) -> tuple[int, int | None]:
    """
    ``(read_attempts(headers), read_due_ms(headers, now_ms=..., horizon_ms=...))`` in one pass.

    The per-record hot path of a drain: ``dict`` keeps the last value of a repeated name, which is
    exactly Kafka's ``lastHeader``, and builds in C.
    """
    if not headers:
        return 1, None
    if isinstance(headers, list) and len(headers) >= 2:
        # The engine and Spring both write attempts then back-off timestamp as the last two headers;
        # the last header of a name is the one that counts, so those two are the answer. The usual
        # encodings (4-byte attempts, a timestamp of at most 8 bytes) are decoded right here.
        (name1, value1), (name2, value2) = headers[-2], headers[-1]
        if name1 == ATTEMPTS and name2 == BACKOFF_TIMESTAMP:
            if value1 is not None and value2 and len(value1) == 4 and len(value2) <= 8:
                raw = int.from_bytes(value1, "big", signed=True)
                due: int | None = int.from_bytes(value2, "big", signed=True)
                if now_ms is not None and due is not None and due - now_ms > horizon_ms:
                    due = None
                return raw if 1 <= raw <= ATTEMPTS_HARD_CAP else 1, due
            return attempts_value(value1), due_value(value2, now_ms=now_ms, horizon_ms=horizon_ms)
    found = dict(headers)
    return (
        attempts_value(found.get(ATTEMPTS)),
        due_value(found.get(BACKOFF_TIMESTAMP), now_ms=now_ms, horizon_ms=horizon_ms),
    )


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


def read_original_coordinates(
    headers: Iterable[Header] | None, prefer: HeaderNames = RETRY_TOPIC_NAMES
) -> OriginalCoordinates:
    """Where the record first failed: each coordinate from the ``prefer`` family, else the other one."""
    headers = list(headers or ())
    families = (prefer, *(n for n in HEADER_NAMES.values() if n != prefer))

    def first(field: str, read: Callable[[list[Header], str], _T | None]) -> _T | None:
        return next((v for v in (read(headers, getattr(n, field)) for n in families) if v is not None), None)

    return OriginalCoordinates(
        topic=first("original_topic", _text),
        partition=first("original_partition", lambda h, name: _fixed(h, name, ">i")),
        offset=first("original_offset", lambda h, name: _fixed(h, name, ">q")),
        timestamp_ms=first("original_timestamp", lambda h, name: _fixed(h, name, ">q")),
        timestamp_type=first("original_timestamp_type", _text),
        consumer_group=first("original_consumer_group", _text),
    )


def read_exception_classes(headers: Iterable[Header] | None) -> tuple[str | None, str | None]:
    """
    ``(exception class, cause class)`` a dead-lettered record carries, from either header family.

    The value's exception (``kafka_exception-fqcn`` or ``kafka_dlt-exception-fqcn``) comes first, then
    the key's (``kafka_key-exception-fqcn`` / ``kafka_dlt-key-exception-fqcn``). Spring writes the
    exception its error handler got (often its ``ListenerExecutionFailedException`` wrapper) as the
    class and the root cause as the cause class. Where both families are present the last header wins.
    """
    headers = list(headers or ())

    def last_of(*names: str) -> str | None:
        found = None
        for key, value in headers:
            if key in names and value is not None:
                found = value.decode("utf-8", errors="replace")
        return found

    families = tuple(HEADER_NAMES.values())
    fqcn = last_of(*(n.exception_fqcn for n in families)) or last_of(
        *(n.key_exception_fqcn for n in families)
    )
    return fqcn, last_of(*(n.exception_cause_fqcn for n in families))
