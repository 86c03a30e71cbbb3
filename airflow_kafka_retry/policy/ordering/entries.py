"""
What the key-order state and the hold topic hold, as bytes (``ordering: key``, ``docs/ordering.md``).

* A **key id** names a key in the state and in marks: the first 16 bytes of the SHA-256 of the key's raw
  bytes. A key of any length or content (binary, or longer than a state record could carry) has one; the
  state and the marks never carry the key itself.
* A **state entry** (the compacted ``<topic>-order-state``, partitioned like the main topic; record key: the
  key id; a tombstone when the key is free): the key's *head* (where its record in flight is now), the records
  *held* behind it in the hold topic (hold offset, main offset, when held), since when the key is blocked, and
  whether its head waits in a DLT (``release_on: replay``).
* A **mark** (a record of ``<topic>-hold`` with the header ``kafka_retry-order: mark``, written by a tier's
  drain in the transaction that gave the head its home, or by ``ordering release``): what became of the record
  a lane read at ``at`` -- processed, moved to ``to``, dead-lettered to ``to``, dropped, or released by hand.
* A **held copy** (a record of ``<topic>-hold`` with the header ``kafka_retry-order: held``): a main-topic
  record waiting behind its key's head, with the main record's key, value and headers.

Nothing here trusts a record: a mark counts only when its ``at`` is the head the state names (the engine
writes ``at`` from the coordinates it read, never from headers), and held copies are found through the
state's offsets, never through their headers.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

#: The header the engine puts on each record of a hold topic: which kind it is.
ORDER_HEADER = "kafka_retry-order"
HELD = b"held"
MARK = b"mark"
#: Bytes of a key id.
KEY_ID_BYTES = 16

MarkKind = Literal["processed", "moved", "dlt", "dropped", "release"]
MARK_KINDS: tuple[MarkKind, ...] = ("processed", "moved", "dlt", "dropped", "release")


class OrderStateError(ValueError):
    """A state entry or a mark that cannot be read; the message names where it was read."""


def key_id(key: bytes | None) -> bytes | None:
    """The key id of a record's raw key; None for a null key (never held)."""
    if key is None:
        return None
    return hashlib.sha256(key).digest()[:KEY_ID_BYTES]


class Location(NamedTuple):
    """A record's coordinates: ``topic[partition]@offset``."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"

    @classmethod
    def read(cls, value: Any, where: str, field: str) -> Location:
        if (
            not isinstance(value, list)
            or len(value) != 3
            or not isinstance(value[0], str)
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value[1:])
        ):
            raise OrderStateError(f"{where}: {field} must be [topic, partition, offset], got {value!r}")
        return cls(value[0], value[1], value[2])


class Held(NamedTuple):
    """A record held behind its key's head: its hold-topic offset, its main-topic offset, when it was held."""

    hold_offset: int
    main_offset: int
    held_ms: int


@dataclass(frozen=True)
class BlockedKey:
    """
    One blocked key of one partition: its head and what waits behind it (a state entry).

    :param head: where the key's record in flight is now (a tier, a DLT, or the main topic when replayed).
    :param held: the records held behind it, in their original order.
    :param since_ms: when the key was blocked (its first head failed).
    :param in_dlt: the head waits in a DLT (``release_on: replay``) until it is replayed or released by hand.
    :param head_main_offset: the head's offset in the main topic (shown by ``dlt inspect`` and the view).
    """

    head: Location
    held: tuple[Held, ...] = ()
    since_ms: int = 0
    in_dlt: bool = False
    head_main_offset: int | None = None

    def to_bytes(self, held_json: str | None = None) -> bytes:
        """
        The entry as JSON (``json.dumps`` with compact separators would write the same bytes).

        Written by hand: a keeper writes an entry for each key a chunk changes, with all its held records,
        and this takes half the time ``json.dumps`` did. ``held_json``: :func:`held_json_of` its held records,
        when the caller has it.
        """
        head = self.head
        held = held_json_of(self.held) if held_json is None else held_json
        more = ',"in_dlt":true' if self.in_dlt else ""
        if self.head_main_offset is not None:
            more += f',"origin":{self.head_main_offset}'
        return (
            f'{{"v":1,"head":[{_string(head.topic)},{head.partition},{head.offset}],"held":[{held}],'
            f'"since":{self.since_ms}{more}}}'
        ).encode()

    @classmethod
    def from_bytes(cls, value: bytes, where: str) -> BlockedKey:
        data = _json(value, where, "state entry")
        held = data.get("held", [])
        if not isinstance(held, list) or not all(
            isinstance(h, list) and len(h) == 3 and all(_count(v) for v in h) for h in held
        ):
            raise OrderStateError(f"{where}: held must be a list of [hold offset, main offset, held ms]")
        since, origin = data.get("since", 0), data.get("origin")
        if not _count(since) or (origin is not None and not _count(origin)):
            raise OrderStateError(f"{where}: since and origin must be whole numbers >= 0")
        return cls(
            head=Location.read(data.get("head"), where, "head"),
            held=tuple(Held(*h) for h in held),
            since_ms=since,
            in_dlt=data.get("in_dlt") is True,
            head_main_offset=origin,
        )


