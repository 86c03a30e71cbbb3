"""The drain's fast paths give exactly what the plain ones give."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import threading

import pytest

from airflow_kafka_retry.engine.drain import gc_tuning
from airflow_kafka_retry.engine.drain.records import TierRecord, make_record, record_from_message
from airflow_kafka_retry.engine.local.engine import MAX_DEFAULT_PARALLELISM, default_parallelism
from airflow_kafka_retry.policy.headers import codec as H

ATT, DUE = H.ATTEMPTS, H.BACKOFF_TIMESTAMP
VALUES = [
    None,
    b"",
    b"\x03",
    b"\x00\x00\x00\x02",
    b"\x00\x00\x80\x00",
    b"\xff\xff\xff\xff",
    b"\x00\x00\x00",
    H.encode_big_integer(1_700_000_000_000),
    H.encode_big_integer(-5),
    b"\x01" * 9,
    b"\x7f" * 8,
]


def header_lists():
    names = [ATT, DUE, "other", H.ORIGINAL_TIMESTAMP]
    yield None
    yield []
    for n in (1, 2, 3):
        for combo in itertools.product(names, repeat=n):
            for values in itertools.islice(itertools.product(VALUES, repeat=n), 0, None, 7):
                yield list(zip(combo, values))
    yield [
        ("trace", b"x"),
        (ATT, b"\x00\x00\x00\x04"),
        (DUE, b"\x01\x02"),
        (ATT, b"\x02"),
    ]  # a later attempts wins
    yield [(ATT, b"\x00\x00\x00\x04"), (DUE, b"\x01\x02"), (DUE, None)]


def test_read_retry_state_matches_the_single_header_readers():
    checked = 0
    for headers in header_lists():
        expected = (H.read_attempts(headers), H.read_due_ms(headers))
        assert H.read_retry_state(headers) == expected, headers
        if headers is not None:
            assert H.read_retry_state(tuple(headers)) == expected, headers
        checked += 1
    assert checked > 500


@pytest.mark.parametrize(("now_ms", "horizon_ms"), [(0, 10), (1_700_000_000_000, 86_400_000), (-10, 0)])
def test_read_retry_state_applies_the_due_horizon_as_read_due_ms_does(now_ms, horizon_ms):
    for headers in header_lists():
        expected = (H.read_attempts(headers), H.read_due_ms(headers, now_ms=now_ms, horizon_ms=horizon_ms))
        assert H.read_retry_state(headers, now_ms=now_ms, horizon_ms=horizon_ms) == expected, headers


def test_decode_big_integer_long_fast_path_agrees_with_java_wrapping():
    for value in (0, 1, -1, 2**31, -(2**31), 2**63 - 1, -(2**63), 1_700_000_000_000):
        encoded = H.encode_big_integer(value)
        assert len(encoded) <= 8
        assert H.decode_big_integer_long(encoded) == value
    assert H.decode_big_integer_long(b"\x01" + b"\x00" * 8) == 0  # 2**64 wraps to 0, as longValue() does


class FakeMessage:
    def __init__(self, key, value, offset):
        self._key, self._value, self._offset = key, value, offset

    def key(self):
        return self._key

    def value(self):
        return self._value

    def topic(self):
        return "orders-retry-1"

    def partition(self):
        return 3

    def offset(self):
        return self._offset

    def timestamp(self):
        return 1, 1_700_000_000_000


@pytest.mark.parametrize("headers", [None, [], [("a", b"1"), (ATT, None)]])
def test_fast_records_equal_constructed_ones(headers):
    message = FakeMessage(b"k", b"v", 42)
    fast = record_from_message(message, headers, 2, 99, "orders-retry-1", 3)
    plain = TierRecord(
        key=b"k",
        value=b"v",
        headers=tuple(headers or ()),
        topic="orders-retry-1",
        partition=3,
        offset=42,
        timestamp_ms=1_700_000_000_000,
        timestamp_type=1,
        attempt=2,
        due_ms=99,
        raw_key=b"k",
        raw_value=b"v",
    )
    assert fast == plain
    assert hash(fast) == hash(plain)
    assert repr(fast) == repr(plain)
    assert isinstance(fast.headers, tuple)
    args = dataclasses.astuple(plain)
    assert make_record(*args) == plain
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.attempt = 3  # type: ignore[misc]
    assert dataclasses.replace(fast, attempt=5).attempt == 5


@pytest.mark.parametrize(
    ("partitions", "cores", "expected"),
    [
        (8, 2, 3),
        (8, 1, 2),
        (1, 8, 1),
        (2, 2, 2),
        (32, 16, MAX_DEFAULT_PARALLELISM),
        (0, 2, 1),
    ],
)
def test_default_parallelism(partitions, cores, expected):
    assert default_parallelism(partitions, cores) == expected


def test_drain_gc_raises_thresholds_and_restores_them_after_the_last_job():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        with gc_tuning.drain_gc():
            assert gc.get_threshold() == gc_tuning.DRAIN_THRESHOLDS
            with gc_tuning.drain_gc():  # a second partition job at the same time
                assert gc.get_threshold() == gc_tuning.DRAIN_THRESHOLDS
            assert gc.get_threshold() == gc_tuning.DRAIN_THRESHOLDS  # one job still running
        assert gc.get_threshold() == (700, 10, 10)
        gc.set_threshold(100_000, 50, 500)  # never lowered
        with gc_tuning.drain_gc():
            assert gc.get_threshold() == (100_000, 50, 500)
        assert gc.get_threshold() == (100_000, 50, 500)
    finally:
        gc.set_threshold(*before)


def test_drain_gc_from_many_threads_restores_the_thresholds():
    before = gc.get_threshold()
    barrier = threading.Barrier(6)

    def job():
        with gc_tuning.drain_gc():
            barrier.wait(5)

    threads = [threading.Thread(target=job) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert gc.get_threshold() == before


@pytest.mark.parametrize("kind", ["indexed", "bisected"])
def test_run_failures_reports_positions_of_failed_records_only(kind):
    from tests.unit.test_engine_batches import indexed_handler, make_records, poison_handler, runner

    records = make_records(37, start=100)
    poison = {103, 117, 118, 136}
    handler = indexed_handler(poison) if kind == "indexed" else poison_handler(poison)
    failures = runner(handler, batch_size=8).run_failures(records)
    assert [position for position, _ in failures] == sorted(o - 100 for o in poison)
    assert all(records[position] is outcome.record and outcome.failed for position, outcome in failures)
    # the same run through run() gives one outcome per record, failed exactly at those positions
    outcomes = runner(
        indexed_handler(poison) if kind == "indexed" else poison_handler(poison), batch_size=8
    ).run(records)
    assert [i for i, o in enumerate(outcomes) if o.failed] == [p for p, _ in failures]


def test_run_failures_keeps_records_recovered_in_place_with_their_tries():
    from tests.unit.test_engine_batches import make_records, runner

    records = make_records(5)
    seen: list[int] = []

    def flaky(batch):
        seen.append(len(batch))
        if len(seen) == 1:
            from airflow_kafka_retry.errors import BatchFailedError

            raise BatchFailedError(2, RuntimeError("once"))

    failures = runner(flaky, batch_size=5, in_place_attempts=1, max_attempts=10).run_failures(records)
    assert [(p, o.failed, o.tries) for p, o in failures] == [(2, False, 2)]
