"""
Which DLT records a replay selects: exception class, original topic, time, key, partition, offsets.

Filters of different kinds are combined with AND; repeated values of one kind with OR. Every
value is checked when the filter is built, so a bad one fails before anything is read or moved.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.policy.classify import is_dotted_name
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.timing.durations import parse_duration_ms

if TYPE_CHECKING:
    from airflow_kafka_retry.dlt.records import DltRecord


def parse_time_ms(value: object, *, now_ms: int, option: str) -> int:
    """Epoch ms from epoch milliseconds, an ISO-8601 time (naive = UTC) or a duration ago (``2h``, ``3d``)."""
    if isinstance(value, bool):
        raise ReplayError(
            f"{option} {value!r}: expected epoch milliseconds, an ISO-8601 time or a duration ago"
        )
    if isinstance(value, int):
        return value
    if isinstance(value, datetime):
        return int((value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp() * 1000)
    text = str(value).strip()
    if text.isdigit():
        return int(text)
    try:
        return now_ms - parse_duration_ms(text)
    except ValueError:
        pass
    try:
        return parse_time_ms(datetime.fromisoformat(text), now_ms=now_ms, option=option)
    except ValueError:
        raise ReplayError(
            f"{option} {text!r} is not a time: use epoch milliseconds, an ISO-8601 time "
            "(2026-11-23T10:00, UTC unless it has an offset) or a duration ago (30m, 2h, 3d)"
        ) from None


def parse_offsets(spec: object) -> tuple[int, int | None]:
    """``A-B`` (inclusive), ``A-`` (from A on) or ``A`` (just A) -> (first, last or None)."""
    text = str(spec).strip()
    first, sep, last = text.partition("-")
    try:
        start = int(first)
        end = (int(last) if last.strip() else None) if sep else start
    except ValueError:
        raise ReplayError(
            f"--offsets {text!r}: expected A-B (inclusive), A- or A, with offsets as integers"
        ) from None
    if start < 0 or (end is not None and end < start):
        raise ReplayError(f"--offsets {text!r}: offsets must be >= 0 and A <= B")
    return start, end


def _as_list(value: object) -> list[Any]:
    if value is None or value == "":
        return []
    if isinstance(value, str | bytes | int):
        return [value]
    if not isinstance(value, Iterable):
        raise TypeError(f"expected a value or a list of values, got {type(value).__name__}")
    return [v for v in value if v is not None and v != ""]


def _split(value: object) -> tuple[str, ...]:
    """Names given one per value or comma-separated (class and topic names have no commas)."""
    return tuple(part.strip() for item in _as_list(value) for part in str(item).split(",") if part.strip())


def loaded_class(name: str) -> type | None:
    """
    The class named ``name`` (dotted; a bare name is a builtin) if its module is already loaded.

    Never imports: a filter or a record's exception header must not run code. Only modules in
    ``sys.modules`` are looked in, through their ``__dict__`` (a module ``__getattr__`` may import).
    """
    parts = name.split(".") if "." in name else ["builtins", name]
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        found: Any = module
        for part in parts[cut:]:
            found = vars(found).get(part) if hasattr(found, "__dict__") else None
            if found is None:
                break
        return found if isinstance(found, type) else None
    return None


@dataclass(frozen=True)
class ReplayFilter:
    """A validated selection. Build with :meth:`build`; every field empty selects every record."""

    exceptions: tuple[str, ...] = ()
    original_topics: tuple[str, ...] = ()
    since_ms: int | None = None
    until_ms: int | None = None
    keys: tuple[bytes, ...] = ()
    partitions: tuple[int, ...] = ()
    offsets: tuple[int, int | None] | None = None
    limit: int | None = None
    _classes: dict[str, type | None] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(
        cls,
        *,
        exception: object = None,
        original_topic: object = None,
        since: object = None,
        until: object = None,
        key: object = None,
        partition: object = None,
        offsets: object = None,
        limit: object = None,
        now_ms: int,
    ) -> ReplayFilter:
        """
        Check and normalise filter options as the CLI, the operator and the DAG form give them.

        ``exception``, ``original_topic`` and ``partition`` take one value, a list, or comma-separated
        values; ``key`` strings (UTF-8) or bytes;
        ``since``/``until`` see :func:`parse_time_ms` (``now_ms`` anchors a duration ago).
        """
        exceptions = _split(exception)
        for name in exceptions:
            if not is_dotted_name(name):
                raise ReplayError(
                    f"--exception {name!r} is not a dotted exception class path "
                    "(e.g. myapp.errors.InvalidOrder or ValueError)"
                )
        partitions: list[int] = []
        for item in _as_list(partition):
            for part in str(item).split(","):
                try:
                    number = int(part)
                except ValueError:
                    raise ReplayError(f"--partition {part!r} is not a partition number") from None
                if number < 0:
                    raise ReplayError(f"--partition {number} is not a partition number (>= 0)")
                partitions.append(number)
        since_ms = None if since in (None, "") else parse_time_ms(since, now_ms=now_ms, option="--since")
        until_ms = None if until in (None, "") else parse_time_ms(until, now_ms=now_ms, option="--until")
        if since_ms is not None and until_ms is not None and since_ms > until_ms:
            raise ReplayError(f"--since ({since}) is later than --until ({until})")
        if limit in (None, ""):
            count = None
        else:
            try:
                count = int(str(limit))
            except ValueError:
                count = 0
            if count < 1:
                raise ReplayError(f"--limit {limit!r} must be a whole number >= 1")
        keys = tuple(k if isinstance(k, bytes) else str(k).encode("utf-8") for k in _as_list(key))
        topics = _split(original_topic)
        return cls(
            exceptions=exceptions,
            original_topics=topics,
            since_ms=since_ms,
            until_ms=until_ms,
            keys=keys,
            partitions=tuple(sorted(set(partitions))),
            offsets=None if offsets in (None, "") else parse_offsets(offsets),
            limit=count,
            _classes={name: loaded_class(name) for name in exceptions},
        )

    def check_partitions(self, topic: str, count: int) -> None:
        """Fail when ``--partition`` names a partition ``topic`` does not have."""
        missing = [p for p in self.partitions if p >= count]
        if missing:
            raise ReplayError(
                f"--partition {', '.join(map(str, missing))}: {topic} has {count} partition(s) "
                f"(0..{count - 1})"
            )

    def chosen_partitions(self, count: int) -> list[int]:
        return list(self.partitions) if self.partitions else list(range(count))

    @property
    def start_offset(self) -> int | None:
        return None if self.offsets is None else self.offsets[0]

    def matches(self, record: DltRecord) -> bool:
        """True when ``record`` passes every filter (``limit`` aside)."""
        if self.partitions and record.partition not in self.partitions:
            return False
        if self.offsets is not None:
            first, last = self.offsets
            if record.offset < first or (last is not None and record.offset > last):
                return False
        if self.since_ms is not None and record.timestamp_ms < self.since_ms:
            return False
        if self.until_ms is not None and record.timestamp_ms > self.until_ms:
            return False
        if self.keys and record.key not in self.keys:
            return False
        if self.original_topics and record.original.topic not in self.original_topics:
            return False
        return not self.exceptions or self._exception_matches(record)

    def _exception_matches(self, record: DltRecord) -> bool:
        found = [name for name in (record.exception, record.exception_cause) if name]
        return any(self._is_a(name, wanted) for name in found for wanted in self.exceptions)

    def _is_a(self, name: str, wanted: str) -> bool:
        """``name`` is ``wanted`` or, where both classes are already loaded here, a subclass of it."""
        if name == wanted:
            return True
        base = self._classes.get(wanted)
        if base is None:
            return False
        cls = loaded_class(name)
        return cls is not None and issubclass(cls, base)

    def describe(self) -> dict[str, Any]:
        """The filter as plain data (summary, replay log), keys as text."""
        return {
            "exception": list(self.exceptions),
            "original_topic": list(self.original_topics),
            "since_ms": self.since_ms,
            "until_ms": self.until_ms,
            "key": [k.decode("utf-8", errors="replace") for k in self.keys],
            "partition": list(self.partitions),
            "offsets": list(self.offsets) if self.offsets else None,
            "limit": self.limit,
        }
