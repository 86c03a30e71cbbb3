"""What a process keeps of a keeper partition between runs (``engine/drain/ordering/kept.py``), no broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_kafka_retry.engine.drain.ordering import kept
from airflow_kafka_retry.engine.drain.ordering.kept import KeptSide, give_back, take_side
from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
from airflow_kafka_retry.policy.ordering.entries import BlockedKey, Location, key_id

CONFIG = {"bootstrap.servers": "127.0.0.1:1", "group.id": "svc"}
DEADLINES = CallDeadlines("orders[0]")


class Client:
    """A consumer or a hold tail's consumer: only closed."""

    closed = 0

    def close(self) -> None:
        self.closed += 1


class Tail:
    def __init__(self) -> None:
        self.consumer = Client()


class Message:
    def __init__(self, value: bytes, offset: int = 0) -> None:
        self._value, self._offset = value, offset

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return self._value

    def offset(self) -> int:
        return self._offset


KID = key_id(b"k") or b""


@pytest.fixture(autouse=True)
def _no_sides_left() -> Iterator[None]:
    kept._SIDES.clear()
    yield
    kept._SIDES.clear()


def with_clients(side: KeptSide) -> tuple[Client, Tail]:
    consumer, tail = Client(), Tail()
    side.consumer, side.tail = consumer, tail  # type: ignore[assignment]
    return consumer, tail


def test_a_clean_run_gives_everything_back_and_the_next_run_takes_it():
    side = take_side(CONFIG, "orders-order-state", 0, DEADLINES)
    assert take_side(CONFIG, "orders-order-state", 0, DEADLINES) is not side  # one run at a time
    consumer, tail = with_clients(side)
    side.entries, side.state_next, side.hold_next = {b"k" * 16: BlockedKey(Location("r", 0, 1))}, 7, 42
    side.keep_copy(5, Message(b"v"))
    give_back(side, True, DEADLINES)
    again = take_side(CONFIG, "orders-order-state", 0, DEADLINES)
    assert again is side
    assert (again.state_next, again.hold_next, list(again.copies)) == (7, 42, [5])
    assert consumer.closed == tail.consumer.closed == 0
    assert take_side(CONFIG, "orders-order-state", 1, DEADLINES) is not side  # another partition


def test_a_failed_run_keeps_only_the_state_it_read():
    side = take_side(CONFIG, "orders-order-state", 0, DEADLINES)
    consumer, tail = with_clients(side)
    side.entries, side.state_next, side.hold_next = {b"k" * 16: BlockedKey(Location("r", 0, 1))}, 7, 42
    side.keep_copy(5, Message(b"v"))  # its transaction may never have committed
    give_back(side, False, DEADLINES)
    again = take_side(CONFIG, "orders-order-state", 0, DEADLINES)
    assert (again.state_next, len(again.entries)) == (7, 1)
    assert (again.consumer, again.tail, again.hold_next, dict(again.copies)) == (None, None, None, {})
    assert consumer.closed == tail.consumer.closed == 1


def test_copies_are_bounded_in_records_and_bytes_the_oldest_going_first(monkeypatch):
    monkeypatch.setattr(kept, "COPY_RECORDS", 3)
    monkeypatch.setattr(kept, "COPY_BYTES", 25)
    side = KeptSide(("c", "s", 0), CONFIG)
    for offset in range(5):
        side.keep_copy(offset, Message(b"12345"))  # 6 bytes with its key
    assert list(side.copies) == [2, 3, 4]
    side.keep_copy(9, Message(b"x" * 13))
    assert list(side.copies) == [4, 9]
    assert side.take_copy(4, KID, 0) is not None
    assert side.take_copy(4, KID, 0) is None  # taken: it leaves the side
    assert side.copy_bytes == 14


def test_a_kept_copy_counts_only_as_the_record_the_state_names():
    side = KeptSide(("c", "s", 0), CONFIG)
    side.keep_copy(5, Message(b"v", offset=130))
    side.keep_copy(6, Message(b"w", offset=131))
    assert side.take_copy(5, KID, 130) is not None
    assert side.take_copy(6, KID, 999) is None  # a hold topic made again: offset 6 is another record now
    assert side.take_copy(6, KID, 131) is None  # and it left the side
    side.keep_copy(7, Message(b"x", offset=132))
    assert side.take_copy(7, b"another key id..", 132) is None


def test_a_process_keeps_the_clients_of_the_last_sides_only_and_closes_idle_ones(monkeypatch):
    monkeypatch.setattr(kept, "MAX_KEPT", 2)
    sides = [take_side(CONFIG, "orders-order-state", p, DEADLINES) for p in range(3)]
    clients = [with_clients(side) for side in sides]
    for side in sides:
        give_back(side, True, DEADLINES)
    assert [c.closed for c, _ in clients] == [1, 0, 0]  # the least recently given back
    assert sides[0].consumer is None
    sides[1].used_at -= kept.KEPT_IDLE_S + 1
    take_side(CONFIG, "orders-order-state", 2, DEADLINES)
    assert [c.closed for c, _ in clients] == [1, 1, 0]
