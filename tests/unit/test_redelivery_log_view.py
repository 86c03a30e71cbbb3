"""The redelivery log's bookkeeping in a process (`logs/redelivery_log.py`, `logs/compacted_log.py`)."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_kafka_retry.engine.drain.supervisor import broker_transient
from airflow_kafka_retry.engine.kafka.deadlines import AttemptAbandoned, CallDeadlines
from airflow_kafka_retry.engine.logs import log_topic
from airflow_kafka_retry.engine.logs.compacted_log import LogState, log_state
from airflow_kafka_retry.engine.logs.redelivery_log import (
    RETENTION_MS,
    RedeliveryLogError,
    RedeliveryLogView,
    ensure_redelivery_log,
)
from airflow_kafka_retry.policy.routing.share_redelivery import Redelivery, entry_key
from airflow_kafka_retry.sandbox.processes import free_port

NOW = 1_800_000_000_000
KEY_A, KEY_B, KEY_C = (entry_key(("orders", 0, n)) for n in (1, 2, 3))


class LogRecord:
    """A record of the log as the consumer gives it (key, value, offset, timestamp)."""

    def __init__(self, offset: int, key: bytes | None, value: bytes | None, timestamp: int = NOW) -> None:
        self._offset, self._key, self._value, self._timestamp = offset, key, value, timestamp

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)


def entry(attempt: int = 2) -> bytes:
    return Redelivery(attempt, ("orders", 0, 0), NOW).encode()


def read(state: LogState, *records: LogRecord) -> None:
    for record in records:
        state.add(record)  # type: ignore[arg-type]


def test_a_tombstone_deletes_its_entry_and_the_position_follows_what_was_read() -> None:
    state = LogState("orders-redelivery-log")
    read(state, LogRecord(0, KEY_A, entry()), LogRecord(1, KEY_B, entry()), LogRecord(2, KEY_A, None))
    assert list(state.entries) == [KEY_B]
    assert (state.position, state.read) == (3, 3)
    read(state, LogRecord(7, None, entry()), LogRecord(9, KEY_C, None))  # no key; a tombstone of nothing
    assert list(state.entries) == [KEY_B]
    assert (state.position, state.read) == (10, 5)  # offsets 3 to 8 were compacted away or markers


def test_entries_past_the_logs_retention_are_dropped_oldest_first() -> None:
    state = LogState("orders-redelivery-log")
    old, recent = NOW - RETENTION_MS - 1, NOW - RETENTION_MS + 1
    read(state, LogRecord(0, KEY_A, entry(), old), LogRecord(1, KEY_B, entry(), recent))
    read(state, LogRecord(2, KEY_C, entry(), old))  # out of time order: kept until those before it go
    assert state.expire(NOW, RETENTION_MS) == 1
    assert list(state.entries) == [KEY_B, KEY_C]
    assert state.expire(NOW + 2, RETENTION_MS) == 2
    assert state.entries == {}


def test_forget_starts_again_from_offset_0() -> None:
    state = LogState("orders-redelivery-log")
    read(state, LogRecord(4, KEY_A, entry()))
    state.forget()
    assert (state.entries, state.position) == ({}, 0)


def test_one_state_per_cluster_and_log_in_a_process() -> None:
    one = log_state({"bootstrap.servers": "a:9092"}, "x-redelivery-log")
    assert log_state({"bootstrap.servers": "a:9092", "client.id": "y"}, "x-redelivery-log") is one
    assert log_state({"bootstrap.servers": "b:9092"}, "x-redelivery-log") is not one
    assert log_state({"bootstrap.servers": "a:9092"}, "z-redelivery-log") is not one


def test_a_view_decodes_on_lookup_and_skips_an_entry_it_cannot_read() -> None:
    view = RedeliveryLogView({"bootstrap.servers": "unit-view:9092"}, "orders-unit-redelivery-log")
    read(view.state, LogRecord(0, KEY_A, entry(3)), LogRecord(1, KEY_B, b"{not json"))
    found = view.get(KEY_A)
    assert found is not None
    assert found.attempt == 3
    assert view.get(KEY_B) is None
    assert view.get(KEY_C) is None
    assert view.skipped == 1


def test_the_views_reads_and_the_logs_creation_go_through_the_runs_deadlines() -> None:
    """A stopped attempt's deadlines refuses the calls: they are made under it, never beside it."""
    deadlines = CallDeadlines("dlq[0]")
    deadlines.stop_now("test")
    view = RedeliveryLogView(
        {"bootstrap.servers": "127.0.0.1:1"}, "orders-redelivery-log", deadlines=deadlines
    )
    with pytest.raises(AttemptAbandoned):
        view.refresh()
    view.close()
    with pytest.raises(AttemptAbandoned):
        ensure_redelivery_log(
            {"bootstrap.servers": "127.0.0.1:1"}, "orders-redelivery-log", deadlines=deadlines
        )


def test_a_timeout_creating_the_log_is_transient_and_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def times_out(*args: object, **kwargs: object) -> bool:
        raise TimeoutError()  # what ensure_log_topic's future.result(timeout) raises

    monkeypatch.setattr(log_topic, "ensure_log_topic", times_out)
    with pytest.raises(RedeliveryLogError, match="orders-redelivery-log") as raised:
        ensure_redelivery_log({"bootstrap.servers": "127.0.0.1:1"}, "orders-redelivery-log", timeout=1.0)
    assert broker_transient(raised.value)


def _held_while(state: LogState, seconds: float, *, reading: bool) -> threading.Thread:
    """Another partition's refresh: holds the state ``seconds``, reading a record every 0.1 s or not."""
    state.lock.acquire()

    def hold() -> None:
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                time.sleep(0.1)
                if reading:
                    state.position += 1
        finally:
            state.lock.release()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread


def test_a_refresh_waits_for_another_partitions_read_while_it_goes_on() -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nobody listens: once its turn comes, the end cannot be read
    view = RedeliveryLogView({"bootstrap.servers": bootstrap}, "orders-wait-redelivery-log", timeout_s=0.5)
    holder = _held_while(view.state, 2.0, reading=True)
    try:
        with pytest.raises(RedeliveryLogError, match="cannot read the redelivery log's end"):
            view.refresh()  # it waited out the other read (2 s, four times its timeout) and took its turn
    finally:
        holder.join(10)
        view.close()


def test_a_refresh_gives_up_on_a_read_that_goes_nowhere_as_transient() -> None:
    view = RedeliveryLogView(
        {"bootstrap.servers": "127.0.0.1:1"}, "orders-stuck-redelivery-log", timeout_s=0.3
    )
    holder = _held_while(view.state, 3.0, reading=False)
    try:
        with pytest.raises(RedeliveryLogError, match="has read nothing of the redelivery log") as raised:
            view.refresh()
        assert broker_transient(raised.value)
    finally:
        holder.join(10)
        view.close()
