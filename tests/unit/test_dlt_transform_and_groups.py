"""Transform loading and validation, inspect grouping, and replay targets (pure logic, no broker)."""

from __future__ import annotations

import dataclasses

import pytest

from airflow_kafka_retry.dlt.groups import bucket_of, format_table, group_records
from airflow_kafka_retry.dlt.replay_targets import (
    BY_KEY,
    check_target_spec,
    source_topic,
    source_topics,
    target_for,
)
from airflow_kafka_retry.dlt.transform import apply_transform, load_transform
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.topology.model import Topology

from tests.unit.test_dlt_filters import record

HOUR = 3_600_000
T0 = 1_795_428_000_000  # 2026-11-23T10:00Z
T = "tests.support.dlt_transforms"


# ---------------------------------------------------------------------- transform
def test_no_transform_keeps_the_record():
    rec = record()
    assert load_transform(None) is None
    assert apply_transform(None, None, rec) is rec


def test_transform_edits_or_leaves_out():
    rec = dataclasses.replace(record(), key=b"2", value=b'{"id": "2", "mode": "permanent"}')
    fixed = apply_transform(load_transform(f"{T}:fix_even_leave_out_odd"), "fix", rec)
    assert fixed.value == b'{"id": "2", "mode": "ok"}'
    assert fixed.headers[-1] == ("fixed-by", b"dlt-test")
    odd = dataclasses.replace(rec, key=b"3")
    assert apply_transform(load_transform(f"{T}:fix_even_leave_out_odd"), "fix", odd) is None


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("raise_on_second", "transform 'f' on orders-dlt[0]@1 raised ValueError: cannot fix this one"),
        ("wrong_type", "transform 'f' on orders-dlt[0]@1 returned str; it must return the record"),
        ("str_value", "returned a value of type str; it must be bytes or None"),
        ("move_offset", "changed offset: the DLT coordinates cannot be edited"),
    ],
)
def test_bad_transforms_name_the_record(function, message):
    with pytest.raises(ReplayError) as info:
        apply_transform(load_transform(f"{T}:{function}"), "f", record(offset=1))
    assert message in str(info.value)


def test_malformed_headers_are_refused():
    def bad_headers(rec):
        return dataclasses.replace(rec, headers=(("name", "not bytes"),))

    with pytest.raises(
        ReplayError, match=r"malformed headers; they must be a sequence of \(str, bytes \| None\)"
    ):
        apply_transform(bad_headers, "bad", record())


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("nomodule", "must be given as 'package.module:function'"),
        ("tests.support.no_such_module:f", "cannot import module 'tests.support.no_such_module'"),
        (f"{T}:missing", f"module '{T}' has no attribute 'missing'"),
    ],
)
def test_transforms_that_do_not_load(path, message):
    with pytest.raises(ReplayError, match=message):
        load_transform(path)


# ---------------------------------------------------------------------- grouping
def test_groups_by_exception_original_topic_and_hour_with_counts_and_samples():
    records = [record(exception="KeyError", offset=i, timestamp_ms=T0 + i * 60_000) for i in range(5)]
    records += [record(exception="KeyError", offset=10, timestamp_ms=T0 + HOUR + 1)]
    records += [record(exception="TypeError", offset=11, timestamp_ms=T0, original_topic="payments")]
    groups = group_records(records, replayed={(0, 1), (0, 10)}, samples=2)
    assert [(g.exception, g.original_topic, g.bucket, g.count, g.replayed) for g in groups] == [
        ("KeyError", "orders", "2026-11-23T10:00Z", 5, 1),  # biggest first, then oldest first
        ("TypeError", "payments", "2026-11-23T10:00Z", 1, 0),
        ("KeyError", "orders", "2026-11-23T11:00Z", 1, 1),
    ]
    first = groups[0]
    assert (first.oldest, first.newest) == ("2026-11-23T10:00:00Z", "2026-11-23T10:04:00Z")
    assert [(s["partition"], s["offset"]) for s in first.samples] == [(0, 0), (0, 1)]
    assert {
        (s["family"], s["original_topic"], s["original_partition"], s["original_offset"])
        for s in first.samples
    } == {("spring-retry-topic", "orders", 3, 42)}
    by_day = group_records(records, bucket="day")
    assert [(g.exception, g.bucket, g.count) for g in by_day] == [
        ("KeyError", "2026-11-23", 6),
        ("TypeError", "2026-11-23", 1),
    ]


def test_values_only_when_asked():
    [group] = group_records([record()], show_values=True)
    assert (group.samples[0]["key"], group.samples[0]["value"]) == ("k1", "{}")
    [group] = group_records([record()])
    assert "value" not in group.samples[0]
    assert "value" not in str(group.to_dict())


