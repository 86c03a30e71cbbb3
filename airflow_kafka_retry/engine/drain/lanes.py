"""
A partition run's lane: what it does with each piece of records it reads, and how it commits a chunk.

:class:`~airflow_kafka_retry.engine.drain.partition.PartitionJob` reads, counts and reports the same way
for every tier; its lane, chosen once when the job is built (a :class:`LaneKind`), decides the rest:

* :data:`HANDLING` (every topology's tiers): the user's handler takes each record, and the failed ones are
  routed (a later tier, the DLT, or a deliberate drop);
* ``REDELIVERING`` (a share-group topology under ``on_due: redeliver``,
  :mod:`~airflow_kafka_retry.engine.drain.redelivery`): no handler, records go back to their queue.

The job never asks which lane it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from airflow_kafka_retry.engine.drain.failure_routing import decode_record
from airflow_kafka_retry.engine.drain.records import TierRecord, record_from_message
from airflow_kafka_retry.engine.kafka.loading import load_callable
from airflow_kafka_retry.errors import BatchFailedError, DeserializationError

if TYPE_CHECKING:
    from confluent_kafka import Message, TopicPartition

    from airflow_kafka_retry.engine.drain.batches import BatchRunner
    from airflow_kafka_retry.engine.drain.chunk import ChunkWork
    from airflow_kafka_retry.engine.drain.due_records import Chunk
    from airflow_kafka_retry.engine.drain.failure_routing import FailureRouting
    from airflow_kafka_retry.engine.drain.options import DrainOptions
    from airflow_kafka_retry.engine.drain.summary import DeadLetter, PartitionSummary
    from airflow_kafka_retry.engine.drain.transaction import ChunkTransaction, RoutedRecord
    from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
    from airflow_kafka_retry.policy.headers.codec import Header
    from airflow_kafka_retry.policy.topology.model import Tier, Topology


class Lane(Protocol):
    """What a partition run does with the records it reads, and how it commits them."""

    def prepare(self, work: ChunkWork) -> None:
        """Before a chunk's main records: side work (a keeper reads its marks); ``work.side_work`` says so."""

    def handle(self, piece: Chunk, work: ChunkWork) -> None:
        """Give each record of ``piece`` its home in ``work`` (counted, routed or dropped)."""

    def commit(self, source: TopicPartition | None, work: ChunkWork) -> None:
        """Produce the chunk's routed records and commit ``source`` in one step (None: only side work)."""

    def close(self) -> None:
        """Release what the lane opened (once, when the run ends)."""


@dataclass(frozen=True)
class LaneRun:
    """What a lane takes from its partition run."""

    topology: Topology
    tier: Tier
    partition: int
    kafka_config: Mapping[str, Any]
    options: DrainOptions
    routing: FailureRouting
    clock: Callable[[], int]
    deadlines: CallDeadlines
    summary: PartitionSummary
    runner: BatchRunner
    key_decoder: Callable[..., Any] | None
    value_decoder: Callable[..., Any] | None


@dataclass(frozen=True)
class LaneKind:
    """
    A lane strategy.

    :param handler: the callable the run's :class:`BatchRunner` calls (checking the options first).
    :param open: the lane of a run, once its router has started (fenced earlier runs of the partition).
    """

    handler: Callable[[Topology, DrainOptions], Callable[..., Any]]
    open: Callable[[LaneRun, ChunkTransaction], Lane]


class HandlingLane:
    """The user's handler takes each record of a piece; the failed ones are routed."""

    def __init__(self, run: LaneRun, router: ChunkTransaction) -> None:
        self.run = run
        self.router = router

    def prepare(self, work: ChunkWork) -> None:
        """Nothing before a chunk's main records."""

    def handle(self, piece: Chunk, work: ChunkWork) -> None:
        """Hand a piece of a chunk to the handler; resolve where its failed records go."""
        messages = piece.messages
        failures = run_handler(self.run, messages, piece.headers, piece.attempts, piece.due_ms, work)
        route_failures(self.run, failures, work)
        work.count_read(messages)

    def commit(self, source: TopicPartition | None, work: ChunkWork) -> None:
        self.router.commit([] if source is None else source, work.routed)

    def close(self) -> None:
        """Nothing to release: the run owns the clients."""


Failures = list[tuple["Message", BaseException, int]]


def run_handler(
    run: LaneRun,
    messages: Sequence[Message],
    headers: Sequence[list[Header] | None],
    attempts: Sequence[int],
    due_ms: Sequence[int | None],
    work: ChunkWork,
) -> Failures:
    """
    Hand ``messages`` to the handler (decoded as the run says); the failed ones, with error and attempt.

    Counts successes and lateness into ``work``; the caller routes the failures (:func:`route_failures`).
    """
    records: list[TierRecord] = []
    sources: Sequence[Message] = []  # sources[i] is the message records[i] was made from
    failures: Failures = []
    if run.key_decoder is None and run.value_decoder is None:
        topic, partition = run.tier.topic, run.partition
        records = [
            record_from_message(m, h, a, d, topic, partition)
            for m, h, a, d in zip(messages, headers, attempts, due_ms)
        ]
        sources = messages
    else:
        decoded: list[Message] = []
        for message, own, attempt, due in zip(messages, headers, attempts, due_ms):
            try:
                records.append(decode_record(message, own, attempt, due, run.key_decoder, run.value_decoder))
            except DeserializationError as exc:
                failures.append((message, exc, attempt))
                continue
            decoded.append(message)
        sources = decoded
    failed = 0
    for position, outcome in run.runner.run_failures(records):
        error = outcome.error
        if error is not None:
            if isinstance(error, BatchFailedError) and error.cause is not None:
                error = error.cause
            failures.append((sources[position], error, outcome.record.attempt + outcome.tries - 1))
            failed += 1
    handled = run.clock()
    for due in due_ms:
        if due is not None:
            work.lateness_ms.add(handled - due)
    work.succeeded += len(records) - failed
    return failures


def route_failures(
    run: LaneRun, failures: Failures, work: ChunkWork
) -> tuple[list[RoutedRecord], list[DeadLetter]]:
    """Each failed record's home, added to ``work`` (routed or dropped) and returned."""
    seen = run.summary.untrusted_replays + work.untrusted_replays
    routed, dropped, untrusted = run.routing.route(failures, seen)
    work.untrusted_replays += untrusted
    work.routed.extend(routed)
    work.dropped.extend(dropped)
    return routed, dropped


def user_handler(topology: Topology, options: DrainOptions) -> Callable[..., Any]:
    """The run's handler, ``options.handler`` (``package.module:function``)."""
    return load_callable(options.handler, what="handler")


HANDLING = LaneKind(handler=user_handler, open=HandlingLane)
