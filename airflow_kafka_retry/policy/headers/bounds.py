r"""
The one bound on values read from Kafka headers before they are shown anywhere (issue 38 items 2 and 6).

Whoever can produce to a dead-letter topic chooses its records' headers: exception and cause class names,
original topic, consumer group. Every such value that reaches XCom, a notifier's payload, a log line,
the DLT watch's commit metadata or the view passes through here first:

* control characters (C0, DEL, C1, the Unicode line and paragraph separators and the bidirectional
  overrides) are escaped -- ``\n``, ``\r``, ``\t``, else ``\xNN`` or ``\uNNNN`` -- so a value never
  starts a log line of its own nor reorders one;
* a value keeps at most :data:`MAX_VALUE_CHARS` characters: a longer one keeps its head and says how
  long it was (``<head>...(100000 characters)``); an exception message (:func:`bound_message`) keeps
  its head and its tail (``<head>...(100000 characters)...<tail>``);
* a count by value keeps the :data:`MAX_DISTINCT_VALUES` most frequent values (ties by name); the
  others are summed under :data:`OTHER_VALUES`, so every record is still counted;
* the exception tags the watch commits as offset metadata fit in :data:`MAX_METADATA_BYTES`, under
  Kafka's ``offset.metadata.max.bytes`` (4,096 by default).

Metric tags are bounded once more, to their own format, by
:func:`~airflow_kafka_retry.observability.metrics.sanitize_tag`. Pure functions, no Kafka.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

#: The longest value shown, escapes and the length note included.
MAX_VALUE_CHARS = 200
#: The most distinct values a count keeps; the rest are summed under :data:`OTHER_VALUES`.
MAX_DISTINCT_VALUES = 50
#: Where a count puts the values beyond :data:`MAX_DISTINCT_VALUES`.
OTHER_VALUES = "<other>"
#: The most bytes of exception tags the DLT watch commits as offset metadata (Kafka allows 4,096 by default).
MAX_METADATA_BYTES = 3072

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def bound_value(value: str | None) -> str | None:
    """``value``, control characters escaped, at most :data:`MAX_VALUE_CHARS` long; None stays None."""
    if value is None:
        return None
    shown = _CONTROL.sub(_escape, value[:MAX_VALUE_CHARS])
    if len(value) <= MAX_VALUE_CHARS and len(shown) <= MAX_VALUE_CHARS:
        return shown
    note = f"...({len(value)} characters)"
    return shown[: MAX_VALUE_CHARS - len(note)] + note


def bound_message(value: str | None) -> str | None:
    """
    An exception message bounded like :func:`bound_value`, but a long one keeps its tail too.

    ``<head>...(N characters)...<tail>``: Spring's ``DeadLetterPublishingRecoverer`` writes the wrapper's
    message first and the root cause's last (``Listener method '<signature>' threw exception; <cause's
    message>``), so the head alone would hide why the record failed.
    """
    if value is None:
        return None
    shown = _CONTROL.sub(_escape, value[:MAX_VALUE_CHARS])
    if len(value) <= MAX_VALUE_CHARS and len(shown) <= MAX_VALUE_CHARS:
        return shown
    note = f"...({len(value)} characters)..."
    room = MAX_VALUE_CHARS - len(note)
    head, tail = room - room // 2, room // 2
    return (
        _CONTROL.sub(_escape, value[:head])[:head]
        + note
        + (_CONTROL.sub(_escape, value[-tail:])[-tail:] if tail else "")
    )


def bound_counts(
    counts: Mapping[str, int], cap: int = MAX_DISTINCT_VALUES, *, by_count: bool = False
) -> dict[str, int]:
    """
    ``counts`` (value -> records) by bounded value: the ``cap`` most frequent, the others summed.

    The others go under :data:`OTHER_VALUES`; values alike once bounded are counted together. Sorted
    by value (``by_count``: the most frequent first), :data:`OTHER_VALUES` last.
    """
    merged: Counter[str] = Counter()
    for value, n in counts.items():
        merged[str(bound_value(value))] += n
    ranked = sorted(merged.items(), key=lambda item: (-item[1], item[0]))
    bounded = dict(ranked[:cap] if by_count else sorted(ranked[:cap]))
    rest = sum(n for _, n in ranked[cap:])
    if rest:
        bounded[OTHER_VALUES] = bounded.pop(OTHER_VALUES, 0) + rest
    return bounded


def bound_strings(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with every string value bounded (a record's coordinates and classes), the rest as is."""
    return {k: bound_value(v) if isinstance(v, str) else v for k, v in fields.items()}


def bound_metadata_tags(tags: Iterable[str], limit: int = MAX_METADATA_BYTES) -> list[str]:
    """
    The bounded ``tags`` (sorted) whose ``{"tags": [...]}`` metadata fits in ``limit`` bytes.

    Those that do not fit are left out: a tag left out is only no longer remembered as admitted.
    """
    kept: list[str] = []
    size = len('{"tags":[]}')
    for tag in sorted({str(bound_value(t)) for t in tags}):
        cost = len(json.dumps(tag).encode()) + (1 if kept else 0)
        if size + cost > limit:
            continue
        kept.append(tag)
        size += cost
    return kept
