"""A lease un-assigns only what it assigned: librdkafka's incremental (un)assignment is all or nothing.

One partition not in the consumer's assignment fails a whole ``incremental_unassign`` (and one already in
it a whole ``incremental_assign``), changing nothing. A lease that claimed two partitions and assigned one
(a broker that did not answer in between) used to un-assign both on close: the call failed, the assigned
partition stayed assigned to nobody, and every later watch of it failed to assign it ("already part of the
current assignment"), so its records were never watched again. A real librdkafka consumer here; its
assignment needs no broker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import TopicPartition

from airflow_kafka_retry.engine.heads import shared_consumer

CONFIG = {"bootstrap.servers": "127.0.0.1:9"}  # nothing listens: assignment is the client's own state
FIRST, SECOND = ("orders-retry-1", 0), ("orders-retry-1", 1)


def _assignment(lease: shared_consumer.Lease) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in lease.consumer.assignment()}


@pytest.fixture
def first() -> Iterator[shared_consumer.Lease]:
    lease = shared_consumer.lease(CONFIG)
    keeper = shared_consumer.lease(CONFIG)  # keeps the consumer open when ``lease`` closes
    yield lease
    lease.close()
    keeper.close()


def test_a_lease_closed_with_a_claimed_partition_it_never_assigned_leaves_none_behind(first) -> None:
    assert first.claim([FIRST, SECOND])
    first.assign([TopicPartition(*FIRST, 5)])  # SECOND: its committed offset could not be read
    assert _assignment(first) == {FIRST}
    first.close()
    assert _assignment(first) == set(), "a partition stayed assigned with no lease owning it"

    again = shared_consumer.lease(CONFIG)
    try:
        assert again.sharing is first.sharing
        assert again.claim([FIRST, SECOND])
        again.assign([TopicPartition(*FIRST, 7), TopicPartition(*SECOND, 3)])
        assert {(tp.topic, tp.partition, tp.offset) for tp in again.consumer.assignment()} == {
            (*FIRST, 7),
            (*SECOND, 3),
        }
    finally:
        again.close()
    assert _assignment(first) == set()


def test_assigning_a_partition_the_lease_assigned_moves_it(first) -> None:
    assert first.claim([FIRST, SECOND])
    first.assign([TopicPartition(*FIRST, 5)])
    first.reassign([TopicPartition(*FIRST, 9), TopicPartition(*SECOND, 2)])  # SECOND was never assigned
    assert {(tp.topic, tp.partition, tp.offset) for tp in first.consumer.assignment()} == {
        (*FIRST, 9),
        (*SECOND, 2),
    }
    assert first.assigned == {FIRST, SECOND}
