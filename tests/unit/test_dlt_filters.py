"""Replay filters: parsing and checking options, and matching records (both Spring header families)."""

from __future__ import annotations

import collections
import sys

import pytest

from airflow_kafka_retry.dlt.filters import ReplayFilter, loaded_class, parse_offsets, parse_time_ms
from airflow_kafka_retry.dlt.records import DltRecord
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.headers.codec import (
    DEAD_LETTER_NAMES,
    RETRY_TOPIC_NAMES,
    encode_int32,
    encode_int64,
)

NOW = 1_800_000_000_000


def record(
    *,
    exception: str | None = "ValueError",
    cause: str | None = None,
    original_topic: str | None = "orders",
    partition: int = 0,
    offset: int = 0,
    timestamp_ms: int = NOW,
    key: bytes | None = b"k1",
    names=RETRY_TOPIC_NAMES,
) -> DltRecord:
    headers = []
    if original_topic is not None:
        headers += [
            (names.original_topic, original_topic.encode()),
            (names.original_partition, encode_int32(3)),
            (names.original_offset, encode_int64(42)),
        ]
    if exception is not None:
        headers.append((names.exception_fqcn, exception.encode()))
    if cause is not None:
        headers.append((names.exception_cause_fqcn, cause.encode()))
    return DltRecord("orders-dlt", partition, offset, timestamp_ms, key, b"{}", tuple(headers))


def build(**kwargs) -> ReplayFilter:
    return ReplayFilter.build(now_ms=NOW, **kwargs)


def test_no_filter_selects_everything():
    assert build().matches(record())
    assert build().matches(record(exception=None, original_topic=None, key=None))


@pytest.mark.parametrize("names", [RETRY_TOPIC_NAMES, DEAD_LETTER_NAMES], ids=["retry_topic", "dead_letter"])
def test_exception_and_original_topic_are_read_from_either_header_family(names):
    rec = record(exception="KeyError", original_topic="payments", names=names)
    assert (rec.exception, rec.original.topic, rec.original.partition, rec.original.offset) == (
        "KeyError",
        "payments",
        3,
        42,
    )
    assert build(exception="KeyError").matches(rec)
    assert not build(exception="TypeError").matches(rec)
    assert build(original_topic="payments").matches(rec)
    assert not build(original_topic="orders").matches(rec)


def test_exception_filter_is_subclass_aware_where_loaded():
    # KeyError and IndexError are LookupErrors; json.JSONDecodeError is a ValueError
    assert build(exception="LookupError").matches(record(exception="KeyError"))
    assert build(exception="ValueError").matches(record(exception="json.JSONDecodeError"))
    assert not build(exception="LookupError").matches(record(exception="ValueError"))
    # not loaded here: compared by name only
    assert build(exception="myapp.errors.Invalid").matches(record(exception="myapp.errors.Invalid"))
    assert not build(exception="myapp.errors.Base").matches(record(exception="myapp.errors.Invalid"))


MARKER_MODULE = "tests.support.import_marker"


@pytest.fixture
def marker_not_loaded():
    sys.modules.pop(MARKER_MODULE, None)
    yield
    assert MARKER_MODULE not in sys.modules, f"a filter imported {MARKER_MODULE}"


def test_neither_the_filter_nor_a_records_exception_header_imports_anything(marker_not_loaded):
    wanted = f"{MARKER_MODULE}.MarkerError"
    selection = build(exception=wanted)
    assert selection.matches(record(exception=wanted)), "the same dotted name must match"
    assert not selection.matches(record(exception=f"{MARKER_MODULE}.OtherError"))
    # a header naming a class of a module that is not loaded: compared by name, never imported
    assert not build(exception="Exception").matches(record(exception=f"{MARKER_MODULE}.MarkerError"))
    assert not build(exception="LookupError").matches(record(exception="ValueError", cause=wanted))


