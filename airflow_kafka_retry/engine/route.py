"""
Producing routed records and committing source offsets, atomically.

Transactional mode (default): one Kafka transaction per chunk of a partition holds the routed
records and the source offset commit (``send_offsets_to_transaction``); the transactional id is
deterministic per (tier group, topic, partition), so a retried or zombie run of the same partition
is fenced. Idempotent mode: an idempotent producer; offsets are committed only after every
routed record is acknowledged. Either way no offset is committed for a record without a home.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from airflow_kafka_retry.engine.call_watch import CallWatch
from airflow_kafka_retry.engine.clients import init_transactions

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.headers import Header
    from airflow_kafka_retry.policy.resolver import Destination

#: librdkafka timeout of each transaction call, unless the router is given another.
DEFAULT_CALL_TIMEOUT_S = 60.0


class RouteError(RuntimeError):
    """
    Routing or committing failed; nothing of the chunk was committed.

    ``transient`` says whether the cluster, not the input, failed it (None: the cause's Kafka error says).
    """

    transient: bool | None = None


#: Records a chunk writes beside its routed ones, made once their delivery reports are in (topic, key, value).
Bookkeeping = Callable[[Sequence["RoutedRecord"]], list[tuple[str, bytes, bytes | None]]]


class FencedError(RouteError):
    """Another run of the same partition took over this transactional id."""


@dataclass
class RoutedRecord:
    """A failed source record, its destination and the headers it is produced with."""

    source: Message
    destination: Destination
    headers: list[Header]
    exception: str  # class path of the failure, for summaries
    delivered_partition: int | None = None
    delivered_offset: int | None = None


@dataclass
class Router:
    """
    Produces routed records and commits the source partition's offset.

    :param producer: transactional (``transactional.id`` set) or idempotent producer.
    :param consumer: the consumer that read the source partition (its group commits).
    :param partition_counts: partition count of every destination topic; a record whose source
        partition does not exist at the destination is partitioned by the producer (as Spring does).
    :param watch: the engine's deadlines for the blocking calls (``engine/call_watch.py``).
    :param timeout_s: the timeout handed to each blocking call.
    :param transactional_id: the producer's (named in messages).
    """

    producer: Producer
    consumer: Consumer
    transactional: bool
    partition_counts: Mapping[str, int]
    watch: CallWatch = field(default_factory=lambda: CallWatch("router"))
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    transactional_id: str | None = None
    _ready: bool = field(default=False, init=False)

    @property
    def _txn(self) -> str:
        return f"the transaction coordinator of transactional id {self.transactional_id!r}"

    def start(self) -> None:
        """Initialise transactions: aborts whatever a previous run with this id left open (fencing it)."""
        if self.transactional and not self._ready:
            timeout = self.watch.timeout(self.timeout_s)
            try:
                with self.watch.call("init_transactions", timeout, self._txn):
                    init_transactions(self.producer, timeout, topic=min(self.partition_counts, default=None))
            except KafkaException as exc:
                raise RouteError(f"cannot initialise transactions: {exc.args[0]}") from exc
        self._ready = True

    def commit(
        self, source: TopicPartition, routed: Sequence[RoutedRecord], bookkeeping: Bookkeeping | None = None
    ) -> None:
        """
        Produce ``routed`` and commit ``source.offset`` for ``source``'s partition in one step.

        ``bookkeeping(routed)``, once every routed record's delivery report is in (its offset known), gives
        records produced in the same step (the same transaction): a redelivery log's entries.
        """
        self.start()
        if self.transactional:
            self._commit_transactional(source, routed, bookkeeping)
        else:
            self._commit_idempotent(source, routed, bookkeeping)

    def _book(self, routed: Sequence[RoutedRecord], bookkeeping: Bookkeeping, failures: list[str]) -> None:
        """Wait for the routed records' delivery reports, then produce what ``bookkeeping`` makes of them."""
        self._flush(failures, "before their bookkeeping")
        for topic, key, value in bookkeeping(routed):

            def delivered(err: KafkaError | None, msg: Message, topic: str = topic) -> None:
                if err is not None:
                    failures.append(f"{topic}: {err.str()}")

            self.producer.produce(topic, key=key, value=value, on_delivery=delivered)
            self.producer.poll(0)

    def _flush(self, failures: list[str], when: str) -> None:
        """
        Wait for every delivery report; a :class:`RouteError` if one failed or is missing.

        It is transient when only acknowledgements are missing (the cluster, not the records).
        """
        timeout = self.watch.timeout(self.timeout_s)
        with self.watch.call("flush", timeout, "the destinations' partition leaders"):
            pending = self.producer.flush(timeout)
        if pending or failures:
            error = RouteError(
                f"{len(failures)} routed records failed and {pending} were not acknowledged {when} "
                f"({'; '.join(failures[:3])})"
            )
            error.transient = pending > 0
            raise error

    def _produce(self, routed: Sequence[RoutedRecord], failures: list[str]) -> None:
        for item in routed:
            destination = item.destination
            if destination.topic is None:
                raise RuntimeError("dropped records are not produced")
            partition = destination.partition
            if partition >= self.partition_counts.get(destination.topic, 0):
                partition = -1

            def delivered(err: KafkaError | None, msg: Message, item: RoutedRecord = item) -> None:
                if err is not None:
                    failures.append(f"{item.destination.topic}: {err.str()}")
                else:
                    item.delivered_partition, item.delivered_offset = msg.partition(), msg.offset()

            self.producer.produce(
                destination.topic,
                value=item.source.value(),
                key=item.source.key(),
                # the stubs' List is invariant; a list of (str, bytes | None) is what produce() takes
                headers=item.headers,  # type: ignore[arg-type]
                partition=partition,
                on_delivery=delivered,
            )
            self.producer.poll(0)

    def _commit_transactional(
        self, source: TopicPartition, routed: Sequence[RoutedRecord], bookkeeping: Bookkeeping | None
    ) -> None:
        failures: list[str] = []
        watch, timeout = self.watch, self.watch.timeout(self.timeout_s)
        try:
            self.producer.begin_transaction()
            self._produce(routed, failures)
            if bookkeeping is not None:
                try:
                    self._book(routed, bookkeeping, failures)
                except RouteError as exc:
                    with (
                        contextlib.suppress(KafkaException),
                        watch.call("abort_transaction", timeout, self._txn),
                    ):
                        self.producer.abort_transaction(timeout)
                    where = f"{source.topic}[{source.partition}] up to offset {source.offset}"
                    aborted = RouteError(f"{where}: {exc}; the transaction was aborted")
                    aborted.transient = exc.transient
                    raise aborted from exc
            with watch.call("send_offsets_to_transaction", timeout, f"{self._txn} and the group coordinator"):
                self.producer.send_offsets_to_transaction(
                    [source], self.consumer.consumer_group_metadata(), timeout
                )
            with watch.call("commit_transaction", timeout, f"{self._txn} and the destinations' leaders"):
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
                with contextlib.suppress(KafkaException), watch.call("abort_transaction", timeout, self._txn):
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
        self, source: TopicPartition, routed: Sequence[RoutedRecord], bookkeeping: Bookkeeping | None
    ) -> None:
        failures: list[str] = []
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
        timeout = self.watch.timeout(self.timeout_s)
        try:
            with self.watch.call("commit", timeout, "the group coordinator"):
                self.consumer.commit(offsets=[source], asynchronous=False)
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
