"""
Grouping DLT records for ``dlt inspect``: by family, exception class, original topic and hour or day.

Each record is read whatever family wrote it (:mod:`~airflow_kafka_retry.policy.dead_letters.families`);
a group says which fields its records lack (``missing``) and which headers could not be read
(``unreadable``, by name), and each sample gives its original coordinates and failure.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from airflow_kafka_retry.policy.dead_letters.fields import dead_letter_fields

if TYPE_CHECKING:
    from airflow_kafka_retry.dlt.records import DltRecord
    from airflow_kafka_retry.policy.dead_letters.families import DeadLetter, Family

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


def sample_of(record: DltRecord, letter: DeadLetter) -> dict[str, Any]:
    """A record's DLT coordinates and what its headers say (header strings bounded), never its payload."""
    return {"partition": record.partition, "offset": record.offset, **dead_letter_fields(letter)}


@dataclass
class Group:
    """
    Records of one (exception, cause, original topic, failure hour/day, family).

    The bucket is the DLT record's timestamp: when it was dead-lettered, except for Kafka Connect, which
    keeps the source record's timestamp. ``samples`` are a few records by coordinates with what their
    headers say (:func:`sample_of`), key and value only when asked for. ``missing`` is every field some
    record of the group lacks, ``unreadable`` how many records had each header unreadable, and
    ``not_replayable`` how many are share-group dead letters without a copied record.
    """

    exception: str | None
    cause: str | None
    original_topic: str | None
    bucket: str
    family: Family = "unknown"
    count: int = 0
    replayed: int = 0
    oldest: str = ""
    newest: str = ""
    samples: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unreadable: dict[str, int] = field(default_factory=dict)
    not_replayable: int = 0
    _oldest_ms: int = field(default=0, repr=False)
    _newest_ms: int = field(default=0, repr=False)

    def add(
        self,
        record: DltRecord,
        *,
        replayed: bool,
        samples: int,
        show_values: bool,
        letter: DeadLetter | None = None,
    ) -> None:
        letter = letter or record.dead_letter
        if self.count == 0 or record.timestamp_ms < self._oldest_ms:
            self._oldest_ms, self.oldest = record.timestamp_ms, iso_ms(record.timestamp_ms)
        if self.count == 0 or record.timestamp_ms > self._newest_ms:
            self._newest_ms, self.newest = record.timestamp_ms, iso_ms(record.timestamp_ms)
        self.count += 1
        self.replayed += int(replayed)
        self.missing = sorted({*self.missing, *letter.missing})
        for name, _ in letter.unreadable:
            self.unreadable[name] = self.unreadable.get(name, 0) + 1
        self.not_replayable += int(not letter.record_copied)
        if len(self.samples) < samples:
            sample = sample_of(record, letter)
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
    assume: Family | None = None,
) -> list[Group]:
    """
    Group ``records``; biggest groups first, then oldest first.

    :param assume: the family of records whose headers name none (``airflow``, ``kafka-connect``).
    """
    if bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {', '.join(BUCKETS)}, got {bucket!r}")
    groups: dict[tuple[str | None, str | None, str | None, str, Family], Group] = {}
    for record in records:
        letter = record.describe(assume) if assume else record.dead_letter
        key = (
            letter.failure_class,
            letter.failure_cause,
            letter.original_topic,
            bucket_of(record.timestamp_ms, bucket),
            letter.family,
        )
        group = groups.get(key)
        if group is None:
            group = groups[key] = Group(*key)
        group.add(
            record,
            replayed=(record.partition, record.offset) in replayed,
            samples=samples,
            show_values=show_values,
            letter=letter,
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


def _origin(sample: dict[str, Any]) -> str:
    """`` (from topic[p]@o)`` when the sample's original coordinates are known."""
    if sample.get("original_partition") is None or sample.get("original_offset") is None:
        return ""
    topic = printable(sample.get("original_topic") or "?")
    return f"(from {topic}[{sample['original_partition']}]@{sample['original_offset']})"


def _notes(group: dict[str, Any]) -> str:
    """What a group's records lack, could not be read, or cannot be replayed, in words."""
    notes = []
    if group.get("missing"):
        notes.append("missing " + ", ".join(group["missing"]))
    if group.get("unreadable"):
        notes.append(
            "unreadable " + ", ".join(f"{printable(n)} ({c})" for n, c in group["unreadable"].items())
        )
    if group.get("not_replayable"):
        notes.append(
            f"{group['not_replayable']} without a copied record (share-group DLQ with "
            "errors.deadletterqueue.copy.record.enable=false): nothing to replay"
        )
    return "; ".join(notes)


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
        "FAMILY",
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
            g.get("family", "unknown"),
            g["bucket"],
            g["oldest"],
            g["newest"],
            " ".join(f"{s['partition']}@{s['offset']}{_origin(s)}" for s in g["samples"]),
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
    for g in report["groups"]:
        notes = _notes(g)
        if notes:
            lines.append(f"  {g['count']} x {printable(g['exception'] or '-')} ({g['family']}): {notes}")
    for family, count in sorted(report.get("families", {}).items()):
        lines.append(f"family {family}: {count} record(s)")
    for replay in report.get("replays", []):
        if not replay["finished"]:
            replay_id = printable(str(replay["replay_id"]))
            lines.append(
                f"unfinished replay {replay_id} ({replay['moved']} moved): rerun it with "
                f"--replay-id {replay_id} and the same options to finish it"
            )
    if report.get("blocked_keys") is not None:
        lines += blocked_lines(report["blocked_keys"])
    if report.get("show_values"):
        for g in report["groups"]:
            for s in g["samples"]:
                lines.append(
                    f"  {report['topic']}[{s['partition']}]@{s['offset']}: key={s.get('key')!r} "
                    f"value={s.get('value')!r}"
                )
    return "\n".join(lines)


def blocked_lines(blocked: dict[str, Any]) -> list[str]:
    """The blocked keys of an ``ordering: key`` topology: a total, then each partition with one (no key)."""
    if blocked.get("error"):
        return [f"blocked keys: not read: {blocked['error']}"]
    totals = blocked["totals"]
    lines = [
        (
            f"blocked keys ({blocked['topic']}): {totals['blocked_keys']} key(s), "
            f"{totals['held_records']} record(s) held"
        )
    ]
    for p in blocked["partitions"]:
        if p["blocked_keys"]:
            o = p["oldest"]
            main = "" if o["head_main_offset"] is None else f" (main offset {o['head_main_offset']})"
            lines.append(
                f"  partition {p['partition']}: {p['blocked_keys']} key(s), {p['held_records']} held; oldest "
                f"since {_iso(o['since_ms'])} ({o['age_s']:.0f}s), head {o['head']}{main}"
                f"{' in its DLT' if o['in_dlt'] else ''}, {o['held']} held"
            )
        for bad in p["bad"]:
            lines.append(f"  unreadable state entry: {printable(bad)}")
    return lines


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
