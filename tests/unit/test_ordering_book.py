"""The pure rules of key order (policy/ordering): entries and marks as bytes, the order book, the layers."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.policy.ordering.book import PENDING, OrderBook, layers
from airflow_kafka_retry.policy.ordering.entries import (
    HELD,
    MARK,
    ORDER_HEADER,
    BlockedKey,
    Held,
    Location,
    Mark,
    OrderStateError,
    key_id,
    order_kind,
)


def kid_of(key: bytes) -> bytes:
    kid = key_id(key)
    assert kid is not None
    return kid


KID = kid_of(b"acct-42")
RETRY_1 = Location("orders-retry-1", 3, 17)
RETRY_2 = Location("orders-retry-2", 3, 5)
DLT = Location("orders-dlt", 3, 9)


def blocked_book(release_on: str = "dlt") -> OrderBook:
    book = OrderBook(release_on)  # type: ignore[arg-type]
    book.block(KID, main_offset=100, now_ms=1_000)
    book.place_head(KID, RETRY_1)
    book.hold(KID, main_offset=130, held_ms=2_000)
    book.place_held(KID, {130: 7})
    return book


def test_key_ids_name_any_key_in_16_bytes_and_none_for_a_null_key() -> None:
    assert key_id(None) is None
    long_binary = bytes(range(256)) * 4000  # a megabyte of binary key
    assert len(key_id(long_binary) or b"") == 16
    assert key_id(b"a") != key_id(b"b")


def test_a_state_entry_and_a_mark_round_trip_through_bytes() -> None:
    entry = BlockedKey(RETRY_1, (Held(7, 130, 2_000),), since_ms=1_000, in_dlt=True, head_main_offset=100)
    assert BlockedKey.from_bytes(entry.to_bytes(), "orders-order-state[3]@0") == entry
    mark = Mark(KID, "moved", RETRY_1, RETRY_2, ms=5)
    assert Mark.from_record(KID, mark.to_bytes(), "orders-hold[3]@1") == mark
    release = Mark(KID, "release", None, by="ops", reason="fixed by hand")
    assert Mark.from_record(KID, release.to_bytes(), "orders-hold[3]@2") == release


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        (KID, b"not json", "orders-hold[3]@4: the mark is not JSON"),
        (KID, b'{"v": 2, "kind": "moved"}', "not a version-1 object"),
        (KID, b'{"v": 1, "kind": "teleported", "at": ["t", 0, 1]}', "kind must be one of"),
        (KID, b'{"v": 1, "kind": "moved", "at": ["t", 0, 1]}', "a moved mark needs to"),
        (KID, b'{"v": 1, "kind": "processed"}', "a processed mark needs at"),
        (KID, b'{"v": 1, "kind": "processed", "at": ["t", -1, 1]}', "at must be [topic, partition, offset]"),
        (b"short", b'{"v": 1, "kind": "release"}', "16-byte key id"),
    ],
)
def test_a_mark_that_is_not_ours_is_refused_naming_where_it_was_read(
    key: bytes, value: bytes, problem: str
) -> None:
    with pytest.raises(OrderStateError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        Mark.from_record(key, value, "orders-hold[3]@4")


def test_a_state_entry_that_is_not_ours_names_its_coordinates() -> None:
    with pytest.raises(OrderStateError, match=r"orders-order-state\[1\]@9: held must be"):
        BlockedKey.from_bytes(b'{"v":1,"head":["t",0,1],"held":[[1,2]]}', "orders-order-state[1]@9")


def test_only_the_engines_header_says_what_a_hold_record_is() -> None:
    assert order_kind([("x", b"1"), (ORDER_HEADER, HELD)]) == HELD
    assert order_kind([(ORDER_HEADER, MARK)]) == MARK
    assert order_kind(None) is None


def test_a_head_that_moves_keeps_its_key_blocked_and_one_that_ends_releases_its_held_records() -> None:
    book = blocked_book()
    assert book.blocked(KID)
    assert book.is_head(KID, RETRY_1)
    assert book.held_count() == 1
    assert book.apply(Mark(KID, "moved", RETRY_1, RETRY_2)).outcome == "moved"
    assert book.is_head(KID, RETRY_2)
    applied = book.apply(Mark(KID, "processed", RETRY_2))
    assert applied.outcome == "released"
    assert applied.held == (Held(7, 130, 2_000),)
    assert not book.blocked(KID)
    assert book.changes() == [(KID, None)]  # a tombstone: the key is free


def test_a_mark_that_does_not_name_the_head_releases_nothing() -> None:
    book = blocked_book()
    forged = Mark(KID, "processed", Location("orders-retry-1", 3, 99))
    applied = book.apply(forged)
    assert applied.outcome == "ignored"
    assert "orders-retry-1[3]@17" in (applied.why or "")
    assert book.blocked(KID)
    assert book.apply(Mark(kid_of(b"other"), "processed", RETRY_1)).outcome == "ignored"


def test_release_on_dlt_frees_the_key_and_release_on_replay_parks_it_until_released() -> None:
    assert blocked_book("dlt").apply(Mark(KID, "dlt", RETRY_1, DLT)).outcome == "released"
    book = blocked_book("replay")
    assert book.apply(Mark(KID, "dlt", RETRY_1, DLT)).outcome == "parked"
    assert book.entries[KID].in_dlt
    assert book.is_head(KID, DLT)
    stale = book.apply(Mark(KID, "release", RETRY_1, by="ops"))
    assert stale.outcome == "ignored"  # the operator saw an old head
    assert book.apply(Mark(KID, "release", None, by="ops")).outcome == "released"


def test_changes_refuse_a_head_or_held_copy_whose_offset_is_not_known_yet() -> None:
    book = OrderBook()
    book.block(KID, main_offset=100, now_ms=1)
    with pytest.raises(RuntimeError, match="no offset yet"):
        book.changes()
    book.place_head(KID, RETRY_1)
    book.hold(KID, main_offset=101, held_ms=2)
    assert book.held_of(KID)[0].hold_offset == PENDING
    with pytest.raises(RuntimeError, match="no offset yet"):
        book.changes()
    book.place_held(KID, {101: 3})
    [(kid, value)] = book.changes()
    assert kid == KID
    assert value is not None
    assert BlockedKey.from_bytes(value, "x").held == (Held(3, 101, 2),)
    assert book.changes() == []  # written once


def test_layers_keep_each_keys_order_and_never_put_two_records_of_a_key_in_one_layer() -> None:
    records = [(b"a", 1), (b"b", 1), (b"a", 2), (None, 1), (b"a", 3), (b"b", 2), (None, 2)]
    out = layers(records, lambda r: r[0])
    assert out == [[(b"a", 1), (b"b", 1), (None, 1), (None, 2)], [(b"a", 2), (b"b", 2)], [(b"a", 3)]]
    for layer in out:
        keys = [k for k, _ in layer if k is not None]
        assert len(keys) == len(set(keys))
