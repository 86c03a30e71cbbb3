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

Like Spring's retry-topic recoverer, original coordinates are written once (the first failure)
and never replaced. Beyond Spring: retry headers are replaced, not appended (readers take the
last value either way), and all headers fit a byte budget.

That includes a record that arrives in the main topic already carrying original-coordinate headers
(set by its producer): they are kept, as Spring keeps them (``DeadLetterPublishingRecovererFactory.
create`` calls ``setAppendOriginalHeaders(false)``, and ``DeadLetterRecordManager.maybeAddHeader``
then adds an original header only when ``lastHeader`` finds none). So nothing downstream may trust
them as a destination: a DLT replay sends a record to its original topic only when that topic is
the topology's own or allowed by the replay's author (:mod:`airflow_kafka_retry.dlt.topics`).
"""

from __future__ import annotations

import struct
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from airflow_kafka_retry.policy.classify import class_path, exception_chain

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.header_policy import CauseRule, HeaderNaming, HeaderPolicy

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
# Truncated, in this order, when a record's headers exceed the budget: stack traces, then messages.
_SHRINKABLE = tuple(
    getattr(names, field)
    for field in (
        "exception_stacktrace",
        "key_exception_stacktrace",
        "exception_message",
        "key_exception_message",
    )
    for names in HEADER_NAMES.values()
)
ATTEMPTS_HARD_CAP = 32_767  # Spring's Short.MAX_VALUE
#: Spring ignores a back-off timestamp more than this far in the future (``MAX_BACKOFF_MS``, one day).
MAX_BACKOFF_MS = 86_400_000
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


# ---------------------------------------------------------------------- writing
@dataclass(frozen=True)
class ExceptionInfo:
    """What the exception headers say about a failure; built with :func:`describe_exception`."""

    fqcn: str
    message: str | None
    stacktrace: str | None
    cause_fqcn: str | None = None
    key: bool = False  # the key, not the value, failed (kafka_dlt-key-exception-*)


def describe_exception(
    exc: BaseException,
    *,
    include_stacktrace: bool = True,
    key: bool = False,
    cause_rule: CauseRule = "immediate",
) -> ExceptionInfo:
    """
    Describe ``exc`` for the ``kafka_dlt-exception-*`` headers (class, cause class, message, trace).

    ``cause_rule`` picks the cause class (see ``HeaderPolicy.cause``): the immediate cause, the
    root of the cause chain, or ``exc`` itself (Spring's ``ErrorHandlingUtils.findRootCause``,
    which unwraps only Spring's listener wrappers; the provider's own wrappers are already gone).
    """
    cause: BaseException | None
    if cause_rule == "handler":
        cause = exc
    elif cause_rule == "root":
        *_, last = exception_chain(exc, traverse_causes=True)
        cause = last if last is not exc else None
    else:
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
    """
    A failed record and where it goes next, as the header writer needs it.

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


def header_bytes(headers: Iterable[Header]) -> int:
    """Bytes of ``headers`` as the budget counts them (UTF-8 names plus values)."""
    return sum(len(k.encode("utf-8")) + len(v or b"") for k, v in headers)


def _truncate(value: bytes, keep: int) -> bytes:
    marker = _TRUNCATED.encode()
    if keep <= len(marker):
        return b""
    return value[: keep - len(marker)].decode("utf-8", errors="ignore").encode("utf-8") + marker


def _exception_headers(info: ExceptionInfo, names: HeaderNames) -> list[Header]:
    fqcn, message, stack = (
        (names.key_exception_fqcn, names.key_exception_message, names.key_exception_stacktrace)
        if info.key
        else (names.exception_fqcn, names.exception_message, names.exception_stacktrace)
    )
    out: list[Header] = [(fqcn, info.fqcn.encode("utf-8"))]
    if info.cause_fqcn:  # one cause header for key and value failures, as Spring writes it
        out.append((names.exception_cause_fqcn, info.cause_fqcn.encode("utf-8")))
    if info.message is not None:
        out.append((message, info.message.encode("utf-8")))
    if info.stacktrace is not None:
        out.append((stack, info.stacktrace.encode("utf-8")))
    return out


def _original_headers(existing: list[Header], failure: Failure, names: HeaderNames) -> list[Header]:
    """
    The original-coordinate headers to add in the ``names`` family (none where already present).

    A coordinate that only the other family carries is copied across byte for byte (the
    encodings are the same), so it keeps pointing at the first failure.
    """
    fresh = {
        "original_topic": failure.topic.encode("utf-8"),
        "original_partition": encode_int32(failure.partition),
        "original_offset": encode_int64(failure.offset),
        "original_timestamp": encode_int64(failure.timestamp_ms),
        "original_timestamp_type": TIMESTAMP_TYPES.get(failure.timestamp_type, "CreateTime").encode("utf-8"),
        "original_consumer_group": failure.consumer_group.encode("utf-8"),
    }
    present = {k for k, _ in existing}
    out: list[Header] = []
    for field, value in fresh.items():
        name = getattr(names, field)
        if name in present:
            continue
        carried = (
            last_header(existing, getattr(other, field)) for other in HEADER_NAMES.values() if other != names
        )
        out.append((name, next((v for v in carried if v is not None), value)))
    return out


def forward_headers(
    existing: Sequence[Header] | None, failure: Failure, policy: HeaderPolicy
) -> list[Header]:
    """
    The headers of the record produced to the next tier or DLT for ``failure``.

    Keeps the record's own headers, adds the original coordinates (in ``policy.naming``) only where
    absent (they keep pointing at the first failure), writes the exception headers (replacing
    earlier ones of either naming unless the policy says append) and replaces the ``retry_topic-*``
    headers. Raises :class:`HeaderBudgetError` when the headers cannot fit ``policy.max_header_bytes``.
    """
    existing = list(existing or ())
    names = HEADER_NAMES[policy.naming]
    replaced = set(RETRY_HEADERS)
    if policy.strip_previous_exception_headers:
        for family in HEADER_NAMES.values():
            replaced.update(family.exceptions)
    kept = [(k, v) for k, v in existing if k not in replaced]
    info = failure.exception
    if not policy.include_stacktrace and info.stacktrace is not None:
        info = ExceptionInfo(info.fqcn, info.message, None, info.cause_fqcn, info.key)
    headers = [
        *kept,
        *_original_headers(existing, failure, names),
        *_exception_headers(info, names),
        (ORIGINAL_TIMESTAMP, original_timestamp_bytes(existing, failure.timestamp_ms)),
        (ATTEMPTS, encode_int32(failure.next_attempt)),
        (BACKOFF_TIMESTAMP, encode_big_integer(failure.due_ms)),
    ]
    return fit_budget(headers, policy.max_header_bytes, failure)


def fit_budget(headers: list[Header], budget: int, failure: Failure | None = None) -> list[Header]:
    """Truncate stack traces, then messages (newest first) until ``headers`` fit ``budget`` bytes."""
    excess = header_bytes(headers) - budget
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
        where = f" for record {failure.topic}[{failure.partition}]@{failure.offset}" if failure else ""
        raise HeaderBudgetError(
            f"headers need {budget + excess} bytes{where} but headers.max_header_bytes is {budget}, even "
            "with stack trace and message truncated; raise the budget or trim the record's own headers"
        )
    return headers
