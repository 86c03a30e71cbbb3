"""What the header codec writes: stack traces, replacement of old exception headers, byte budget."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from airflow_kafka_retry.policy.errors import TopologyError

# Room for the coordinates, retry headers and exception class names of a record; a smaller
# budget could not keep the headers that must never be dropped.
MIN_HEADER_BYTES = 1024

HeaderNaming = Literal["retry_topic", "dead_letter"]
#: ``retry_topic``: the names Spring's non-blocking retries write (``kafka_original-*``,
#: ``kafka_exception-*``); ``dead_letter``: a plain DeadLetterPublishingRecoverer's (``kafka_dlt-*``).
HEADER_NAMINGS: tuple[HeaderNaming, ...] = ("retry_topic", "dead_letter")

CauseRule = Literal["immediate", "root", "handler"]
#: What ``kafka_exception-cause-fqcn`` names: ``immediate``: the exception's ``__cause__`` (or
#: context), omitted when there is none; ``root``: the last exception of that chain; ``handler``:
#: the exception the handler raised itself, always written, as Spring does (its
#: ``ErrorHandlingUtils.findRootCause`` only unwraps Spring's own listener wrappers).
CAUSE_RULES: tuple[CauseRule, ...] = ("immediate", "root", "handler")


@dataclass(frozen=True)
class HeaderPolicy:
    """
    Header settings of a topology (``headers:`` in YAML).

    :param include_stacktrace: write the exception stack-trace header.
    :param strip_previous_exception_headers: replace earlier exception headers instead of appending
        (Spring's default, and what keeps a record from growing across tiers).
    :param max_header_bytes: budget for all headers of a routed record (names plus values); the
        stack trace is truncated first, then the message; coordinates are never dropped.
    :param naming: which of Spring's header families to write: ``retry_topic`` (what Spring's
        non-blocking retries write, so a Spring service can share the retry topics) or
        ``dead_letter`` (``kafka_dlt-*``, what a plain ``DeadLetterPublishingRecoverer`` writes).
        Both are always read.
    :param cause: what the cause-class header names: ``immediate`` (the ``__cause__``), ``root``
        (the end of the cause chain) or ``handler`` (the raised exception itself, Spring's rule).
    """

    include_stacktrace: bool = True
    strip_previous_exception_headers: bool = True
    max_header_bytes: int = 16_384
    naming: HeaderNaming = "retry_topic"
    cause: CauseRule = "immediate"

    def __post_init__(self) -> None:
        errors: list[TopologyError] = []
        for name in ("include_stacktrace", "strip_previous_exception_headers"):
            if not isinstance(getattr(self, name), bool):
                errors.append(
                    TopologyError(f"must be true or false, got {getattr(self, name)!r}", field=name)
                )
        value = self.max_header_bytes
        if isinstance(value, bool) or not isinstance(value, int) or value < MIN_HEADER_BYTES:
            errors.append(
                TopologyError(
                    f"must be an integer >= {MIN_HEADER_BYTES}, got {value!r}", field="max_header_bytes"
                )
            )
        for name, allowed in (("naming", HEADER_NAMINGS), ("cause", CAUSE_RULES)):
            if getattr(self, name) not in allowed:
                errors.append(
                    TopologyError(
                        f"must be one of {', '.join(allowed)}, got {getattr(self, name)!r}", field=name
                    )
                )
        if errors:
            raise TopologyError.combine(errors)

    @classmethod
    def from_mapping(cls, data: object) -> HeaderPolicy:
        if not isinstance(data, Mapping):
            raise TopologyError(f"must be a mapping, got {data!r}")
        known = tuple(cls.__dataclass_fields__)
        errors: list[TopologyError] = []
        for key in data:
            if key not in known:
                hint = difflib.get_close_matches(str(key), known, n=1)
                suggestion = f"did you mean {hint[0]!r}?" if hint else f"known keys: {', '.join(known)}"
                errors.append(TopologyError(f"unknown key; {suggestion}", field=str(key)))
        try:
            policy = cls(**{k: v for k, v in data.items() if k in known})
        except TopologyError as exc:
            errors.append(exc)
        if errors:
            raise TopologyError.combine(errors)
        return policy

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
