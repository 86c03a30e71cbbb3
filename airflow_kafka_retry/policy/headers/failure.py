"""
The headers of a failed record forwarded to the next tier or a DLT, in a byte budget.

Like Spring's retry-topic recoverer, original coordinates are written once (the first failure)
and never replaced. Beyond Spring: retry headers are replaced, not appended (readers take the
last value either way), and all headers fit a byte budget.

That includes a record that arrives in the main topic already carrying original-coordinate headers
(set by its producer): they are kept, as Spring keeps them (``DeadLetterPublishingRecovererFactory.
create`` calls ``setAppendOriginalHeaders(false)``, and ``DeadLetterRecordManager.maybeAddHeader``
then adds an original header only when ``lastHeader`` finds none). So nothing downstream may trust
them as a destination: a DLT replay sends a record to its original topic only when that topic is
the topology's own or allowed by the replay's author (:mod:`airflow_kafka_retry.dlt.replay_targets`).
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_kafka_retry.policy.classify import class_path, exception_chain
from airflow_kafka_retry.policy.headers.codec import (
    ATTEMPTS,
    BACKOFF_TIMESTAMP,
    HEADER_NAMES,
    ORIGINAL_TIMESTAMP,
    RETRY_HEADERS,
    TIMESTAMP_TYPES,
    Header,
    HeaderNames,
    encode_big_integer,
    encode_int32,
    encode_int64,
    last_header,
    original_timestamp_bytes,
)

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.headers.header_policy import CauseRule, HeaderPolicy

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
_TRUNCATED = "...[truncated]"


class HeaderBudgetError(ValueError):
    """A record's headers cannot fit ``max_header_bytes`` even with stack trace and message removed."""


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
