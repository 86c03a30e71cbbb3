"""
The keeper lane: the main topic's drain of partition *p* under ``ordering: key`` (``docs/ordering.md``).

It loads the order book of *p* from ``<topic>-order-state[p]`` once per run, from what its process kept of
*p* since its last run (``kept.py``: the clients, the state as read, the copies). Each chunk it first reads
the new records of ``<topic>-hold[p]`` (:meth:`KeeperLane.prepare`): each mark is applied to the book, and
the held records of the keys it releases are handled, in order; then the main records
(:meth:`KeeperLane.handle`): a record of a blocked key is copied to the hold topic, a keyed record that fails
blocks its key, and no handler call sees two records of one key (``policy/ordering/book.py``: ``layers``).
The routed records, held copies, marks, state entries and both offsets (main and hold) commit in one
transaction; a failed commit fails the run, whose next attempt reloads the state.

A replayed head lands in the main topic: a record there that *is* its key's head is handled as the head, and
so is a record held before the ``moved`` mark naming it came. A head handled so ends with a mark the keeper
writes for itself (read by its next chunk), so the state and the marks stay the one truth.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from confluent_kafka import TopicPartition

from airflow_kafka_retry.engine.drain.lanes import HandlingLane, LaneRun, route_failures, run_handler
from airflow_kafka_retry.engine.drain.ordering.checks import (
    forget_compacted,
    hold_missing,
    ordering_topics,
    require_compacted,
    require_partitions,
    require_transactions,
)
from airflow_kafka_retry.engine.drain.ordering.held import HeldMessage, own_headers
from airflow_kafka_retry.engine.drain.ordering.kept import give_back, take_side
from airflow_kafka_retry.engine.drain.ordering.marking import delivered_at
from airflow_kafka_retry.engine.drain.ordering.reading import HoldTail, SideReader
from airflow_kafka_retry.engine.drain.transaction import Booked, RoutedRecord
from airflow_kafka_retry.engine.kafka.clients import consumer_config
from airflow_kafka_retry.engine.kafka.messages import headers_of, offset_of
from airflow_kafka_retry.policy.ordering.book import layers
from airflow_kafka_retry.policy.ordering.entries import (
    HELD,
    MARK,
    ORDER_HEADER,
    Held,
    Location,
    Mark,
    MarkKind,
    key_id,
    order_kind,
)
from airflow_kafka_retry.policy.routing.resolver import Destination

if TYPE_CHECKING:
    from confluent_kafka import Message

    from airflow_kafka_retry.engine.drain.chunk import ChunkWork
    from airflow_kafka_retry.engine.drain.due_records import Chunk
    from airflow_kafka_retry.engine.drain.transaction import ChunkTransaction
    from airflow_kafka_retry.policy.headers.codec import Header

log = logging.getLogger(__name__)
MARK_HEADERS: list[Header] = [(ORDER_HEADER, MARK)]
_HELD_HEADER: Header = (ORDER_HEADER, HELD)
#: The side consumer's longest wait for an empty fetch (the drain's is 100 ms).
SIDE_FETCH_WAIT_MS = 10


@dataclass(slots=True)
class _Item:
    """A record the keeper gives a home: a main record, or a held one (``held``: where it waits)."""

    message: Message
    headers: list[Header] | None
    kid: bytes | None
    main_offset: int
    attempt: int = 1
    due_ms: int | None = None
    held: Held | None = None
    head: bool = False  # its key's head, back in the main topic (a replay)


class KeeperLane(HandlingLane):
    """The main topic's lane under ``ordering: key``: holds, releases, and keeps the order state."""

    def __init__(self, run: LaneRun, router: ChunkTransaction) -> None:
        require_transactions(run)
        super().__init__(run, router)
        topology, self.main, self.p = run.topology, run.tier.topic, run.partition
        self.hold, self.state = ordering_topics(topology)
        self.to_hold = Destination("retry", self.hold, self.p, 1, 0, 0, "retryable")  # a held copy's
        options, deadlines = run.options, run.deadlines
        timeout = deadlines.timeout(min(10.0, options.call_timeout_s))
        side = consumer_config(run.kafka_config, options.consumer_group or topology.group_id)
        # its reads (the state, the hold partition) are short and end at the partition's end, which an empty
        # fetch tells only after fetch.wait.max.ms: every run and every new mark pays it
        side["fetch.wait.max.ms"] = SIDE_FETCH_WAIT_MS
        self.side = take_side(side, self.state, self.p, deadlines)  # the process's, kept between runs
        self.reader = SideReader(
            self.side.reader(),
            self.p,
            deadlines=deadlines,
            call_timeout_s=options.call_timeout_s,
            idle_timeout_s=options.idle_timeout_s,
        )
        self.tail: HoldTail | None = None  # the hold partition followed, once the run read it to its end
        self.hold_last: int | None = None
        self.broken = False  # the run failed here: the side keeps only its state as read
        try:
            self._start(timeout)
        except BaseException:  # the run never gets this lane to close; its own error goes up
            self.broken = True
            with contextlib.suppress(Exception):
                self.close()
            raise
        self._warned = False
        self._reset()

    def _start(self, timeout: float) -> None:
        """The refusals of a run's start (``checks.py``), the order book, the hold partition's offset."""
        run, topology, side = self.run, self.run.topology, self.side
        tiers = [t.topic for t in (*topology.tiers, *topology.dlt_tiers)]
        state_fix = "create it (cleanup.policy=compact) with the main topic's partition count"
        known = self.router.partition_counts  # the drain's own counts: the tiers', the DLTs'
        consumer = self.router.consumer  # connected already: its metadata answers at once
        require_partitions(consumer, run, [*tiers, self.state], timeout, {self.state: state_fix}, known)
        require_compacted(run.kafka_config, self.state, run.deadlines, timeout)
        self.book, self.state_end = side.book(self.reader, self.state, topology.release_on)
        missing = hold_missing(self.hold, self.book.held_count())
        counts = require_partitions(consumer, run, [self.hold], timeout, {self.hold: missing}, known)
        self.router.partition_counts = {**self.router.partition_counts, **counts}  # held copies: hold[p]
        self.hold_next = self.reader.committed(self.hold)
        if side.tail is not None and side.hold_next == self.hold_next:  # this process's last run left it so
            self.tail = side.tail
            self.tail.deadlines = run.deadlines

    def _reset(self) -> None:
        self.hold_last = None  # the last hold record read in this chunk
        self.heads: list[tuple[bytes, RoutedRecord]] = []  # failed keyed records: their key's new head
        self.copies: list[tuple[bytes, int, RoutedRecord]] = []  # held copies: key id, main offset, copy
        self.marks: list[Mark] = []  # marks the keeper writes for itself (a head handled in main)
        self.entries_booked = 0  # state entries the chunk writes

    # ------------------------------------------------------------------ a chunk
    def prepare(self, work: ChunkWork) -> None:
        """Apply the new marks of the hold partition; handle the held records of the keys they release."""
        released: list[tuple[bytes, Held, bool]] = []  # key id, held record, whether it is the head
        mine = self.side.copies  # this process's own copies, which it reads back here: never a mark
        for message in self._new_hold_records():
            self.hold_last = offset = offset_of(message)
            if offset not in mine and order_kind(headers_of(message)) == MARK:
                released.extend(self._apply(message, work))
        if self.hold_last is None:
            return
        work.side_work = True
        kept = {
            h.hold_offset: self.side.take_copy(h.hold_offset, kid, h.main_offset) for kid, h, _ in released
        }
        copies = self.reader.held(self.hold, [offset for offset, m in kept.items() if m is None])
        items = []
        for kid, held, head in released:
            own = kept[held.hold_offset]  # copied by this process: the main record itself
            message = (
                own
                if own is not None
                else HeldMessage(copies[held.hold_offset], self.main, self.p, held.main_offset).as_message()
            )
            items.append(_Item(message, headers_of(message), kid, held.main_offset, held=held, head=head))
        self._run(items, work)

    def _new_hold_records(self) -> Sequence[Message]:
        """
        The hold partition's records since the last read: the run's first read goes to its end.

        Then the partition stays assigned to a consumer of its own, whose fetches run in the background: each
        chunk takes what they brought, at no wait. A mark they did not bring yet is read by the next chunk, or
        the next run (the watcher sees it past the committed offset). A process keeps that consumer between
        runs (``kept.py``): a run that finds it where the group's committed offset is reads nothing again.
        With no key blocked, nothing in the hold partition concerns the keeper (a mark of a key that is not
        blocked is skipped, and one of a key blocked later names a head not in flight yet): the read skips
        to the end.
        """
        if self.tail is not None:
            return self.tail.take()
        start = self.hold_next
        messages: list[Message] = []
        if not self.book.entries:
            end = self.reader.end(self.hold)
            if end > max(start, 0):
                self.hold_last = end - 1  # committed with the chunk, as if read
            start = max(start, end)
        else:
            messages, at_end = self.reader.tail(self.hold, start)
            start = offset_of(messages[-1]) + 1 if messages else at_end if at_end is not None else start
        self.tail = self.side.follow(self.hold, self.p, start, self.run.deadlines)
        return messages

    def _apply(self, message: Message, work: ChunkWork) -> list[tuple[bytes, Held, bool]]:
        where = f"{self.hold}[{self.p}]@{offset_of(message)}"
        mark = Mark.from_record(message.key(), message.value(), where)  # OrderStateError stops the keeper
        blocked = self.book.blocked(mark.key_id)
        applied = self.book.apply(mark)
        if applied.outcome == "ignored":
            work.marks_ignored += 1
            if blocked and not self._warned:  # "not blocked" is the common case: marks of unheld keys
                self._warned = True
                log.warning(
                    "%s: %s mark ignored: %s (further ones are counted only)", where, mark.kind, applied.why
                )
            return []
        if applied.outcome == "released":
            return [(mark.key_id, h, False) for h in applied.held]
        to = mark.to
        if applied.outcome == "moved" and to is not None and (to.topic, to.partition) == (self.main, self.p):
            head = self.book.unhold(mark.key_id, to.offset)  # the replayed head came before its mark
            if head is not None:
                return [(mark.key_id, head, True)]
        return []

    def handle(self, piece: Chunk, work: ChunkWork) -> None:
        """The main records of a piece: handled in layers, or held behind their key's head."""
        items, book, main, p = [], self.book, self.main, self.p
        for message, headers, attempt, due in zip(
            piece.messages, piece.headers, piece.attempts, piece.due_ms
        ):
            offset, kid = offset_of(message), key_id(message.key())
            head = book.blocked(kid) and book.is_head(kid, Location(main, p, offset))
            items.append(_Item(message, headers, kid, offset, attempt, due, head=head))
        self._run(items, work)
        work.count_read(piece.messages)

    def _run(self, items: Sequence[_Item], work: ChunkWork) -> None:
        now = self.run.clock()
        for layer in layers(items, lambda item: item.kid):
            ready = []
            for item in layer:
                if item.kid is not None and self.book.blocked(item.kid) and not item.head:
                    self._hold(item, item.kid, now, work)
                else:
                    ready.append(item)
            if not ready:
                continue
            failures = run_handler(
                self.run,
                [i.message for i in ready],
                [i.headers for i in ready],
                [i.attempt for i in ready],
                [i.due_ms for i in ready],
                work,
            )
            routed, _ = route_failures(self.run, failures, work)
            homes = {id(r.source): r for r in routed}
            failed = {id(message) for message, _, _ in failures}
            for item in ready:
                work.released += item.held is not None
                if item.kid is None:
                    continue
                if id(item.message) in failed:
                    self._failed(item, item.kid, homes.get(id(item.message)), now)
                elif item.head:  # the head ended: its key moves on once the keeper reads this mark
                    self._mark(item, "processed", now)

    def _failed(self, item: _Item, kid: bytes, home: RoutedRecord | None, now: int) -> None:
        """A keyed record failed: its key is blocked behind it while it is in flight."""
        entry = self.book.entries.get(kid) if item.head else None
        action = home.destination.action if home is not None else "drop"
        if action == "drop" or (action == "dlt" and self.book.release_on == "dlt"):
            if item.head:  # it ended here: the key moves on
                self._mark(item, "dropped" if action == "drop" else "processed", now)
            return
        held, since = (entry.held, entry.since_ms) if entry is not None else ((), None)
        if home is None:
            raise RuntimeError("a record routed to a topic has a home")
        self.book.block(kid, item.main_offset, now, held, since, in_dlt=action == "dlt")
        self.heads.append((kid, home))

    def _mark(self, item: _Item, kind: MarkKind, now: int) -> None:
        if item.kid is not None:
            self.marks.append(Mark(item.kid, kind, Location(self.main, self.p, item.main_offset), ms=now))

    def _hold(self, item: _Item, kid: bytes, now: int, work: ChunkWork) -> None:
        """``item`` waits behind its key's head: a main record is copied to the hold topic."""
        if item.held is not None:  # in the hold topic already: it waits again where it is
            self.book.hold(kid, item.main_offset, item.held.held_ms, item.held.hold_offset)
            return
        self.book.hold(kid, item.main_offset, now)
        headers = own_headers(item.headers) or []  # a new list, without a forged order header
        headers.append(_HELD_HEADER)
        _, timestamp = item.message.timestamp()
        copy = RoutedRecord(item.message, self.to_hold, headers, "", timestamp_ms=timestamp)
        self.copies.append((kid, item.main_offset, copy))
        work.held += 1

    # ------------------------------------------------------------------ the commit
    def commit(self, source: TopicPartition | None, work: ChunkWork) -> None:
        """The routed records, held copies, marks and state, with the main and hold offsets, in one step."""
        sources = [] if source is None else [source]
        if self.hold_last is not None:
            sources.append(TopicPartition(self.hold, self.p, self.hold_last + 1))
        routed = [*work.routed, *(copy for _, _, copy in self.copies)]
        self.router.commit(sources, routed, self._bookkeeping)
        self.state_end += self.entries_booked + (self.entries_booked > 0)  # and the commit marker
        work.marks_written += len(self.marks)
        work.again = bool(self.marks)
        if self.hold_last is not None:
            self.hold_next = self.hold_last + 1
        self._reset()

    def _bookkeeping(self, routed: Sequence[RoutedRecord]) -> list[Booked]:
        for kid, home in self.heads:
            self.book.place_head(kid, delivered_at(home))
        placed: dict[bytes, dict[int, int]] = {}
        keep = self.side.keep_copy
        for kid, main_offset, copy in self.copies:
            offset = copy.delivered_offset
            if offset is None:
                raise RuntimeError("a held copy's delivery report is not in")
            placed.setdefault(kid, {})[main_offset] = offset
            keep(offset, copy.source)
        for kid, offsets in placed.items():  # one new entry per key, however many it held
            self.book.place_held(kid, offsets)
        out = [Booked(self.hold, m.key_id, m.to_bytes(), self.p, MARK_HEADERS) for m in self.marks]
        entries = [Booked(self.state, kid, value, self.p) for kid, value in self.book.changes()]
        self.entries_booked = len(entries)
        return out + entries

    def close(self) -> None:
        """Give the process its side back: all of it if everything read was committed, else its state only."""
        run = self.run
        failed = self.broken or run.deadlines.abandoned is not None or run.summary.status == "failed"
        clean = not failed and self.hold_last is None  # every hold record taken is committed
        if clean and self.tail is not None:
            self.side.hold_next = self.hold_next
        if clean and not self.book.changed:  # the book as committed, and where the state partition ends
            self.side.final, self.side.final_end = dict(self.book.entries), self.state_end
        if not clean:
            forget_compacted(run.kafka_config, self.state)
        give_back(self.side, clean, run.deadlines)
