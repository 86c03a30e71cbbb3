"""Freezing a broker inside a chunk's routing (``tests/faults/test_broker_freeze.py``'s cases 1 and 2), and a
round of its ``init_transactions`` test (issue 48, item 7)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

import pytest

from airflow_kafka_retry.engine.drain.transaction import ChunkTransaction

from tests.support import ledger

FREEZE_S = 6.0  # longer than the cases' transaction timeout


@contextlib.contextmanager
def freeze_at(pid: int, point: str, *, on: int = 2) -> Iterator[list[str]]:
    """Patch the router: at the ``on``-th chunk of partition 0, SIGSTOP the process group ``pid`` leads (the
    broker: a JVM or Tansu) at ``point``, SIGCONT it ``FREEZE_S`` later (partitions may run in parallel: the
    count is partition 0's alone)."""
    original, original_commit = ChunkTransaction._produce, ChunkTransaction.commit
    seen, log, source = [0], [], threading.local()

    def commit(self, tp, routed, bookkeeping=None):
        source.partition = tp.partition
        return original_commit(self, tp, routed, bookkeeping)

    def produce(self, routed, failures):
        original(self, routed, failures)
        if getattr(source, "partition", None) != 0:
            return
        seen[0] += 1
        if seen[0] != on:
            return
        if point == "acknowledged":
            assert self.producer.flush(30) == 0, "routed records not acknowledged before the freeze"
        os.killpg(pid, signal.SIGSTOP)
        log.append(f"froze the broker at {point} of chunk {on} ({len(routed)} routed records)")
        threading.Timer(FREEZE_S, os.killpg, (pid, signal.SIGCONT)).start()

    ChunkTransaction._produce, ChunkTransaction.commit = produce, commit
    try:
        yield log
    finally:
        ChunkTransaction._produce, ChunkTransaction.commit = original, original_commit
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)


def fence_round(own_broker, config, consumer) -> None:
    """An attempt abandoned with its chunk open; the next one's ``init_transactions`` times out on the frozen
    coordinator; the one after it commits three chunks (no late producer-id answer fences it)."""
    import time
    import uuid

    from confluent_kafka import KafkaException, Producer, TopicPartition

    from airflow_kafka_retry.engine.kafka.clients import init_transactions, producer_config
    from airflow_kafka_retry.sandbox.scratch_topics import create_topics

    topic, txn_id = f"fence-{uuid.uuid4().hex[:12]}", f"akr-test/fence/{uuid.uuid4().hex[:8]}/0"
    create_topics(own_broker.bootstrap, [topic], 1)
    abandoned = Producer(producer_config(config, txn_id))  # an attempt abandoned with its chunk open
    init_transactions(abandoned, 30.0)
    abandoned.begin_transaction()
    abandoned.produce(topic, b"never committed")
    assert abandoned.flush(30) == 0

    def router(timeout_s: float) -> ChunkTransaction:
        producer = Producer(producer_config(config, txn_id))
        return ChunkTransaction(
            producer, consumer, True, {topic: 1}, timeout_s=timeout_s, transactional_id=txn_id
        )

    # the next attempt, kept (a failed attempt's error keeps its frames); its init times out on the frozen
    # coordinator (no metadata asked first: the init itself waits)
    failed = Producer(producer_config(config, txn_id))
    os.killpg(own_broker.pid, signal.SIGSTOP)
    try:
        with pytest.raises(KafkaException, match="_TIMED_OUT"):
            init_transactions(failed, 1.0)
    finally:
        os.killpg(own_broker.pid, signal.SIGCONT)
    retry = router(60.0)  # the attempt after it, once the broker answers
    retry.start()
    for chunk in range(3):  # a late producer-id answer, were one still asked for, lands meanwhile
        time.sleep(1.0)
        retry.commit(TopicPartition(topic, 0, chunk + 1), [], lambda _, n=chunk: [(topic, b"k", b"%d" % n)])
    values = [m.value() for m in ledger.read_all(own_broker.bootstrap, topic)]
    assert values == [b"0", b"1", b"2"], values
    with pytest.raises(KafkaException):  # the abandoned attempt was fenced, as it should be
        abandoned.commit_transaction(10)
    del failed
