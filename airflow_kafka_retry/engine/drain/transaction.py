"""
Producing routed records and committing source offsets, atomically.

Transactional mode (default): one Kafka transaction per chunk of a partition holds the routed
records and the source offset commit (``send_offsets_to_transaction``); the transactional id is
deterministic per (tier group, topic, partition), so a retried or zombie run of the same partition
is fenced. Idempotent mode: an idempotent producer; offsets are committed only after every
routed record is acknowledged. Either way no offset is committed for a record without a home.

A record its destination refuses for good (too large for it, a topic the producer may not write or that is
gone, or a client error from ``produce`` itself) fails the step with an :class:`UndeliverableError` naming
each such record, once the transaction is aborted: the caller may route them elsewhere and commit the chunk
again (the share-group redelivery lane sends them to the DLT).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from airflow_kafka_retry.engine.kafka.clients import init_transactions
from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
from airflow_kafka_retry.engine.kafka.refusals import refusal

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.headers.codec import Header
    from airflow_kafka_retry.policy.routing.resolver import Destination

#: librdkafka timeout of each transaction call, unless the router is given another.
DEFAULT_CALL_TIMEOUT_S = 60.0


class RouteError(RuntimeError):
    """
    Routing or committing failed; nothing of the chunk was committed.

    ``transient`` says whether the cluster, not the input, failed it (None: the cause's Kafka error says).
    """

    transient: bool | None = None


class Booked(NamedTuple):
    """A record a chunk writes beside its routed ones: a partition of -1 leaves it to the partitioner."""

    dest_topic: str
    key: bytes
    value: bytes | None
    dest_partition: int = -1
    headers: list[Header] | None = None


#: Records a chunk writes beside its routed ones, once their delivery reports are in (Booked, 3-tuples).
Bookkeeping = Callable[[Sequence["RoutedRecord"]], Sequence[tuple[Any, ...]]]


class FencedError(RouteError):
    """Another run of the same partition took over this transactional id."""


@dataclass(frozen=True)
class Refused:
    """
    A routed record its destination refused for good, and why.

    :param whole_topic: the topic refuses every write (not writable, gone), not only this record.
    :param own: the refusal is the record's own for sure: it was produced alone (:attr:`RoutedRecord.alone`)
        or ``produce`` refused it. Else the broker may have refused the batch it was in (too large with it).
    """

    record: RoutedRecord
    reason: str
    whole_topic: bool
    own: bool


class UndeliverableError(RouteError):
    """
    Destinations refused some routed records for good; nothing of the chunk was committed.

    In transactional mode the transaction was aborted, so the chunk can be committed again with
    :attr:`refused` routed elsewhere.
    """

    transient = False

    def __init__(self, message: str, refused: Sequence[Refused]) -> None:
        super().__init__(message)
        self.refused = list(refused)


@dataclass
class RoutedRecord:
    """A failed source record, its destination and the headers it is produced with."""

    source: Message
    destination: Destination
    headers: list[Header]
    exception: str  # class path of the failure, for summaries
    delivered_partition: int | None = None
    delivered_offset: int | None = None
    alone: bool = False  # produced in a batch of its own (flushed before and after): a refusal is its own
    timestamp_ms: int | None = None  # the record's own timestamp (a held copy); None: the producer's clock


@dataclass
class ChunkTransaction:
    """
    Produces routed records and commits the source partition's offset.

    :param producer: transactional (``transactional.id`` set) or idempotent producer.
    :param consumer: the consumer that read the source partition (its group commits).
    :param partition_counts: partition count of every destination topic; a record whose source
        partition does not exist at the destination is partitioned by the producer (as Spring does).
    :param deadlines: the engine's deadlines for the blocking calls (``engine/kafka/deadlines.py``).
    :param timeout_s: the timeout handed to each blocking call.
    :param transactional_id: the producer's (named in messages).
    :param make_producer: a fresh producer of the same transactional id. After an
        :class:`UndeliverableError` the next commit starts with one (its ``init_transactions`` bumps the
        epoch): librdkafka's aborted producer fails the next transaction too, on the refused batch's sequence
        numbers ("Purged in queue", seen with Kafka 4.1.2).
    """

    producer: Producer
    consumer: Consumer
    transactional: bool
    partition_counts: Mapping[str, int]
    deadlines: CallDeadlines = field(default_factory=lambda: CallDeadlines("router"))
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    transactional_id: str | None = None
    make_producer: Callable[[], Producer] | None = None
    _ready: bool = field(default=False, init=False)
    _refused: list[Refused] = field(default_factory=list, init=False)  # of the current commit

    @property
    def _txn(self) -> str:
        return f"the transaction coordinator of transactional id {self.transactional_id!r}"

    def start(self) -> None:
        """Initialise transactions: aborts whatever a previous run with this id left open (fencing it)."""
        if self.transactional and not self._ready:
            timeout = self.deadlines.timeout(self.timeout_s)
            try:
                with self.deadlines.call("init_transactions", timeout, self._txn):
                    init_transactions(self.producer, timeout, topic=min(self.partition_counts, default=None))
            except KafkaException as exc:
                raise RouteError(f"cannot initialise transactions: {exc.args[0]}") from exc
        self._ready = True

    def commit(
        self,
        source: TopicPartition | Sequence[TopicPartition],
        routed: Sequence[RoutedRecord],
        bookkeeping: Bookkeeping | None = None,
    ) -> None:
        """
        Produce ``routed`` and commit ``source.offset`` for ``source``'s partition in one step.

        ``source`` may be several partitions (a keeper's main and hold partitions), committed together; the
        first names the step in messages. ``bookkeeping(routed)``, once every routed record's delivery report
        is in (its offset known), gives records produced in the same step (the same transaction): a
        redelivery log's entries, a keeper's state.
        """
        self.start()
        self._refused = []
        sources = [source] if isinstance(source, TopicPartition) else list(source)
        if not sources:
            raise ValueError("a chunk commits at least one source partition")
        if self.transactional:
            self._commit_transactional(sources, routed, bookkeeping)
        else:
            self._commit_idempotent(sources, routed, bookkeeping)

    def _book(self, routed: Sequence[RoutedRecord], bookkeeping: Bookkeeping, failures: list[str]) -> None:
        """Wait for the routed records' delivery reports, then produce what ``bookkeeping`` makes of them."""
        self._flush(failures, "before their bookkeeping")
        for item in bookkeeping(routed):
            booked = Booked(*item)

            def delivered(err: KafkaError | None, msg: Message, topic: str = booked.dest_topic) -> None:
                if err is not None:
                    failures.append(f"{topic}: {err.str()}")

            record: dict[str, Any] = {"key": booked.key, "value": booked.value, "on_delivery": delivered}
            if booked.dest_partition >= 0:
                record["partition"] = booked.dest_partition
            if booked.headers:
                record["headers"] = booked.headers
            self._produce_one(booked.dest_topic, record)
            self.producer.poll(0)

    def _flush(self, failures: list[str], when: str) -> None:
        """
        Wait for every delivery report; a :class:`RouteError` if one failed or is missing.

        It is transient when only acknowledgements are missing (the cluster, not the records).
        """
        timeout = self.deadlines.timeout(self.timeout_s)
        with self.deadlines.call("flush", timeout, "the destinations' partition leaders"):
            pending = self.producer.flush(timeout)
        if pending or failures:
            message = (
                f"{len(failures)} routed records failed and {pending} were not acknowledged {when} "
                f"({'; '.join(failures[:3])})"
            )
            if not pending and len(self._refused) == len(failures):  # each failure is a refused record
                raise UndeliverableError(message, self._refused)
            error = RouteError(message)
            error.transient = pending > 0
            raise error

    def _produce(self, routed: Sequence[RoutedRecord], failures: list[str]) -> None:
        """
        Produce each routed record; a record ``produce`` itself refuses is noted as refused, not raised.

        A full local queue is waited out (polling) until the router's timeout, then a transient RouteError.
        """
        for item in routed:
            destination = item.destination
            if destination.topic is None:
                raise RuntimeError("dropped records are not produced")
            item.delivered_partition = item.delivered_offset = None  # a chunk committed again
            partition = destination.partition
            if partition >= self.partition_counts.get(destination.topic, 0):
                partition = -1

            def delivered(err: KafkaError | None, msg: Message, item: RoutedRecord = item) -> None:
                if err is not None:
                    failures.append(f"{item.destination.topic}: {err.str()}")
                    whole_topic = refusal(err)
                    if whole_topic is not None:
                        self._refused.append(Refused(item, err.str(), whole_topic, item.alone))
                else:
                    item.delivered_partition, item.delivered_offset = msg.partition(), msg.offset()

            if item.alone:  # nothing else in its batch; a failure before it stops the chunk here
                self._flush(failures, "before a record produced alone")
            record = {
                "value": item.source.value(),
                "key": item.source.key(),
                "headers": item.headers,
                "partition": partition,
                "on_delivery": delivered,
            }
            if item.timestamp_ms is not None and item.timestamp_ms > 0:
                record["timestamp"] = item.timestamp_ms
            try:
                self._produce_one(destination.topic, record)
            except RouteError:  # the queue stayed full: the cluster's, not the record's
                raise
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                whole_topic = refusal(error)
                if whole_topic is None:
                    raise
                failures.append(f"{destination.topic}: {error.str()}")
                self._refused.append(Refused(item, error.str(), whole_topic, True))
            except (ValueError, TypeError, RuntimeError) as exc:  # librdkafka refused its arguments
                reason = f"{type(exc).__name__}: {str(exc)[:300]}"
                failures.append(f"{str(destination.topic)[:100]}: {reason}")
                self._refused.append(Refused(item, reason, False, True))
            if item.alone:
                self._flush(failures, "after a record produced alone")
            else:
                self.producer.poll(0)

    def _produce_one(self, topic: str, record: dict[str, Any]) -> None:
        """``produce`` one record, polling while the local queue is full (until the router's timeout)."""
        give_up = time.monotonic() + self.deadlines.timeout(self.timeout_s)
        while True:
            try:
                self.producer.produce(topic, **record)
                return
            except BufferError as exc:
                if time.monotonic() >= give_up:
                    error = RouteError(f"the producer's queue stayed full for {self.timeout_s:g}s: {exc}")
                    error.transient = True
                    raise error from exc
                self.producer.poll(0.1)

    def _commit_transactional(
        self, sources: list[TopicPartition], routed: Sequence[RoutedRecord], bookkeeping: Bookkeeping | None
    ) -> None:
        source, failures = sources[0], list[str]()
        deadlines, timeout = self.deadlines, self.deadlines.timeout(self.timeout_s)
        try:
            self.producer.begin_transaction()
            try:
                self._produce(routed, failures)
                if failures:  # records produce() refused: never commit without them
                    self._flush(failures, "before the commit")
                if bookkeeping is not None:
                    self._book(routed, bookkeeping, failures)
            except RouteError as exc:
                with (
                    contextlib.suppress(KafkaException),
                    deadlines.call("abort_transaction", timeout, self._txn),
                ):
                    self.producer.abort_transaction(timeout)
                where = f"{source.topic}[{source.partition}] up to offset {source.offset}"
                message = f"{where}: {exc}; the transaction was aborted"
                aborted = (
                    UndeliverableError(message, exc.refused)
                    if isinstance(exc, UndeliverableError)
                    else RouteError(message)
                )
                aborted.transient = exc.transient
                if isinstance(exc, UndeliverableError) and self.make_producer is not None:
                    self.producer, self._ready = self.make_producer(), False  # started by the next commit
                raise aborted from exc
            with deadlines.call(
                "send_offsets_to_transaction", timeout, f"{self._txn} and the group coordinator"
            ):
                self.producer.send_offsets_to_transaction(
                    sources, self.consumer.consumer_group_metadata(), timeout
                )
            with deadlines.call("commit_transaction", timeout, f"{self._txn} and the destinations' leaders"):
                self.producer.commit_transaction(timeout)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            where = f"{source.topic}[{source.partition}] up to offset {source.offset}"
            if error.code() == KafkaError._FATAL:
                error = self._fatal_cause(error)  # produce() says only "fatal error": ask the transaction why
            if error.code() in (
                KafkaError._FENCED,
                KafkaError.PRODUCER_FENCED,
                KafkaError.INVALID_PRODUCER_EPOCH,
            ):
                raise FencedError(
                    f"{where}: fenced by a newer run of the same partition; nothing committed"
                ) from exc
            if error.txn_requires_abort():
                # on failure the transaction times out on the broker; the next run's init fences it
                with (
                    contextlib.suppress(KafkaException),
                    deadlines.call("abort_transaction", timeout, self._txn),
                ):
                    self.producer.abort_transaction(timeout)
            delivery = f" (delivery failed: {'; '.join(failures[:3])})" if failures else ""
            delivery += _unacknowledged(routed)
            raise RouteError(f"{where}: transaction failed and was aborted: {error.str()}{delivery}") from exc
        if failures:  # cannot happen after a successful commit; kept as a guard, never ignored
            raise RouteError(f"delivery failed after commit: {'; '.join(failures)}")

    def _fatal_cause(self, error: KafkaError) -> KafkaError:
        """
        The error that made the producer fatal, e.g. ``_FENCED``.

        ``produce()`` raises a bare ``_FATAL``.
        """
        try:
            self.producer.abort_transaction(0.1)
        except KafkaException as exc:
            return exc.args[0]
        return error

    def _commit_idempotent(
        self, sources: list[TopicPartition], routed: Sequence[RoutedRecord], bookkeeping: Bookkeeping | None
    ) -> None:
        source, failures = sources[0], list[str]()
        where = f"{source.topic}[{source.partition}] up to offset {source.offset}"
        self._produce(routed, failures)
        try:
            if bookkeeping is not None:
                self._book(routed, bookkeeping, failures)
            self._flush(failures, "before the commit")
        except RouteError as exc:
            error = RouteError(f"{where}: {exc}; offsets not committed")
            error.transient = exc.transient
            raise error from exc
        timeout = self.deadlines.timeout(self.timeout_s)
        try:
            with self.deadlines.call("commit", timeout, "the group coordinator"):
                self.consumer.commit(offsets=sources, asynchronous=False)
        except KafkaException as exc:
            raise RouteError(
                f"{where}: routed records were delivered but the offset commit failed "
                f"({exc.args[0]}); the next run will route them again"
            ) from exc


def _unacknowledged(routed: Sequence[RoutedRecord]) -> str:
    """
    `` (not acknowledged: 18 to topic-a)``: where the records went that no delivery report answered.

    A flush that times out (a destination the client cannot see, say) fails the transaction before
    any delivery report names the topic; this names it.
    """
    waiting = Counter(str(item.destination.topic) for item in routed if item.delivered_offset is None)
    if not waiting:
        return ""
    return " (not acknowledged: " + ", ".join(f"{n} to {topic}" for topic, n in sorted(waiting.items())) + ")"
