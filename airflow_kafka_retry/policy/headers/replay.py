"""
Headers of a record replayed from a DLT: the audit trail and a fresh retry state.

Spring for Apache Kafka has no DLT replay, so these headers are this provider's own (a
``dlt_replay-`` prefix, clear of Spring's ``kafka_`` and ``retry_topic-`` names):

* ``dlt_replay-id``: the replay that moved the record (UTF-8);
* ``dlt_replay-source-topic`` / ``-source-partition`` / ``-source-offset``: the DLT record it was
  copied from (UTF-8, 4-byte and 8-byte big-endian, like Spring's original coordinates);
* ``dlt_replay-timestamp``: when it was replayed (epoch ms, 8-byte big-endian).

A replayed record keeps its own headers and the original-coordinate headers of either Spring
family (they still point at the first failure); the ``retry_topic-*`` and exception headers of
the failure that dead-lettered it are removed, so it starts a fresh attempt count (and a fresh
timeout clock: its own timestamp). A replayed record that fails again is parked rather than
dead-lettered (see :mod:`airflow_kafka_retry.policy.routing.resolver`) -- but only when the claim holds:
any producer can write these headers, so the engine parks a record only when its complete audit
names one of the topology's DLTs or its parking topic (:func:`claimed_replay`) and that topic's
replay log recorded the move *of this very copy*: the log entry carries :func:`copy_digest` of the
replay id, key and value produced, and the failing record's own key and value must give it
(``engine/drain/replay_trust.py``), so an audit copied onto another record confirms nothing. Any other
claim is treated as absent.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_kafka_retry.policy.headers.codec import (
    ATTEMPTS,
    BACKOFF_TIMESTAMP,
    HEADER_NAMES,
    RETRY_HEADERS,
    Header,
    encode_big_integer,
    encode_int32,
    encode_int64,
    last_header,
)

REPLAY_ID = "dlt_replay-id"
REPLAY_SOURCE_TOPIC = "dlt_replay-source-topic"
REPLAY_SOURCE_PARTITION = "dlt_replay-source-partition"
REPLAY_SOURCE_OFFSET = "dlt_replay-source-offset"
REPLAY_TIMESTAMP = "dlt_replay-timestamp"
REPLAY_HEADERS = (
    REPLAY_ID,
    REPLAY_SOURCE_TOPIC,
    REPLAY_SOURCE_PARTITION,
    REPLAY_SOURCE_OFFSET,
    REPLAY_TIMESTAMP,
)
_EXCEPTION_HEADERS = frozenset(name for family in HEADER_NAMES.values() for name in family.exceptions)


@dataclass(frozen=True)
class ReplayAudit:
    """Which replay moved a record, from which DLT record, and when."""

    replay_id: str
    topic: str
    partition: int
    offset: int
    timestamp_ms: int

    def headers(self) -> list[Header]:
        return [
            (REPLAY_ID, self.replay_id.encode("utf-8")),
            (REPLAY_SOURCE_TOPIC, self.topic.encode("utf-8")),
            (REPLAY_SOURCE_PARTITION, encode_int32(self.partition)),
            (REPLAY_SOURCE_OFFSET, encode_int64(self.offset)),
            (REPLAY_TIMESTAMP, encode_int64(self.timestamp_ms)),
        ]


def copy_digest(replay_id: str, key: bytes | None, value: bytes | None) -> str:
    """
    What binds a replay-log entry to the copy it logged: SHA-256 of the replay id, key and value.

    Each field is length-prefixed and a null key or value is told apart from an empty one, so no two
    copies share a digest by moving bytes between fields. The engine routes a record through the tiers
    with its key and value unchanged, so the copy keeps its digest on every tier.
    """
    h = hashlib.sha256(b"dlt-replay-copy/1")
    for part in (replay_id.encode("utf-8"), key, value):
        if part is None:
            h.update(b"\xff")
        else:
            h.update(b"\x00" + len(part).to_bytes(8, "big") + part)
    return h.hexdigest()


def entry_confirms(entry: Mapping[str, Any] | None, audit: ReplayAudit, digest: str) -> bool:
    """
    True when a replay log's ``record/<partition>/<offset>`` entry recorded ``audit``'s move of this copy.

    The entry (of the DLT coordinates ``audit`` names) must name the audit's replay id and ``digest``, the
    :func:`copy_digest` of the failing record's own key and value; an entry without a digest (written by an
    older version) confirms nothing.
    """
    return (
        entry is not None
        and entry.get("replay_id") == audit.replay_id
        and isinstance(entry.get("copy"), str)
        and entry["copy"] == digest
    )


def is_replayed(headers: Iterable[Header] | None) -> bool:
    """True when the record was replayed from a DLT (it carries ``dlt_replay-id``)."""
    return last_header(headers, REPLAY_ID) is not None


def read_replay_audit(headers: Iterable[Header] | None) -> ReplayAudit | None:
    """The audit headers of a replayed record, or None when any is missing or malformed."""
    headers = list(headers or ())
    replay_id, topic = last_header(headers, REPLAY_ID), last_header(headers, REPLAY_SOURCE_TOPIC)
    partition, offset = (
        last_header(headers, REPLAY_SOURCE_PARTITION),
        last_header(headers, REPLAY_SOURCE_OFFSET),
    )
    at = last_header(headers, REPLAY_TIMESTAMP)
    if replay_id is None or topic is None or partition is None or offset is None or at is None:
        return None
    if len(partition) != 4 or len(offset) != 8 or len(at) != 8:
        return None
    return ReplayAudit(
        replay_id.decode("utf-8", errors="replace"),
        topic.decode("utf-8", errors="replace"),
        struct.unpack(">i", partition)[0],
        struct.unpack(">q", offset)[0],
        struct.unpack(">q", at)[0],
    )


def claimed_replay(headers: Iterable[Header] | None, sources: Collection[str]) -> ReplayAudit | None:
    """
    The audit of a record whose complete replay headers name one of ``sources``.

    ``sources`` are the topology's DLTs and parking topic. None when the record carries no replay
    headers, an incomplete or malformed set, or names another topic.

    A claim is not proof: the replay log of ``audit.topic`` must also know the move.
    """
    audit = read_replay_audit(headers)
    return audit if audit is not None and audit.topic in sources else None


def replayed_headers(
    existing: Sequence[Header] | None,
    audit: ReplayAudit,
    *,
    attempt: int | None = None,
    due_ms: int | None = None,
    keep_failure: bool = False,
) -> list[Header]:
    """
    The headers of the copy a replay produces.

    :param existing: the DLT record's headers (possibly edited by a transform).
    :param audit: where the copy comes from.
    :param attempt: when the target is a retry tier, the attempt the record is on there (a tier's
        first attempt, as if it had just failed on the topic before); None for the main topic or a
        topic outside the topology: no ``retry_topic-*`` headers, so attempt 1.
    :param due_ms: when it is due in that retry tier (``retry_topic-backoff-timestamp``).
    :param keep_failure: keep the failure's exception headers (a record parked by a redrive policy goes to
        the parking topic with them, not to a retry: ``dlt inspect --dlt parking`` still names its failure).
    """
    dropped = {*RETRY_HEADERS, *REPLAY_HEADERS, *(() if keep_failure else _EXCEPTION_HEADERS)}
    headers = [(k, v) for k, v in existing or () if k not in dropped]
    headers += audit.headers()
    if attempt is not None:
        headers.append((ATTEMPTS, encode_int32(attempt)))
        headers.append(
            (BACKOFF_TIMESTAMP, encode_big_integer(audit.timestamp_ms if due_ms is None else due_ms))
        )
    return headers
