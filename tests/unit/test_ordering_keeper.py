"""The keeper lane's main-piece rules with the real runner, routing and order book, and no broker."""

from __future__ import annotations

from airflow_kafka_retry import BatchFailedError
from airflow_kafka_retry.engine.drain.batches import BatchRunner
from airflow_kafka_retry.engine.drain.chunk import ChunkWork
from airflow_kafka_retry.engine.drain.due_records import Chunk
from airflow_kafka_retry.engine.drain.failure_routing import FailureRouting
from airflow_kafka_retry.engine.drain.lanes import LaneRun
from airflow_kafka_retry.engine.drain.options import DrainOptions
from airflow_kafka_retry.engine.drain.ordering.checks import ordering_topics
from airflow_kafka_retry.engine.drain.ordering.keeper import KeeperLane
from airflow_kafka_retry.engine.drain.ordering.kept import KeptSide
from airflow_kafka_retry.engine.drain.summary import PartitionSummary
from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
from airflow_kafka_retry.policy.ordering.book import PENDING, OrderBook
from airflow_kafka_retry.policy.ordering.entries import HELD, ORDER_HEADER, BlockedKey, Location, key_id
from airflow_kafka_retry.policy.routing.resolver import Destination, DestinationResolver
from airflow_kafka_retry.policy.topology.model import Topology

TOPIC = "orders"


class Message:
    def __init__(self, key: bytes | None, value: bytes, offset: int, headers=None) -> None:
        self._key, self._value, self._offset, self._headers = key, value, offset, headers

    def key(self):
        return self._key

    def value(self):
        return self._value

    def headers(self):
        return self._headers

    def topic(self):
        return TOPIC

    def partition(self):
        return 0

    def offset(self):
        return self._offset

    def timestamp(self):
        return 1, 1_700_000_000_000


def keeper(fails: set[bytes], calls: list[list[bytes]]) -> KeeperLane:
    """A keeper of orders[0] whose handler fails the values in ``fails`` and notes each call's values."""
    topology = Topology.from_mapping(
        {"topic": TOPIC, "group_id": "svc", "attempts": 3, "ordering": "key"}, source="<test>"
    )

    def handler(records) -> None:
        calls.append([r.value for r in records])
        for i, record in enumerate(records):
            if record.value in fails:
                raise BatchFailedError(i, RuntimeError("no"))

    clock = lambda: 1_700_000_000_000
    lane = KeeperLane.__new__(KeeperLane)  # no broker: the state and hold reads are left out
    lane.run = LaneRun(
        topology=topology,
        tier=topology.tiers[0],
        partition=0,
        kafka_config={},
        options=DrainOptions(handler="tests:none"),
        routing=FailureRouting(topology, DestinationResolver(topology, clock=clock), clock),
        clock=clock,
        deadlines=CallDeadlines("orders[0]"),
        summary=PartitionSummary(TOPIC, 0, "svc"),
        runner=BatchRunner(handler, handler_name="h", batch_size=10),
        key_decoder=None,
        value_decoder=None,
    )
    lane.main, lane.p = TOPIC, 0
    lane.hold, lane.state = ordering_topics(topology)
    lane.to_hold = Destination("retry", lane.hold, 0, 1, 0, 0, "retryable")
    lane.book, lane._warned = OrderBook(), False
    lane.side = KeptSide(("<test>", lane.state, 0), {})
    lane._reset()
    return lane


def piece(messages: list[Message]) -> Chunk:
    n = len(messages)
    return Chunk(messages, [m.headers() for m in messages], [1] * n, [None] * n)  # type: ignore[arg-type]


def test_a_failure_holds_the_later_records_of_its_key_and_no_call_sees_a_key_twice():
    calls: list[list[bytes]] = []
    lane = keeper({b"a0"}, calls)
    forged = [(ORDER_HEADER, b"mark"), ("trace", b"t")]
    messages = [
        Message(b"a", b"a0", 10),
        Message(b"b", b"b0", 11),
        Message(b"a", b"a1", 12, forged),
        Message(None, b"n0", 13),
        Message(b"b", b"b1", 14),
        Message(b"a", b"a2", 15),
        Message(None, b"n1", 16),
    ]
    work = ChunkWork(0, 0)
    lane.handle(piece(messages), work)

    for call in calls:  # a call never holds two records of one key (the runner calls again after a failure)
        keys = [v[:1] for v in call if not v.startswith(b"n")]
        assert len(keys) == len(set(keys)), calls
    assert calls[0] == [b"a0", b"b0", b"n0", b"n1"]  # layer 0: the first of each key, and every null key
    assert calls[-1] == [b"b1"]  # layer 1: a1 waits behind a0, so only b1 runs
    assert not any(v in call for call in calls for v in (b"a1", b"a2"))
    assert (work.read, work.succeeded, work.held, len(work.routed)) == (7, 4, 2, 1)
    (head,) = work.routed
    assert head.source.value() == b"a0"
    assert head.destination.topic == lane.run.topology.tiers[1].topic
    copies = [copy for _, _, copy in lane.copies]
    assert [c.source.value() for c in copies] == [b"a1", b"a2"]
    assert all((c.destination.topic, c.destination.partition) == ("orders-hold", 0) for c in copies)
    assert copies[0].headers == [("trace", b"t"), (ORDER_HEADER, HELD)]  # a forged order header is not kept
    assert lane.book.blocked(key_id(b"a"))
    assert not lane.book.blocked(key_id(b"b"))

    head.delivered_partition, head.delivered_offset = 0, 5
    for offset, copy in enumerate(copies, 40):
        copy.delivered_partition, copy.delivered_offset = 0, offset
    booked = lane._bookkeeping([head, *copies])
    ((topic, kid, value, partition, _),) = booked
    assert (topic, kid, partition) == ("orders-order-state", key_id(b"a"), 0)
    entry = BlockedKey.from_bytes(value, "test")
    assert entry.head == Location(head.destination.topic, 0, 5)
    assert [(h.hold_offset, h.main_offset) for h in entry.held] == [(40, 12), (41, 15)]
    assert entry.head_main_offset == 10


def test_a_replayed_head_in_main_runs_and_marks_its_own_end():
    calls: list[list[bytes]] = []
    lane = keeper(set(), calls)
    kid = key_id(b"a")
    assert kid is not None
    lane.book.load(kid, BlockedKey(Location(TOPIC, 0, 20), since_ms=1, in_dlt=False))
    work = ChunkWork(0, 0)
    lane.handle(piece([Message(b"a", b"a0-replayed", 20), Message(b"a", b"a3", 21)]), work)
    assert calls == [[b"a0-replayed"]]
    assert work.held == 1  # a3 waits until the keeper reads the mark it wrote for the head
    (mark,) = lane.marks
    assert (mark.kind, mark.at) == ("processed", Location(TOPIC, 0, 20))
    assert lane.book.held_of(kid)[0].hold_offset == PENDING
