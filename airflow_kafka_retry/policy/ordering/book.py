"""
The rules of key order for one partition of the main topic: which keys are blocked, and what a mark does.

An :class:`OrderBook` is the in-memory state of one partition's keeper (the main topic's drain under
``ordering: key``): the blocked keys only, never every key seen. It is loaded from the state topic, changed
by the chunk being handled, and written back (:meth:`OrderBook.changes`) in that chunk's transaction. A head
or a held copy whose offset is not known until its delivery report is *pending* until :meth:`place_head` or
:meth:`place_held` says where it landed; :meth:`changes` refuses to write a pending one.

:func:`layers` splits records so that no handler call sees two records of one key: a record runs only after
the earlier ones of its key, and one that fails holds the later ones (``docs/ordering.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Literal, NamedTuple, TypeVar

from airflow_kafka_retry.policy.ordering.entries import BlockedKey, Held, Location, Mark, held_json_of

T = TypeVar("T")

#: A head or held copy whose offset its delivery report has not told yet.
PENDING = -1

ReleaseOn = Literal["dlt", "replay"]


class Applied(NamedTuple):
    """
    What a mark did to its key.

    ``released`` (the key's ``held`` records run now, in order), ``moved`` (its head is elsewhere now),
    ``parked`` (its head waits in a DLT, ``release_on: replay``) or ``ignored`` (``why``).
    """

    outcome: Literal["released", "moved", "parked", "ignored"]
    held: tuple[Held, ...] = ()
    why: str | None = None


class OrderBook:
    """
    The blocked keys of one partition of the main topic.

    :param release_on: ``dlt``: a key moves on once its head is dead-lettered; ``replay``: it stays blocked
        until the dead letter is replayed and ends, or an operator releases it.
    """

    def __init__(self, release_on: ReleaseOn = "dlt") -> None:
        self.release_on = release_on
        self.entries: dict[bytes, BlockedKey] = {}
        self._dirty: set[bytes] = set()
        self._holding: dict[bytes, list[Held]] = {}  # held by the chunk, not in their key's entry yet
        self._texts: dict[bytes, tuple[tuple[Held, ...], str]] = {}  # held records as last written

    def __len__(self) -> int:
        return len(self.entries)

    def load(self, kid: bytes, entry: BlockedKey | None) -> None:
        """A state entry read back (None: a tombstone)."""
        if entry is None:
            self.entries.pop(kid, None)
        else:
            self.entries[kid] = entry

    def blocked(self, kid: bytes | None) -> bool:
        return kid is not None and kid in self.entries

    def is_head(self, kid: bytes | None, at: Location) -> bool:
        entry = self.entries.get(kid) if kid is not None else None
        return entry is not None and entry.head == at

    @property
    def changed(self) -> bool:
        """Whether the book has changes :meth:`changes` has not given yet."""
        return bool(self._dirty)

    def held_of(self, kid: bytes) -> tuple[Held, ...]:
        """The records held behind ``kid``'s head, those the chunk held included, in order."""
        entry = self.entries.get(kid)
        return (*(entry.held if entry is not None else ()), *self._holding.get(kid, ()))

    def held_count(self) -> int:
        held = sum(len(e.held) for e in self.entries.values())
        return held + sum(len(h) for h in self._holding.values())

    # ------------------------------------------------------------------ marks
    def apply(self, mark: Mark) -> Applied:
        """What ``mark`` does to its key; a released key leaves the book (its held records run next)."""
        self._join(mark.key_id)
        entry = self.entries.get(mark.key_id)
        if entry is None:
            return Applied("ignored", why="its key is not blocked (released already, or never held)")
        if mark.at is not None and mark.at != entry.head:
            return Applied("ignored", why=f"it names {mark.at}, but the key's head is {entry.head}")
        if mark.kind == "moved":
            self._set(mark.key_id, _changed(entry, head=_to(mark)))
            return Applied("moved")
        if mark.kind == "dlt" and self.release_on == "replay":
            self._set(mark.key_id, _changed(entry, head=_to(mark), in_dlt=True))
            return Applied("parked")
        self._set(mark.key_id, None)
        return Applied("released", entry.held)

    # ------------------------------------------------------------------ the chunk's changes
    def block(
        self,
        kid: bytes,
        main_offset: int,
        now_ms: int,
        held: Sequence[Held] = (),
        since_ms: int | None = None,
        in_dlt: bool = False,
    ) -> None:
        """
        ``kid``'s record at ``main_offset`` failed: it is its key's head (placed by ``place_head``).

        ``held``/``since_ms``: what a failed head of a blocked key keeps (those the chunk held stay the
        chunk's: they join the new entry); ``in_dlt``: it went to a DLT (``release_on: replay``).
        """
        self._set(
            kid,
            BlockedKey(
                head=Location("", 0, PENDING),
                held=tuple(held),
                since_ms=now_ms if since_ms is None else since_ms,
                in_dlt=in_dlt,
                head_main_offset=main_offset,
            ),
        )

    def place_head(self, kid: bytes, head: Location) -> None:
        self._set(kid, _changed(self.entries[kid], head=head))

    def hold(self, kid: bytes, main_offset: int, held_ms: int, hold_offset: int = PENDING) -> None:
        """
        The main record at ``main_offset`` waits behind ``kid``'s head, since ``held_ms``.

        ``hold_offset``: its copy's offset in the hold topic, when it has one already (a held record held
        again); else ``place_held`` places it.
        """
        if kid not in self.entries:
            raise KeyError(kid)
        self._holding.setdefault(kid, []).append(Held(hold_offset, main_offset, held_ms))
        self._dirty.add(kid)

    def unhold(self, kid: bytes, main_offset: int) -> Held | None:
        """
        Take the record held at ``main_offset`` out of ``kid``'s held records (None: none is).

        A head replayed to the main topic and held there before its ``moved`` mark came is the key's head.
        """
        self._join(kid)
        entry = self.entries.get(kid)
        found = next((h for h in entry.held if h.main_offset == main_offset), None) if entry else None
        if entry is not None and found is not None:
            self._set(kid, _changed(entry, held=tuple(h for h in entry.held if h != found)))
        return found

    def place_held(self, kid: bytes, placed: Mapping[int, int]) -> None:
        """``kid``'s held records not placed yet, by main offset: where their copies landed (hold offsets)."""
        holding = self._holding[kid]
        for i, h in enumerate(holding):
            if h.hold_offset == PENDING and h.main_offset in placed:
                holding[i] = Held(placed[h.main_offset], h.main_offset, h.held_ms)

    def changes(self) -> list[tuple[bytes, bytes | None]]:
        """The state records the chunk writes (key id, entry or None for a tombstone); clears the list."""
        out: list[tuple[bytes, bytes | None]] = []
        for kid in sorted(self._dirty):
            self._join(kid)
            entry = self.entries.get(kid)
            if entry is not None and entry.head.offset == PENDING:
                raise RuntimeError(f"key id {kid.hex()}: its head has no offset yet")
            out.append((kid, None if entry is None else entry.to_bytes(self._held_json(kid, entry.held))))
        self._dirty.clear()
        return out

    def _held_json(self, kid: bytes, held: tuple[Held, ...]) -> str:
        """
        :func:`held_json_of` ``held``, from what was written of the key before when ``held`` only adds to it.

        A key blocked for many chunks holds more records at each: written whole every time, its entries
        cost the square of its held records.
        """
        before, text = self._texts.get(kid, ((), ""))
        if held is not before:
            if before and len(held) > len(before) and held[: len(before)] == before:
                text = f"{text},{held_json_of(held[len(before) :])}"
            else:
                text = held_json_of(held)
            self._texts[kid] = (held, text)
        return text

    def _join(self, kid: bytes) -> None:
        """The records the chunk held behind ``kid``'s head join its entry, once placed."""
        holding = self._holding.get(kid)
        if holding:
            if PENDING in map(_HOLD_OFFSET, holding):
                raise RuntimeError(f"key id {kid.hex()}: a held record has no offset yet")
            del self._holding[kid]
            entry = self.entries[kid]
            self._set(kid, _changed(entry, held=(*entry.held, *holding)))

    def _set(self, kid: bytes, entry: BlockedKey | None) -> None:
        if entry is None:
            self.entries.pop(kid, None)
            self._texts.pop(kid, None)
        else:
            self.entries[kid] = entry
        self._dirty.add(kid)


_HOLD_OFFSET = itemgetter(0)


def _changed(
    entry: BlockedKey,
    *,
    head: Location | None = None,
    held: tuple[Held, ...] | None = None,
    in_dlt: bool | None = None,
) -> BlockedKey:
    """``entry`` with ``head``, ``held`` or ``in_dlt`` changed (``dataclasses.replace``, 5x faster)."""
    return BlockedKey(
        entry.head if head is None else head,
        entry.held if held is None else held,
        entry.since_ms,
        entry.in_dlt if in_dlt is None else in_dlt,
        entry.head_main_offset,
    )


def _to(mark: Mark) -> Location:
    if mark.to is None:  # Mark.from_record refuses a moved or dlt mark without it
        raise ValueError(f"a {mark.kind} mark needs to")
    return mark.to


def layers(items: Iterable[T], kid_of: Callable[[T], bytes | None]) -> list[list[T]]:
    """
    ``items`` in layers, in order within each: layer *n* holds the *n*-th record of each key.

    Records of a null key are never ordered: all of them go to the first layer.
    """
    out: list[list[T]] = []
    seen: dict[bytes, int] = {}
    for item in items:
        kid = kid_of(item)
        depth = 0
        if kid is not None:
            depth = seen.get(kid, 0)
            seen[kid] = depth + 1
        if depth == len(out):
            out.append([])
        out[depth].append(item)
    return out
