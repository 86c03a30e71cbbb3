"""
Reprocess one partition of one tier: read due records, call the handler, route failures, commit.

This is the unit of work of every engine: the local engine runs it in-process, Spark runs it
in an executor task. It gives every drained record exactly one home (processed, a later tier,
a DLT, or a deliberate drop) before committing the offsets past it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from airflow_kafka_retry.engine.drain.batches import BatchRunner
from airflow_kafka_retry.engine.drain.chunk import ChunkWork
from airflow_kafka_retry.engine.drain.due_records import PartitionReader
from airflow_kafka_retry.engine.drain.failure_routing import FailureRouting
from airflow_kafka_retry.engine.drain.gc_tuning import drain_gc
from airflow_kafka_retry.engine.drain.handler_timeouts import HandlerStuckError, TimedHandler
from airflow_kafka_retry.engine.drain.lanes import HANDLING, Lane, LaneRun
from airflow_kafka_retry.engine.drain.ordering.lanes import ordering_lane
from airflow_kafka_retry.engine.drain.parking_check import require_parking
from airflow_kafka_retry.engine.drain.redelivery import (
    REDELIVERING,
    redelivers,
)
from airflow_kafka_retry.engine.drain.replay_trust import ReplayLogCheck
from airflow_kafka_retry.engine.drain.summary import PartitionSummary
from airflow_kafka_retry.engine.drain.transaction import ChunkTransaction
from airflow_kafka_retry.engine.kafka.clients import (
    consumer_config,
    partition_counts,
    producer_config,
)
from airflow_kafka_retry.engine.kafka.deadlines import AttemptAbandoned, CallDeadlines
from airflow_kafka_retry.engine.kafka.loading import load_callable
from airflow_kafka_retry.policy.client_names import transactional_id
from airflow_kafka_retry.policy.headers.codec import MAX_BACKOFF_MS
from airflow_kafka_retry.policy.routing.resolver import DestinationResolver, wall_clock_ms

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.options import DrainOptions
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

log = logging.getLogger(__name__)


#: Records read and handed to the handler at a time within a chunk (rounded to whole batches).
_PIECE_RECORDS = 500


class PartitionJob:
    """
    Everything one partition run needs; :meth:`run` returns its summary and never raises.

    :param topology: the retry path.
    :param tier: the tier (or DLT) being drained.
    :param partition: the partition of ``tier.topic``.
    :param kafka_config: librdkafka configuration (bootstrap servers, security).
    :param options: handler and run options.
    :param cutoff_ms: records due later than this are left for a later run.
    :param clock: epoch milliseconds, used for due times of routed records and ``options.deadline_ms``.
    :param should_stop: asked before each chunk; a reason (e.g. ``"killed"``) stops the partition there,
        after everything finished so far was committed (``stop_reason == "stopped"``).
    :param on_chunk: called with the summary after each committed chunk (a worker process reports its
        progress with it, so that its engine knows what was committed if the worker dies).
    :param deadlines: the engine's deadlines on this attempt's client calls; a supervisor
        (``engine/drain/supervisor.py``) abandons the attempt when one is overdue.
    """

    def __init__(
        self,
        topology: Topology,
        tier: Tier,
        partition: int,
        kafka_config: Mapping[str, Any],
        options: DrainOptions,
        *,
        cutoff_ms: int,
        clock: Callable[[], int] = wall_clock_ms,
        should_stop: Callable[[], str | None] | None = None,
        on_chunk: Callable[[PartitionSummary], None] | None = None,
        deadlines: CallDeadlines | None = None,
    ) -> None:
        self.topology = topology
        self.tier = tier
        self.partition = partition
        self.kafka_config = kafka_config
        self.options = options
        self.cutoff_ms = cutoff_ms
        self.clock = clock
        self.should_stop = should_stop
        self.on_chunk = on_chunk
        self.group = options.consumer_group or topology.consumer_group(tier)
        self.deadlines = deadlines or CallDeadlines(self.where)
        self._replay_check = ReplayLogCheck(
            kafka_config, deadlines=self.deadlines, timeout_s=min(10.0, options.call_timeout_s)
        )
        self.resolver = DestinationResolver(topology, clock=clock, replay_known=self._replay_check)
        self.routing = FailureRouting(topology, self.resolver, clock)
        self.summary = PartitionSummary(tier.topic, partition, self.group)
        # on_due: redeliver takes the handler's place, ordering: key keeps or marks; the run never asks which
        # lane it runs (every engine builds a PartitionJob, so each picks its lane here)
        ordered = ordering_lane(topology, tier)
        self._lane_kind = ordered or (REDELIVERING if redelivers(topology, tier) else HANDLING)
        self._lane: Lane | None = None  # opened once the router has started
        self.failure: BaseException | None = None  # what failed the run, if anything
        self.settled = False  # the summary is final (only closing the clients may be left)
        self._started = time.monotonic()

    @property
    def where(self) -> str:
        return f"{self.tier.topic}[{self.partition}]"

    def run(self) -> PartitionSummary:
        self._started = time.monotonic()
        try:
            with drain_gc():
                self._run()
        except AttemptAbandoned:  # the supervisor already replaced this attempt's result
            return self.summary
        except (Exception, HandlerStuckError) as exc:  # reported in the summary; the run fails on it
            self._fail(exc)
        finally:
            self._replay_check.close()
            if self._lane is not None:
                self._lane.close()
        return self.summary

    def _fail(self, exc: BaseException) -> None:
        self.failure = exc
        self.summary.status = "failed"
        self.summary.error = f"{type(exc).__name__}: {exc}"
        self.summary.duration_s = round(time.monotonic() - self._started, 3)
        self.settled = True  # the supervisor retries a broker failure, or reports it
        log.error("%s: partition run failed: %s", self.where, self.summary.error)

    def stopped_summary(self, reason: str) -> PartitionSummary:
        """
        The summary of an attempt stopped at once (:class:`AbortNow`): what it committed, and why.

        A copy, as :meth:`abandoned_summary`.
        """
        summary = PartitionSummary.from_dict(self.summary.to_dict())
        summary.stop_reason, summary.stopped_by, summary.next_due_ms = "stopped", reason, None
        summary.duration_s = round(time.monotonic() - self._started, 3)
        return summary

    def abandoned_summary(self, error: str) -> PartitionSummary:
        """
        The summary of an attempt its supervisor abandoned: what it committed, failed with ``error``.

        A copy: the abandoned thread may still hold the original.
        """
        summary = PartitionSummary.from_dict(self.summary.to_dict())
        summary.status, summary.error = "failed", f"CallStuckError: {error}"
        summary.duration_s = round(time.monotonic() - self._started, 3)
        return summary

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        options = self.options
        handler = self._lane_kind.handler(self.topology, options)
        if options.handler_timeout_s is not None:
            handler = TimedHandler(handler, options.handler_timeout_s, name=options.handler)
        self._value_decoder = (
            load_callable(options.value_deserializer, what="value_deserializer")
            if options.value_deserializer
            else None
        )
        self._key_decoder = (
            load_callable(options.key_deserializer, what="key_deserializer")
            if options.key_deserializer
            else None
        )
        runner = BatchRunner(
            handler,
            handler_name=options.handler,
            batch_size=options.batch_size,
            max_extra_calls=options.max_extra_calls,
            in_place_attempts=options.in_place_attempts,
            in_place_backoff_ms=options.in_place_backoff_ms,
            max_attempts=None if self.tier.kind == "dlt" else self.topology.attempts,
            retryable=self.topology.classifier.is_retryable,
        )
        txn_id = (
            transactional_id(options.transactional_id_prefix, self.group, self.tier.topic, self.partition)
            if options.transactional
            else None
        )
        consumer = Consumer(consumer_config(self.kafka_config, self.group))
        try:
            producer = Producer(producer_config(self.kafka_config, txn_id))
            try:
                self._drain(runner, consumer, producer, txn_id)
                self.summary.duration_s = round(time.monotonic() - self._started, 3)
                self.settled = True
            except AttemptAbandoned:
                if txn_id is not None:  # a transaction this attempt left open ends now, not at its timeout
                    # (RuntimeError: a failed init_transactions closed the producer; nothing is open)
                    with contextlib.suppress(KafkaException, RuntimeError):
                        producer.abort_transaction(5.0)
                raise
            finally:
                # A transactional producer has nothing to flush: commit_transaction flushed what was
                # committed, and what is left belongs to a failed transaction (flushing a fenced one raises
                # and masks the run's own error). An idempotent one delivers what it still holds.
                if txn_id is None:
                    with (
                        self.deadlines.call("flush", 10.0, "the destinations' leaders"),
                        contextlib.suppress(KafkaException),  # never masks the run's own error
                    ):
                        producer.flush(10.0)
        finally:
            with self.deadlines.call("close", options.call_timeout_s, "the group coordinator"):
                consumer.close()

    def _drain(self, runner: BatchRunner, consumer: Consumer, producer: Producer, txn_id: str | None) -> None:
        options, deadlines = self.options, self.deadlines
        # the parking topic is looked up only when a chunk parks a record (see engine/drain/parking_check.py)
        parking = self.topology.parking_topic
        destinations = [t for t in self.topology.destinations_from(self.tier) if t != parking]
        topics = [self.tier.topic, *destinations]
        timeout = deadlines.timeout(min(10.0, options.call_timeout_s))
        with deadlines.call("list_topics", timeout * len(topics), "any broker (metadata)"):
            counts = partition_counts(consumer, topics, timeout, kafka_config=self.kafka_config)
        if self.partition >= counts[self.tier.topic]:
            raise ValueError(
                f"{self.tier.topic} has {counts[self.tier.topic]} partitions; "
                f"there is no partition {self.partition}"
            )
        router = ChunkTransaction(
            producer,
            consumer,
            options.transactional,
            counts,
            deadlines=deadlines,
            timeout_s=options.call_timeout_s,
            transactional_id=txn_id,
            make_producer=lambda: Producer(producer_config(self.kafka_config, txn_id)),
        )
        router.start()  # fence earlier runs of this partition before reading its committed offset
        self._lane = lane = self._lane_kind.open(self._lane_run(runner), router)
        # Spring believes a due time up to a day ahead; a tier with a longer delay needs that much more
        reader = PartitionReader(
            consumer,
            self.tier.topic,
            self.partition,
            cutoff_ms=self.cutoff_ms,
            idle_timeout_s=options.idle_timeout_s,
            due_horizon_ms=MAX_BACKOFF_MS + self.tier.delay_ms,
            deadlines=deadlines,
            call_timeout_s=options.call_timeout_s,
            clock=self.clock,  # the hold: a record in the pass but not yet due waits for it (never early)
        )
        self.summary.start_offset = reader.start_offset if reader.start_offset >= 0 else None
        left = options.max_records
        piece_size = options.batch_size * max(1, _PIECE_RECORDS // options.batch_size)
        while True:
            stopped = self._stop_requested()
            if stopped is not None:  # a chunk boundary: everything read so far is committed
                self._stopped(stopped, reader)
                break
            limit = options.chunk_size if left is None else min(options.chunk_size, left)
            # A chunk (one transaction) is read and handled a piece at a time: only its routed
            # records are kept until the commit, so memory is bounded by the piece, not the chunk.
            work = ChunkWork(runner.stats.handler_calls, runner.stats.extra_calls)
            runner.stats.handler_ms = work.handler_ms
            lane.prepare(work)  # a keeper's marks, even when the tier has nothing new
            while True:
                deadlines.check()  # an attempt stopped at once ends here, its chunk never committed
                piece = reader.read(min(piece_size, limit - work.read))
                self._replay_check.new_read()
                if piece.messages:
                    lane.handle(piece, work)
                if piece.stop != "limit" or work.read >= limit:
                    break
            if work.read or work.side_work:
                self._commit(work, runner, router, lane)
            self.summary.stop_reason = piece.stop
            self.summary.next_due_ms = piece.not_due_ms
            if left is not None:
                left -= work.read
            if (piece.stop != "limit" and not work.again) or left == 0:
                break

    def _stop_requested(self) -> str | None:
        if self.should_stop is not None:
            reason = self.should_stop()
            if reason is not None:
                return reason
        deadline = self.options.deadline_ms
        return "deadline" if deadline is not None and self.clock() >= deadline else None

    def _stopped(self, reason: str, reader: PartitionReader) -> None:
        s = self.summary
        s.stop_reason, s.stopped_by, s.next_due_ms = "stopped", reason, None
        position, end = reader.position, reader.end_offset
        s.left = max(0, end - position) if end is not None and end >= 0 and position >= 0 else None
        log.info(
            "%s[%s]: stopped (%s) at offset %s; the rest stays for the next run",
            self.tier.topic,
            self.partition,
            reason,
            s.committed_offset if s.committed_offset is not None else s.start_offset,
        )

    def _lane_run(self, runner: BatchRunner) -> LaneRun:
        return LaneRun(
            topology=self.topology,
            tier=self.tier,
            partition=self.partition,
            kafka_config=self.kafka_config,
            options=self.options,
            routing=self.routing,
            clock=self.clock,
            deadlines=self.deadlines,
            summary=self.summary,
            runner=runner,
            key_decoder=self._key_decoder,
            value_decoder=self._value_decoder,
        )

    def _commit(self, work: ChunkWork, runner: BatchRunner, router: ChunkTransaction, lane: Lane) -> None:
        """Produce the chunk's routed records and commit its offsets in one step, then count it."""
        if work.last_offset is None and not work.side_work:
            raise RuntimeError("a chunk is committed only once it has read records")
        where = f"{self.tier.topic}[{self.partition}]"
        require_parking(
            self.topology.parking_topic, where, work, router, self.deadlines, self.options.call_timeout_s
        )
        last = work.last_offset
        source = None if last is None else TopicPartition(self.tier.topic, self.partition, last + 1)
        lane.commit(source, work)  # a redelivering lane: with its log entries; a keeper: with its hold offset
        work.count_into(self.summary, runner.stats, self.options.transactional, self.options.dead_letter_cap)
        if last is not None:
            self.summary.committed_offset = last + 1
        if self.on_chunk is not None:
            self.on_chunk(self.summary)
