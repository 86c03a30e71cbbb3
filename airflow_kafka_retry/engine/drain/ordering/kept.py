"""
What a process keeps of a keeper partition between its runs: its clients, its state as read, its copies.

A keeper run (``keeper.py``) takes its partition's :class:`KeptSide` when it starts and gives it back when it
ends. A side serves one run at a time: a run that finds none (the process's first run of the partition, or
another run of it holds the side) makes a new one. What a side keeps:

* ``consumer``: reads the state partition, held copies by offset and the group's committed hold offset;
* ``tail``: follows the hold partition (:class:`~airflow_kafka_retry.engine.drain.ordering.reading.HoldTail`),
  ``hold_next`` the offset it returns next. A run that finds the group's committed hold offset there goes on
  from it, reading nothing again; one that finds another offset (another process ran the partition) reads
  the hold partition from the committed offset, as a new side does;
* ``entries``, ``state_next``: the state partition as read up to ``state_next``. A run reads what was
  written since: another process's entries after a takeover, or its own last run's. The state partition is
  written by its keeper alone, fenced by its transactional id, so nothing before ``state_next`` changes
  (a topic made again starts from 0, which the read sees). A run that ended cleanly leaves its book as it
  committed it (``final``) and where the partition then ends (``final_end``: what it read to, plus each
  entry it wrote and each of its transactions' commit markers): the next run that finds the partition
  ending there (ListOffsets) takes that book and reads nothing; one that finds another end reads from
  ``state_next``;
* ``copies``: main records this process copied to the hold topic, by their copy's offset: a release handles
  them without reading the copies back (at most :data:`COPY_RECORDS` records and :data:`COPY_BYTES` bytes,
  the oldest dropped first).

A run that ends cleanly gives back everything; one that failed, or was abandoned or stopped at once, gives
back only the state as read (always committed data): its clients are closed and its copies dropped (the
last of them may belong to a transaction that never committed). A process keeps the clients of at most
:data:`MAX_KEPT` sides, the least recently used closed first, and those unused for :data:`KEPT_IDLE_S` are
closed when a run next takes or gives one back; it keeps at most :data:`MAX_STATES` sides at all. A forked
child neither uses nor destroys its parent's clients.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer

from airflow_kafka_retry.engine.drain.ordering.reading import HoldTail, SideReader
from airflow_kafka_retry.engine.kafka.messages import offset_of
from airflow_kafka_retry.engine.kafka.process_clients import config_key, keep_inherited
from airflow_kafka_retry.policy.ordering.book import OrderBook, ReleaseOn
from airflow_kafka_retry.policy.ordering.entries import key_id

if TYPE_CHECKING:
    from confluent_kafka import Message

    from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
    from airflow_kafka_retry.policy.ordering.entries import BlockedKey

#: Sides whose clients a process keeps (the least recently used are closed past it).
MAX_KEPT = 16
#: Seconds after which a side nobody used has its clients closed.
KEPT_IDLE_S = 300.0
#: Sides a process keeps at all (those past it forget their state as read too).
MAX_STATES = 256
#: Copied main records a side keeps, at most, and their keys' and values' bytes.
COPY_RECORDS = 10_000
COPY_BYTES = 64 * 1024 * 1024

Key = tuple[Hashable, str, int]


@dataclass
class KeptSide:
    """One keeper partition's side, as a run finds it (see the module's docstring)."""

    key: Key
    config: Mapping[str, Any]  # the side consumers' librdkafka configuration
    consumer: Consumer | None = None
    tail: HoldTail | None = None
    hold_next: int | None = None
    entries: dict[bytes, BlockedKey] = field(default_factory=dict)
    state_next: int = -1
    final: dict[bytes, BlockedKey] | None = None
    final_end: int = -1
    copies: OrderedDict[int, Message] = field(default_factory=OrderedDict)
    copy_bytes: int = 0
    used_at: float = field(default_factory=time.monotonic)

    def book(self, reader: SideReader, topic: str, release_on: ReleaseOn) -> tuple[OrderBook, int]:
        """The order book of the partition, and the state partition's end it stands for."""
        final, self.final = self.final, None  # a run that does not end cleanly leaves none
        if final is not None and reader.end(topic) == self.final_end:  # nobody wrote since its last run
            self.entries, self.state_next = final, self.final_end
            book = OrderBook(release_on)
            book.entries = dict(final)
        else:
            book, self.state_next = reader.book(topic, release_on, self.entries, self.state_next)
            self.entries = dict(book.entries)
        return book, self.state_next

    def reader(self) -> Consumer:
        """The side's consumer (made at the first call)."""
        if self.consumer is None:
            self.consumer = Consumer(dict(self.config))
        return self.consumer

    def follow(self, topic: str, partition: int, offset: int, deadlines: CallDeadlines) -> HoldTail:
        """The hold partition followed from ``offset``, by the side's tail (made at the first call)."""
        if self.tail is None:
            self.tail = HoldTail(self.config, topic, partition, deadlines)
        self.tail.deadlines = deadlines
        self.tail.start(offset)
        self.hold_next = offset
        return self.tail

    def keep_copy(self, offset: int, message: Message) -> None:
        """``message`` was copied to the hold topic at ``offset`` (its transaction commits with the chunk)."""
        self.copies[offset] = message
        self.copy_bytes += _size(message)
        while len(self.copies) > COPY_RECORDS or self.copy_bytes > COPY_BYTES:
            _, oldest = self.copies.popitem(last=False)
            self.copy_bytes -= _size(oldest)

    def take_copy(self, offset: int, kid: bytes, main_offset: int) -> Message | None:
        """
        The main record copied at ``offset``, if the side kept it (it leaves the side).

        Only if it is ``kid``'s record at ``main_offset``, as the state says: a hold topic made again
        between two runs has other records at the same offsets.
        """
        message = self.copies.pop(offset, None)
        if message is None:
            return None
        self.copy_bytes -= _size(message)
        return message if offset_of(message) == main_offset and key_id(message.key()) == kid else None

    def detach(self) -> list[Consumer]:
        """Its clients, which it no longer holds, to close; its copies dropped. The state as read stays."""
        clients = [c for c in (self.consumer, self.tail.consumer if self.tail else None) if c is not None]
        self.consumer = self.tail = None
        self.hold_next = self.final = None
        self.copies.clear()
        self.copy_bytes = 0
        return clients


