"""
The broker capability checks on transactions: offset commits of concurrent transactions, offsets-only ones.

``concurrent_txn_offset_commits``: several transactional producers (one per source partition, as
the engine's parallel partition jobs are) commit offsets of one consumer group at the same time,
each transaction also writing a record to one shared output partition. After every round, once
every ``commit_transaction`` has returned, each partition's committed offset must be the one just
committed. On Tansu 0.6 it is not: a transactional offset commit whose records share a partition
with another producer's still-open transaction is held back (returned as committed, not stored)
until that transaction ends, and concurrent commits of such transactions occasionally lose an
update for good. The first round runs while another producer's transaction on the shared
partition is open, which shows the hold-back on every run; the later rounds stress the race.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from airflow_kafka_retry.engine.kafka.clients import init_transactions
from testkit.capability_checks import (
    delivered_offsets,
    probe_consumer,
    probe_producer,
)

log = logging.getLogger(__name__)


#: Concurrent transactional producers in the offset-commit check; each commits offsets of its own
#: partition (0 .. TXN_PRODUCERS - 1) and writes one record per transaction to partition TXN_PRODUCERS.
TXN_PRODUCERS = 4
#: At most this many rounds (one transaction per producer each) ...
_TXN_ROUNDS = 50
#: ... and no new round after this many seconds of rounds.
_TXN_ROUNDS_SECONDS = 1.0
#: How long a stale committed offset may take to turn into the committed one before it counts as lost.
#: librdkafka's ``committed()`` already waits out UNSTABLE_OFFSET_COMMIT (transaction markers not yet
#: written) on real Kafka; this is a further margin, spent only when something is wrong.
_TXN_SETTLE_SECONDS = 1.0


def check_concurrent_txn_offset_commits(bootstrap: str, topic: str, timeout: float) -> str | None:
    """
    Rounds of simultaneous transactions.

    In round ``n`` producer ``i`` commits offset ``n`` of partition ``i``.

    ``topic`` has ``TXN_PRODUCERS + 1`` partitions; every transaction also writes one record to the
    last one. Round 1 runs while one more transactional producer holds open a transaction that has
    written to that partition (it commits after the round is checked); later rounds run alone. After
    each round, once every producer's ``commit_transaction`` has returned, a separate client reads
    the group's committed offsets.
    """
    shared = TXN_PRODUCERS
    group = f"{topic}-group"
    # start/done: the producers and this thread; ready: the producers, so that they commit together
    start = threading.Barrier(TXN_PRODUCERS + 1, timeout=timeout)
    ready = threading.Barrier(TXN_PRODUCERS, timeout=timeout)
    done = threading.Barrier(TXN_PRODUCERS + 1, timeout=timeout)
    stop = threading.Event()
    current_round = [0]
    errors: list[BaseException] = []

    def producer_loop(index: int) -> None:
        producer: Producer | None = None
        consumer: Consumer | None = None
        in_txn = False
        try:
            producer = probe_producer(
                bootstrap, **{"transactional.id": f"{topic}-tx-{index}", "linger.ms": 0}
            )
            consumer = probe_consumer(
                bootstrap, **{"group.id": group}
            )  # never subscribes: supplies the group metadata
            init_transactions(producer, timeout)
            metadata = consumer.consumer_group_metadata()
            while True:
                start.wait()
                if stop.is_set():
                    return
                offset = current_round[0]
                producer.begin_transaction()
                in_txn = True
                producer.produce(topic, value=b"%d@%d" % (index, offset), partition=shared)
                producer.send_offsets_to_transaction(
                    [TopicPartition(topic, index, offset)], metadata, timeout
                )
                ready.wait()
                producer.commit_transaction(timeout)
                in_txn = False
                done.wait()
        except threading.BrokenBarrierError:
            pass  # the checking thread stopped the rounds, or another producer failed (and said why)
        except BaseException as exc:  # reported by the checking thread
            errors.append(exc)
        finally:
            for barrier in (start, ready, done):
                barrier.abort()  # nobody waits for a producer that has left
            if in_txn and producer is not None:
                try:
                    producer.abort_transaction(timeout)
                except KafkaException:
                    log.debug("could not abort the probe transaction of producer %s", index, exc_info=True)
            if consumer is not None:
                consumer.close()

    def wait(barrier: threading.Barrier, what: str) -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            if errors:
                raise errors[0] from None
            raise TimeoutError(
                f"{TXN_PRODUCERS} transactional producers did not {what} within {timeout:.0f}s"
            ) from None

    threads = [
        threading.Thread(target=producer_loop, args=(i,), name=f"caps-txn-{i}", daemon=True)
        for i in range(TXN_PRODUCERS)
    ]
    for thread in threads:
        thread.start()
    holder = probe_producer(bootstrap, **{"transactional.id": f"{topic}-tx-open", "linger.ms": 0})
    reader = probe_consumer(bootstrap, **{"group.id": group})
    holder_open = False
    try:
        init_transactions(holder, timeout)
        holder.begin_transaction()
        holder_open = True
        delivered_offsets(_produce_to(holder, topic, shared, b"open", timeout=timeout))
        rounds_until: float | None = None
        for offset in range(1, _TXN_ROUNDS + 1):
            current_round[0] = offset
            wait(start, "start a round")
            wait(done, "commit a round")
            stale = _stale_committed(reader, topic, dict.fromkeys(range(TXN_PRODUCERS), offset), timeout)
            if stale:
                p, committed, found = stale[0]
                when = (
                    "while another producer's transaction on the same output partition was open"
                    if holder_open
                    else f"(round {offset})"
                )
                return (
                    f"concurrent transactional offset commits to one group lose updates (partition {p} "
                    f"committed at {committed}, read back {_shown(found)}; {len(stale)} of {TXN_PRODUCERS} "
                    f"partitions stale after {TXN_PRODUCERS} producers committed at once {when})"
                )
            if holder_open:
                holder.commit_transaction(timeout)
                holder_open = False
                rounds_until = time.monotonic() + _TXN_ROUNDS_SECONDS
            elif rounds_until is not None and time.monotonic() >= rounds_until:
                break
        return None
    finally:
        stop.set()
        start.abort()  # releases the producers waiting for the next round
        for thread in threads:
            thread.join(timeout)
        if holder_open:
            try:
                holder.abort_transaction(timeout)
            except KafkaException:
                log.debug("could not abort the probe's open transaction", exc_info=True)
        reader.close()


def _produce_to(
    producer: Producer, topic: str, partition: int, value: bytes, *, timeout: float
) -> list[tuple[KafkaError | None, int]]:
    """Produce one record to ``partition`` and flush (inside or outside a transaction)."""
    results: list[tuple[KafkaError | None, int]] = [(None, -1)]

    def cb(err: KafkaError | None, msg: object) -> None:
        results[0] = (err, msg.offset() if err is None else -1)  # type: ignore[attr-defined]

    producer.produce(topic, value=value, partition=partition, on_delivery=cb)
    if producer.flush(timeout):
        raise TimeoutError(f"record to {topic}[{partition}] not delivered within {timeout:.0f}s")
    return results


def _stale_committed(
    reader: Consumer, topic: str, expected: Mapping[int, int], timeout: float
) -> list[tuple[int, int, int | None]]:
    """
    Partitions whose committed offset is still not the expected one after re-reading.

    ``[(partition, expected, found)]``, after ``_TXN_SETTLE_SECONDS`` of re-reading (``found`` is None when
    the read failed).
    """
    deadline = time.monotonic() + _TXN_SETTLE_SECONDS
    while True:
        error: KafkaException | None = None
        found: dict[int, int | None] = {}
        try:
            for tp in reader.committed([TopicPartition(topic, p) for p in expected], timeout=timeout):
                found[tp.partition] = tp.offset if tp.error is None else None
        except KafkaException as exc:
            error = exc
        stale = [
            (p, offset, found.get(p)) for p, offset in sorted(expected.items()) if found.get(p) != offset
        ]
        if not stale:
            return []
        if time.monotonic() >= deadline:
            if error is not None:
                raise error
            unreadable = [p for p, _, offset in stale if offset is None]
            if unreadable:  # an error measures nothing: not a lost update
                raise RuntimeError(f"committed offsets of {topic} partition(s) {unreadable} are unreadable")
            return stale
        time.sleep(0.05)


def _shown(offset: int | None) -> str:
    if offset is None:
        return "an error"
    return "no committed offset" if offset < 0 else str(offset)


def check_offsets_only_transactions(bootstrap: str, topic: str, timeout: float) -> str | None:
    producer = probe_producer(bootstrap, **{"transactional.id": f"{topic}-tx"})
    init_transactions(producer, timeout)
    group_member = probe_consumer(bootstrap)
    group = group_member.consumer_group_metadata()
    try:
        for offset, with_record in ((1, True), (2, False), (3, False)):
            producer.begin_transaction()
            if with_record:
                producer.produce(topic, value=b"x", partition=0)
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], group, timeout)
            producer.commit_transaction(timeout)
            stored = _committed_offset(group_member, topic, timeout)
            if stored != offset:
                kind = "with a record" if with_record else "with offsets only"
                return (
                    f"a transaction {kind} committed offset {offset} and returned success, but the group's "
                    f"committed offset reads back as {_shown(stored)}"
                )
        return None
    finally:
        group_member.close()


def _committed_offset(member: Consumer, topic: str, timeout: float) -> int:
    """The group's committed offset of partition 0 (negative: none); an error raises, never "missing"."""
    [tp] = member.committed([TopicPartition(topic, 0)], timeout=timeout)
    if tp.error is not None:
        raise KafkaException(tp.error)
    return tp.offset