@dataclass(frozen=True)
class Mark:
    """
    What became of a record a lane read at ``at`` (a record of the hold topic; its record key: the key id).

    :param kind: ``processed`` (handled), ``moved`` (to the next tier, ``to``), ``dlt`` (dead-lettered to
        ``to``), ``dropped`` (no home by design), ``release`` (released by hand: ``by`` and ``reason`` say who
        and why; ``at`` is the head the operator saw, or None to release whatever the head is).
    """

    key_id: bytes
    kind: MarkKind
    at: Location | None
    to: Location | None = None
    by: str | None = None
    reason: str | None = None
    ms: int = 0

    def to_bytes(self) -> bytes:
        data: dict[str, Any] = {"v": 1, "kind": self.kind, "ms": self.ms}
        if self.at is not None:
            data["at"] = list(self.at)
        if self.to is not None:
            data["to"] = list(self.to)
        if self.by is not None:
            data["by"] = self.by
        if self.reason is not None:
            data["reason"] = self.reason
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def from_record(cls, key: bytes | None, value: bytes | None, where: str) -> Mark:
        if key is None or len(key) != KEY_ID_BYTES:
            raise OrderStateError(f"{where}: a mark's record key must be a {KEY_ID_BYTES}-byte key id")
        data = _json(value, where, "mark")
        kind = data.get("kind")
        if kind not in MARK_KINDS:
            raise OrderStateError(f"{where}: kind must be one of {', '.join(MARK_KINDS)}, got {kind!r}")
        at = data.get("at")
        to = data.get("to")
        ms = data.get("ms", 0)
        if not _count(ms):
            raise OrderStateError(f"{where}: ms must be a whole number >= 0")
        if kind != "release" and at is None:
            raise OrderStateError(f"{where}: a {kind} mark needs at")
        if kind in ("moved", "dlt") and to is None:
            raise OrderStateError(f"{where}: a {kind} mark needs to")
        by, reason = data.get("by"), data.get("reason")
        return cls(
            key_id=key,
            kind=kind,
            at=None if at is None else Location.read(at, where, "at"),
            to=None if to is None else Location.read(to, where, "to"),
            by=by if isinstance(by, str) else None,
            reason=reason if isinstance(reason, str) else None,
            ms=ms,
        )


def order_kind(headers: list[tuple[str, bytes | None]] | None) -> bytes | None:
    """A hold-topic record's kind (:data:`HELD` or :data:`MARK`), from the engine's header; None if absent."""
    for name, value in headers or ():
        if name == ORDER_HEADER:
            return value
    return None


def held_json_of(held: Sequence[Held]) -> str:
    """Held records as the items of a JSON array (the brackets left out: a longer list adds to it)."""
    return ",".join([f"[{h[0]},{h[1]},{h[2]}]" for h in held])


@functools.lru_cache(maxsize=256)
def _string(text: str) -> str:
    """``text`` as a JSON string (a topic name: the few a keeper writes are asked again and again)."""
    return json.dumps(text)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _json(value: bytes | None, where: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(value or b"")
    except ValueError as exc:
        raise OrderStateError(f"{where}: the {what} is not JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("v") != 1:
        raise OrderStateError(f"{where}: the {what} is not a version-1 object")
    return data