def close_clients(clients: list[Consumer], deadlines: CallDeadlines) -> None:
    """Close sides' detached clients under ``deadlines``."""
    if clients:
        with deadlines.call("close", 10.0, "the group coordinator (a keeper's side consumers)"):
            for client in clients:
                client.close()


def side_key(config: Mapping[str, Any], state_topic: str, partition: int) -> Key:
    return (config_key(config), state_topic, partition)


def take_side(
    config: Mapping[str, Any], state_topic: str, partition: int, deadlines: CallDeadlines
) -> KeptSide:
    """The process's side of ``state_topic[partition]``, or a new one: the run's until it gives it back."""
    key = side_key(config, state_topic, partition)
    with _LOCK:
        side = _SIDES.pop(key, None)
        idle = _detach_idle()
    close_clients(idle, deadlines)
    return side if side is not None else KeptSide(key, dict(config))


def give_back(side: KeptSide, clean: bool, deadlines: CallDeadlines) -> None:
    """
    The run of ``side`` ended: ``clean`` (all it read is committed) keeps everything, else the state as read.

    A side given back while another run's side of the same partition is kept replaces it.
    """
    closing = [] if clean else side.detach()  # list[Consumer]
    side.used_at = time.monotonic()
    with _LOCK:
        older = _SIDES.pop(side.key, None)
        _SIDES[side.key] = side
        if older is not None:
            closing += older.detach()
        with_clients = [s for s in _SIDES.values() if s.consumer is not None or s.tail is not None]
        for evicted in with_clients[: max(0, len(with_clients) - MAX_KEPT)]:
            closing += evicted.detach()
        while len(_SIDES) > MAX_STATES:
            closing += _SIDES.popitem(last=False)[1].detach()
        closing += _detach_idle()
    close_clients(closing, deadlines)


def _detach_idle() -> list[Consumer]:
    """The clients of the sides unused for :data:`KEPT_IDLE_S` (under the lock)."""
    now, out = time.monotonic(), list[Consumer]()
    for side in _SIDES.values():
        if now - side.used_at > KEPT_IDLE_S:
            out += side.detach()
    return out


def _size(message: Message) -> int:
    return len(message.key() or b"") + len(message.value() or b"")


#: The sides not in use, least recently given back first.
_SIDES: OrderedDict[Key, KeptSide] = OrderedDict()
_LOCK = threading.Lock()


def _forget_in_child() -> None:
    """In a forked child: the parent's clients stay untouched (``process_clients.py``); the state stays."""
    for side in _SIDES.values():
        for client in side.detach():
            keep_inherited(client)


os.register_at_fork(after_in_child=_forget_in_child)
