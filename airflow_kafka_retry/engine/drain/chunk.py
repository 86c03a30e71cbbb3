"""A chunk of a partition run in progress: its counts so far, and the failed records awaiting its commit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_kafka_retry.engine.drain.distribution import Distribution
from airflow_kafka_retry.engine.drain.summary import DeadLetter
from airflow_kafka_retry.engine.kafka.messages import offset_of, partition_of, topic_of

if TYPE_CHECKING:
    from confluent_kafka import Message

    from airflow_kafka_retry.engine.drain.batches import BatchStats
    from airflow_kafka_retry.engine.drain.summary import PartitionSummary
    from airflow_kafka_retry.engine.drain.transaction import RoutedRecord


@dataclass
class ChunkWork:
    """A chunk in progress: counts so far, and the failed records waiting for its commit."""

    calls_before: int  # the runner's counters when the chunk began
    extra_before: int
    read: int = 0
    succeeded: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    routed: list[RoutedRecord] = field(default_factory=list)
    dropped: list[DeadLetter] = field(default_factory=list)
    untrusted_replays: int = 0  # failed records whose replay headers the replay log does not confirm
    lateness_ms: Distribution = field(default_factory=Distribution)  # handled - due (records with a due time)
    handler_ms: Distribution = field(default_factory=Distribution)  # the runner times each call into this
    # ordering: key (engine/drain/ordering/): what the chunk did beside its main records
    side_work: bool = False  # a keeper read its hold topic: the chunk commits even with no main record
    again: bool = False  # the keeper wrote a mark for itself: another chunk reads it
    held: int = 0  # main records held behind their key's head
    released: int = 0  # held records handled
    marks_written: int = 0
    marks_ignored: int = 0

    def count_read(self, messages: Sequence[Message]) -> None:
        """The piece's records were read (each has its home in the chunk now)."""
        if self.first_offset is None:
            self.first_offset = offset_of(messages[0])
        self.last_offset = offset_of(messages[-1])
        self.read += len(messages)

    def count_into(self, s: PartitionSummary, stats: BatchStats, transactional: bool, cap: int) -> None:
        """Add this committed chunk to the partition's summary (``stats``: the runner's counters now)."""
        if s.first_offset is None:
            s.first_offset = self.first_offset
        if self.last_offset is not None:
            s.last_offset = self.last_offset
        s.held += self.held
        s.released += self.released
        s.marks_written += self.marks_written
        s.marks_ignored += self.marks_ignored
        s.drained += self.read
        s.succeeded += self.succeeded
        s.transactions += 1 if transactional else 0
        s.handler_calls += stats.handler_calls - self.calls_before
        s.extra_handler_calls += stats.extra_calls - self.extra_before
        s.lateness_ms.merge(self.lateness_ms)
        s.handler_ms.merge(self.handler_ms)
        for item in self.routed:
            dest = item.destination
            if dest.topic is None:
                raise RuntimeError("dropped records are not routed")
            s.count_route(dest.topic)
            if dest.action == "dlt":
                src = item.source
                s.count_dead_letter(
                    DeadLetter(
                        topic_of(src),
                        partition_of(src),
                        offset_of(src),
                        item.exception,
                        dest.reason,
                        dest.topic,
                        item.delivered_partition,
                        item.delivered_offset,
                    ),
                    cap,
                )
        for letter in self.dropped:
            s.dropped += 1
            s.count_dead_letter(letter, cap)
        s.untrusted_replays += self.untrusted_replays