def test_subclasses_match_once_the_classes_are_loaded(marker_not_loaded):
    import importlib

    module = importlib.import_module(MARKER_MODULE)  # loaded by the worker for its own reasons
    try:
        assert build(exception="Exception").matches(record(exception=f"{MARKER_MODULE}.MarkerError"))
        assert loaded_class(f"{MARKER_MODULE}.MarkerError") is module.MarkerError
        assert loaded_class(f"{MARKER_MODULE}.transform") is None, "a function is not a class"
        assert loaded_class("collections.OrderedDict") is collections.OrderedDict
        assert loaded_class("KeyError") is KeyError
        assert loaded_class("no_such_builtin") is None
    finally:
        sys.modules.pop(MARKER_MODULE, None)


def test_exception_filter_matches_the_cause_spring_wraps_listener_errors_in():
    wrapped = record(
        exception="org.springframework.kafka.listener.ListenerExecutionFailedException",
        cause="myapp.errors.Invalid",
    )
    assert build(exception="myapp.errors.Invalid").matches(wrapped)


def test_values_of_one_kind_or_and_kinds_and():
    f = build(exception="KeyError,TypeError", original_topic=["orders"], partition=["0,2"])
    assert f.exceptions == ("KeyError", "TypeError")
    assert f.partitions == (0, 2)
    assert f.matches(record(exception="TypeError", partition=2))
    assert not f.matches(record(exception="TypeError", partition=1))
    assert not f.matches(record(exception="TypeError", original_topic="payments"))


def test_time_key_partition_and_offsets():
    f = build(since=NOW - 10, until=str(NOW + 10), key=["k1", "k2"], offsets="5-7")
    assert f.matches(record(offset=5))
    assert f.matches(record(offset=7, key=b"k2"))
    assert not f.matches(record(offset=8))
    assert not f.matches(record(offset=4))
    assert not f.matches(record(offset=6, key=b"k3"))
    assert not f.matches(record(offset=6, key=None))
    assert not f.matches(record(offset=6, timestamp_ms=NOW - 11))
    assert not f.matches(record(offset=6, timestamp_ms=NOW + 11))
    assert build(offsets="5-").matches(record(offset=10**9))
    assert build(offsets="5").offsets == (5, 5)


def test_time_forms():
    assert parse_time_ms("2h", now_ms=NOW, option="--since") == NOW - 7_200_000
    assert parse_time_ms("2026-11-23T10:00", now_ms=NOW, option="--since") == 1_795_428_000_000
    assert parse_time_ms("2026-11-23T11:00+01:00", now_ms=NOW, option="--since") == 1_795_428_000_000
    assert parse_time_ms("1795428000000", now_ms=NOW, option="--since") == 1_795_428_000_000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"offsets": "7-5"}, "--offsets '7-5': offsets must be >= 0 and A <= B"),
        ({"offsets": "a-b"}, "--offsets 'a-b': expected A-B"),
        ({"since": "last tuesday"}, "--since 'last tuesday' is not a time"),
        ({"since": "1h", "until": "2h"}, "--since (1h) is later than --until (2h)"),
        (
            {"exception": "no spaces allowed"},
            "--exception 'no spaces allowed' is not a dotted exception class path",
        ),
        ({"partition": "x"}, "--partition 'x' is not a partition number"),
        ({"partition": -1}, "--partition -1 is not a partition number"),
        ({"limit": 0}, "--limit 0 must be a whole number >= 1"),
        ({"limit": "many"}, "--limit 'many' must be a whole number >= 1"),
    ],
)
def test_bad_filters_name_the_option(kwargs, message):
    with pytest.raises(ReplayError) as info:
        build(**kwargs)
    assert message in str(info.value)


def test_partitions_are_checked_against_the_topic():
    f = build(partition="1,5")
    with pytest.raises(ReplayError, match=r"--partition 5: orders-dlt has 2 partition\(s\) \(0..1\)"):
        f.check_partitions("orders-dlt", 2)
    assert build().chosen_partitions(3) == [0, 1, 2]
    assert build(partition=[2]).chosen_partitions(3) == [2]


def test_parse_offsets_forms():
    assert parse_offsets("3-9") == (3, 9)
    assert parse_offsets("3-") == (3, None)
    assert parse_offsets(4) == (4, 4)
