"""Grouping DLT records for ``dlt inspect``: by exception class, original topic and hour or day of failure."""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from airflow_kafka_retry.dlt.records import DltRecord

Bucket = Literal["hour", "day"]
BUCKETS: tuple[Bucket, ...] = ("hour", "day")


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as an ISO-8601 UTC time (second precision)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def bucket_of(ms: int, bucket: Bucket) -> str:
    """The hour (``2026-11-23T10:00Z``) or day (``2026-11-23``) a failure time falls in, UTC."""
    at = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return at.strftime("%Y-%m-%dT%H:00Z") if bucket == "hour" else at.strftime("%Y-%m-%d")


def _text(value: bytes | None, limit: int = 200) -> str | None:
    if value is None:
        return None
    text = value.decode("utf-8", errors="replace")
    return text if len(text) <= limit else text[:limit] + "...[truncated]"


@dataclass
class Group:
    """
    Records of one (exception, cause, original topic, failure hour/day).

    ``failed_at`` is the DLT record's timestamp (when it was dead-lettered); ``samples`` are a few
    coordinates (``partition@offset``), with key and value only when asked for.
    """

    exception: str | None
    cause: str | None
    original_topic: str | None
    bucket: str
    count: int = 0
    replayed: int = 0
    oldest: str = ""
    newest: str = ""
    samples: list[dict[str, Any]] = field(default_factory=list)
    _oldest_ms: int = field(default=0, repr=False)
    _newest_ms: int = field(default=0, repr=False)

    def add(self, record: DltRecord, *, replayed: bool, samples: int, show_values: bool) -> None:
        if self.count == 0 or record.timestamp_ms < self._oldest_ms:
            self._oldest_ms, self.oldest = record.timestamp_ms, iso_ms(record.timestamp_ms)
        if self.count == 0 or record.timestamp_ms > self._newest_ms:
            self._newest_ms, self.newest = record.timestamp_ms, iso_ms(record.timestamp_ms)
        self.count += 1
        self.replayed += int(replayed)
        if len(self.samples) < samples:
            sample: dict[str, Any] = {"partition": record.partition, "offset": record.offset}
            if show_values:
                sample.update(key=_text(record.key), value=_text(record.value, 2000))
            self.samples.append(sample)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}


def group_records(
    records: Iterable[DltRecord],
    *,
    bucket: Bucket = "hour",
    replayed: Collection[tuple[int, int]] = frozenset(),
    samples: int = 3,
    show_values: bool = False,
) -> list[Group]:
    """Group ``records``; biggest groups first, then oldest first."""
    if bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {', '.join(BUCKETS)}, got {bucket!r}")
    groups: dict[tuple[str | None, str | None, str | None, str], Group] = {}
    for record in records:
        key = (
            record.exception,
            record.exception_cause,
            record.original.topic,
            bucket_of(record.timestamp_ms, bucket),
        )
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(*key)
        group.add(
            record,
            replayed=(record.partition, record.offset) in replayed,
            samples=samples,
            show_values=show_values,
        )
    return sorted(groups.values(), key=lambda g: (-g.count, g._oldest_ms, str(g.exception)))


def printable(text: str) -> str:
    r"""
    ``text`` made safe for a terminal.

    Control and format characters (escape sequences, bidi overrides, line breaks) are shown escaped
    (``\x1b``, ``\u202e``) instead of acting on the terminal.

    Header strings come from whoever produced the record; the table shows them through this.
    """
    return "".join(
        ch
        if ch == " " or unicodedata.category(ch)[0] not in "CZ"
        else (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        for ch in text
    )


def format_table(report: dict[str, Any]) -> str:
    """
    The inspect report as a text table (one line per group, samples as partition@offset).

    Exception classes and original topics (record headers) are passed through :func:`printable`.
    """
    headers = (
        "COUNT",
        "REPLAYED",
        "EXCEPTION",
        "ORIGINAL TOPIC",
        report["bucket"].upper(),
        "OLDEST",
        "NEWEST",
        "SAMPLES",
    )
    rows = [
        (
            str(g["count"]),
            str(g["replayed"]),
            printable((g["exception"] or "-") + (f" (cause {g['cause']})" if g["cause"] else "")),
            printable(g["original_topic"] or "-"),
            g["bucket"],
            g["oldest"],
            g["newest"],
            " ".join(f"{s['partition']}@{s['offset']}" for s in g["samples"]),
        )
        for g in report["groups"]
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = [
        (
            f"{report['topic']}: {report['records']} record(s), {report['replayed']} replayed "
            f"(replay log {report['replay_log']})"
        )
    ]
    lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    for replay in report.get("replays", []):
        if not replay["finished"]:
            replay_id = printable(str(replay["replay_id"]))
            lines.append(
                f"unfinished replay {replay_id} ({replay['moved']} moved): rerun it with "
                f"--replay-id {replay_id} and the same options to finish it"
            )
    if report.get("show_values"):
        for g in report["groups"]:
            for s in g["samples"]:
                lines.append(
                    f"  {report['topic']}[{s['partition']}]@{s['offset']}: key={s.get('key')!r} "
                    f"value={s.get('value')!r}"
                )
    return "\n".join(lines)