def test_table_lists_each_group():
    groups = group_records([record(exception="KeyError", cause="OSError"), record(exception=None, offset=1)])
    report = {
        "topic": "orders-dlt",
        "records": 2,
        "replayed": 0,
        "replay_log": "orders-dlt-replay-log",
        "bucket": "hour",
        "groups": [g.to_dict() for g in groups],
        "replays": [
            {"replay_id": "done-1", "moved": 3, "finished": True},
            {"replay_id": "killed-1", "moved": 2, "finished": False},
        ],
    }
    table = format_table(report).splitlines()
    assert table[-1] == (
        "unfinished replay killed-1 (2 moved): rerun it with --replay-id killed-1 and the same "
        "options to finish it"
    )
    assert not any("done-1" in line for line in table)
    assert table[0] == "orders-dlt: 2 record(s), 0 replayed (replay log orders-dlt-replay-log)"
    assert table[1].split()[:4] == ["COUNT", "REPLAYED", "EXCEPTION", "ORIGINAL"]
    assert "KeyError (cause OSError)" in table[2]
    assert table[3].split()[2] == "-"


def test_bucket_of():
    assert bucket_of(T0 + HOUR - 1, "hour") == "2026-11-23T10:00Z"
    assert bucket_of(T0, "day") == "2026-11-23"


# ---------------------------------------------------------------------- source and target topics
def topology(**kwargs) -> Topology:
    return Topology.from_mapping(
        {
            "topic": "orders",
            "group_id": "svc",
            "attempts": 3,
            "dlt_routing": {"-invalid-dlt": ["KeyError"]},
            **kwargs,
        }
    )


def test_source_topics_are_the_dlts_and_parking():
    t = topology()
    assert source_topics(t) == ["orders-dlt", "orders-invalid-dlt", "orders-parking"]
    assert source_topic(t, None) == "orders-dlt"
    assert source_topic(t, "parking") == "orders-parking"
    assert source_topic(t, "orders-invalid-dlt") == "orders-invalid-dlt"
    with pytest.raises(
        ReplayError,
        match="--dlt 'orders' is not a dead-letter or parking topic of <python> "
        r"\(orders-dlt, orders-invalid-dlt, orders-parking\)",
    ):
        source_topic(t, "orders")
    with pytest.raises(ReplayError, match="has no DLT"):
        source_topic(Topology.from_mapping({"topic": "o", "group_id": "g", "dlt_strategy": "no_dlt"}), None)


def test_targets():
    t = topology()
    rec = record(original_topic="orders")  # original partition 3
    assert target_for(t, "orders-dlt", None, rec) == target_for(t, "orders-dlt", "main", rec)
    default = target_for(t, "orders-dlt", None, rec)
    assert (default.topic, default.partition, default.attempt) == ("orders", 3, None)
    first = target_for(t, "orders-dlt", "first-tier", rec)
    assert (first.topic, first.attempt) == ("orders-retry-1", 2)
    assert target_for(t, "orders-dlt", "orders-retry-2", rec).attempt == 3
    assert (
        target_for(t, "orders-dlt", "elsewhere", rec, partition_counts={"elsewhere": 2}).partition == BY_KEY
    )
    assert target_for(t, "orders-dlt", "main", rec, key_changed=True).partition == BY_KEY
    with pytest.raises(ReplayError, match=r"orders-dlt\[0\]@0 carries no original-topic header"):
        target_for(t, "orders-dlt", None, record(original_topic=None))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("orders-dlt", "--to 'orders-dlt' is the topic being replayed"),
        ("orders-invalid-dlt", "--to 'orders-invalid-dlt' is a dead-letter topic"),
    ],
)
def test_impossible_targets(spec, message):
    with pytest.raises(ReplayError, match=message):
        check_target_spec(topology(), "orders-dlt", spec)


def test_first_tier_needs_a_retry_tier():
    with pytest.raises(ReplayError, match="has no retry tier"):
        check_target_spec(topology(attempts=1), "orders-dlt", "first-tier")
    check_target_spec(topology(attempts=1), "orders-dlt", "main")


def test_printable_escapes_what_would_act_on_a_terminal():
    from airflow_kafka_retry.dlt.groups import printable

    assert printable("a.b.Error") == "a.b.Error"
    assert printable("café Ünïcode ok") == "café Ünïcode ok"
    assert printable("X\x1b[31mY\x07\x00\t\r\n\x7f\x9b") == r"X\x1b[31mY\x07\x00\x09\x0d\x0a\x7f\x9b"
    assert printable("abc\u202edef\u2028") == r"abc\u202edef\u2028"
