"""
The marking lane: a retry tier's or a DLT's drain under ``ordering: key`` (``docs/ordering.md``).

It is the handling lane, plus a *mark* for every keyed record it gives a home, written to
``<topic>-hold[p]`` (``p``: the partition it read, never a header) in the transaction that routes it:
``processed`` (handled), ``dropped`` (no home by design), ``moved`` (to the next tier) or ``dlt`` (to a DLT or
the parking topic), ``at`` the coordinates it read, ``to`` where the record was delivered. The keeper of
``p`` applies a mark only when ``at`` is the head its state names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow_kafka_retry.engine.drain.lanes import HandlingLane, LaneRun, route_failures, run_handler
from airflow_kafka_retry.engine.drain.ordering.checks import (
    hold_missing,
    ordering_topics,
    require_partitions,
    require_transactions,
)
from airflow_kafka_retry.engine.drain.transaction import Booked, RoutedRecord
from airflow_kafka_retry.engine.kafka.messages import offset_of
from airflow_kafka_retry.policy.ordering.entries import MARK, ORDER_HEADER, Location, Mark, MarkKind, key_id

if TYPE_CHECKING:
    from confluent_kafka import TopicPartition

    from airflow_kafka_retry.engine.drain.chunk import ChunkWork
    from airflow_kafka_retry.engine.drain.due_records import Chunk
    from airflow_kafka_retry.engine.drain.transaction import ChunkTransaction


class MarkingLane(HandlingLane):
    """A tier's lane under ``ordering: key``: handles as the handling lane does, and marks keyed records."""

    def __init__(self, run: LaneRun, router: ChunkTransaction) -> None:
        require_transactions(run)
        super().__init__(run, router)
        self.hold, _ = ordering_topics(run.topology)
        timeout = run.deadlines.timeout(min(10.0, run.options.call_timeout_s))
        what = {self.hold: hold_missing(self.hold, 0)}
        require_partitions(router.consumer, run, [run.tier.topic, self.hold], timeout, what)
        self.pending: list[tuple[bytes, Location, MarkKind, RoutedRecord | None]] = []

    def handle(self, piece: Chunk, work: ChunkWork) -> None:
        run, messages = self.run, piece.messages
        failures = run_handler(run, messages, piece.headers, piece.attempts, piece.due_ms, work)
        routed, _ = route_failures(run, failures, work)
        homes = {id(r.source): r for r in routed}
        failed = {id(message) for message, _, _ in failures}
        for message in messages:
            kid = key_id(message.key())
            if kid is None:
                continue
            at = Location(run.tier.topic, run.partition, offset_of(message))
            home = homes.get(id(message))
            if id(message) not in failed:
                self.pending.append((kid, at, "processed", None))
            elif home is None:
                self.pending.append((kid, at, "dropped", None))
            else:
                self.pending.append((kid, at, "dlt" if home.destination.action == "dlt" else "moved", home))
        work.count_read(messages)

    def commit(self, source: TopicPartition | None, work: ChunkWork) -> None:
        self.router.commit([] if source is None else source, work.routed, self._bookkeeping)
        work.marks_written += len(self.pending)
        self.pending = []

    def _bookkeeping(self, routed: Sequence[RoutedRecord]) -> list[Booked]:
        now, out = self.run.clock(), []
        for kid, at, kind, home in self.pending:
            mark = Mark(kid, kind, at, None if home is None else delivered_at(home), ms=now)
            out.append(Booked(self.hold, kid, mark.to_bytes(), self.run.partition, [(ORDER_HEADER, MARK)]))
        return out


def delivered_at(record: RoutedRecord) -> Location:
    """Where a routed record landed (its delivery report is in: the router flushed before its bookkeeping)."""
    topic, partition, offset = record.destination.topic, record.delivered_partition, record.delivered_offset
    if topic is None or partition is None or offset is None:
        raise RuntimeError("a routed record's delivery report is not in")
    return Location(topic, partition, offset)
