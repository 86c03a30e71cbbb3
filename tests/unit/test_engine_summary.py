"""Unit tests for airflow_kafka_retry.engine.drain.summary (pure data: counts, caps, serialisation)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_kafka_retry.engine.drain.summary import (
    DEFAULT_COORDINATE_CAP,
    DeadLetter,
    PartitionSummary,
    RunSummary,
)

PAYLOAD_KEYS = {"key", "value", "payload", "headers", "raw_key", "raw_value", "record", "records"}


def all_keys(data: Any) -> Iterator[str]:
    if isinstance(data, dict):
        for k, v in data.items():
            yield k
            yield from all_keys(v)
    elif isinstance(data, list):
        for item in data:
            yield from all_keys(item)


def letter(offset: int, exception: str = "myapp.errors.InvalidOrder", *, dlt: bool = True) -> DeadLetter:
    if dlt:
        return DeadLetter(
            "orders-retry-1", 2, offset, exception, "not retryable", "orders-dlt", 2, 100 + offset
        )
    return DeadLetter("orders-retry-1", 2, offset, exception, "attempts exhausted")


def partition(number: int, **kwargs: Any) -> PartitionSummary:
    summary = PartitionSummary("orders-retry-1", number, "svc-orders-retry-1", **kwargs)
    return summary


def busy_partition(number: int) -> PartitionSummary:
    p = partition(
        number,
        start_offset=10,
        first_offset=10,
        last_offset=19,
        committed_offset=20,
        stop_reason="not_due",
        next_due_ms=1_700_000_123_000,
        drained=10,
        succeeded=6,
        dropped=1,
        handler_calls=4,
        extra_handler_calls=3,
        transactions=1,
        duration_s=0.25,
    )
    p.count_route("orders-retry-2")
    p.count_route("orders-retry-2")
    p.count_route("orders-dlt")
    p.count_dead_letter(letter(15), cap=100)
    p.count_dead_letter(letter(17, "TypeError", dlt=False), cap=100)
    return p


def run_summary(partitions: list[PartitionSummary]) -> RunSummary:
    return RunSummary(
        topology="orders",
        tier=1,
        topic="orders-retry-1",
        group="svc-orders-retry-1",
        engine="local",
        cutoff_ms=1_700_000_000_000,
        started_ms=1_700_000_001_000,
        finished_ms=1_700_000_003_456,
        partitions=partitions,
    )


# ----------------------------------------------------------------------------- PartitionSummary
def test_partition_defaults() -> None:
    p = partition(0)
    assert p.status == "ok"
    assert p.error is None
    assert p.drained == p.succeeded == p.dropped == 0
    assert p.routed == {}
    assert p.dead_lettered == {}
    assert p.dead_letters == []
    assert p.dead_letters_truncated == 0
    assert DEFAULT_COORDINATE_CAP == 100


def test_defaults_are_not_shared() -> None:
    a, b = partition(0), partition(1)
    a.count_route("x")
    a.count_dead_letter(letter(1), cap=10)
    assert b.routed == {}
    assert b.dead_letters == []
    assert b.dead_lettered == {}


def test_count_route() -> None:
    p = partition(0)
    for topic in ["t-retry-1", "t-dlt", "t-retry-1"]:
        p.count_route(topic)
    assert p.routed == {"t-retry-1": 2, "t-dlt": 1}


def test_dead_letter_cap_keeps_first_letters_and_counts_the_rest() -> None:
    p = partition(0)
    letters = [letter(i, "A" if i % 2 else "B") for i in range(7)]
    for item in letters:
        p.count_dead_letter(item, cap=3)
    assert p.dead_letters == letters[:3]
    assert p.dead_letters_truncated == 4
    assert p.dead_lettered == {"A": 3, "B": 4}  # counts are never capped
    assert sum(p.dead_lettered.values()) == len(p.dead_letters) + p.dead_letters_truncated


def test_dead_letter_cap_zero_keeps_no_coordinates() -> None:
    p = partition(0)
    for i in range(3):
        p.count_dead_letter(letter(i), cap=0)
    assert p.dead_letters == []
    assert p.dead_letters_truncated == 3
    assert p.dead_lettered == {"myapp.errors.InvalidOrder": 3}


def test_dead_letter_cap_exactly_reached_truncates_nothing() -> None:
    p = partition(0)
    for i in range(3):
        p.count_dead_letter(letter(i), cap=3)
    assert len(p.dead_letters) == 3
    assert p.dead_letters_truncated == 0


def test_partition_round_trip_through_json() -> None:
    p = busy_partition(3)
    p.status, p.error = "failed", "RouteError: fenced"
    data = json.loads(json.dumps(p.to_dict()))
    again = PartitionSummary.from_dict(data)
    assert again == p
    assert isinstance(again.dead_letters[0], DeadLetter)
    assert again.to_dict() == p.to_dict()


def test_partition_from_dict_does_not_mutate_its_input() -> None:
    data = busy_partition(0).to_dict()
    snapshot = json.loads(json.dumps(data))
    PartitionSummary.from_dict(data)
    assert data == snapshot
    assert isinstance(data["dead_letters"][0], dict)


def test_partition_from_dict_without_dead_letters() -> None:
    data = partition(1).to_dict()
    del data["dead_letters"]
    assert PartitionSummary.from_dict(data) == partition(1)


def test_dead_letter_has_coordinates_and_no_payload() -> None:
    data = busy_partition(0).to_dict()["dead_letters"]
    assert data[0] == {
        "topic": "orders-retry-1",
        "partition": 2,
        "offset": 15,
        "exception": "myapp.errors.InvalidOrder",
        "reason": "not retryable",
        "dlt_topic": "orders-dlt",
        "dlt_partition": 2,
        "dlt_offset": 115,
    }
    assert data[1]["dlt_topic"] is None
    assert data[1]["dlt_offset"] is None


# ----------------------------------------------------------------------------- RunSummary
def test_totals_over_partitions() -> None:
    a, b = busy_partition(0), busy_partition(1)
    b.count_route("orders-retry-2")
    b.count_route("a-first-topic")
    b.count_dead_letter(letter(18, "TypeError"), cap=1)  # capped coordinates still count
    summary = run_summary([a, b])
    totals = summary.totals()
    assert totals == {
        "drained": 20,
        "succeeded": 12,
        "routed": {"a-first-topic": 1, "orders-dlt": 2, "orders-retry-2": 5},
        "dead_lettered": {"TypeError": 3, "myapp.errors.InvalidOrder": 2},
        "dlt_topics": {"orders-dlt": 3},  # each partition's letter 15, and b's letter 18; drops have no DLT
        "dropped": 2,
        "failed_partitions": [],
    }
    assert list(totals["routed"]) == sorted(totals["routed"])
    assert list(totals["dead_lettered"]) == sorted(totals["dead_lettered"])


def test_empty_run_is_ok() -> None:
    summary = run_summary([])
    assert summary.ok
    assert summary.failed_partitions == []
    data = summary.to_dict()
    assert data["status"] == "ok"
    assert data["totals"] == {
        "drained": 0,
        "succeeded": 0,
        "routed": {},
        "dead_lettered": {},
        "dlt_topics": {},
        "dropped": 0,
        "failed_partitions": [],
    }
    assert data["partitions"] == []


def test_status_failed_when_a_partition_failed() -> None:
    good, bad = busy_partition(0), busy_partition(1)
    bad.status, bad.error = "failed", "KafkaConfigError: no bootstrap"
    summary = run_summary([good, bad])
    assert not summary.ok
    assert summary.failed_partitions == [bad]
    data = summary.to_dict()
    assert data["status"] == "failed"
    assert data["totals"]["failed_partitions"] == [1]
    assert data["partitions"][1]["error"] == "KafkaConfigError: no bootstrap"


def test_any_status_other_than_ok_is_a_failure() -> None:
    odd = partition(0, status="weird")
    assert run_summary([odd]).to_dict()["status"] == "failed"


def test_run_to_dict_shape() -> None:
    summary = run_summary([busy_partition(2), busy_partition(0), busy_partition(1)])
    data = summary.to_dict()
    assert list(data)[:1] == ["status"]
    assert {
        k: data[k]
        for k in ("topology", "tier", "topic", "group", "engine", "cutoff_ms", "started_ms", "finished_ms")
    } == {
        "topology": "orders",
        "tier": 1,
        "topic": "orders-retry-1",
        "group": "svc-orders-retry-1",
        "engine": "local",
        "cutoff_ms": 1_700_000_000_000,
        "started_ms": 1_700_000_001_000,
        "finished_ms": 1_700_000_003_456,
    }
    assert data["duration_s"] == 2.456
    assert [p["partition"] for p in data["partitions"]] == [0, 1, 2]  # sorted by partition


def test_run_summary_is_json_serialisable_without_payload_fields() -> None:
    summary = run_summary([busy_partition(0), busy_partition(1)])
    text = json.dumps(summary.to_dict())
    keys = set(all_keys(json.loads(text)))
    assert not keys & PAYLOAD_KEYS


def test_run_round_trip_through_json() -> None:
    summary = run_summary([busy_partition(0), busy_partition(1)])
    summary.partitions[1].status = "failed"
    data = json.loads(json.dumps(summary.to_dict()))
    again = RunSummary.from_dict(data)
    assert again == summary
    assert again.to_dict() == summary.to_dict()
    assert all(isinstance(p, PartitionSummary) for p in again.partitions)
    assert all(isinstance(d, DeadLetter) for p in again.partitions for d in p.dead_letters)


def test_run_round_trip_keeps_truncation() -> None:
    p = partition(0)
    for i in range(5):
        p.count_dead_letter(letter(i), cap=2)
    again = RunSummary.from_dict(json.loads(json.dumps(run_summary([p]).to_dict())))
    assert again.partitions[0].dead_letters_truncated == 3
    assert len(again.partitions[0].dead_letters) == 2
    assert again.partitions[0].dead_lettered == {"myapp.errors.InvalidOrder": 5}


def test_run_round_trip_sorts_partitions() -> None:
    summary = run_summary([busy_partition(1), busy_partition(0)])
    again = RunSummary.from_dict(summary.to_dict())
    assert [p.partition for p in again.partitions] == [0, 1]
    assert again.to_dict() == summary.to_dict()


@pytest.mark.parametrize(
    ("started", "finished", "expected"), [(0, 0, 0.0), (1000, 1001, 0.001), (5, 2505, 2.5)]
)
def test_duration(started: int, finished: int, expected: float) -> None:
    summary = RunSummary("t", 0, "x", "g", "local", cutoff_ms=0, started_ms=started, finished_ms=finished)
    assert summary.to_dict()["duration_s"] == expected


def test_run_round_trip_is_stable_for_unsorted_failed_partitions() -> None:
    two, zero = busy_partition(2), busy_partition(0)
    two.status = zero.status = "failed"
    data = json.loads(json.dumps(run_summary([two, zero]).to_dict()))
    assert RunSummary.from_dict(data).to_dict() == data


def test_dlt_topics_count_every_dlt_record_even_past_the_coordinate_cap() -> None:
    p = partition(0)
    for i in range(4):
        p.count_dead_letter(letter(i), cap=1)
    p.count_dead_letter(
        DeadLetter("orders-retry-1", 2, 9, "x.Invalid", "routed", "orders-validation-dlt", 2, 1), cap=1
    )
    p.count_dead_letter(letter(5, dlt=False), cap=1)  # dropped: no DLT
    assert p.dlt_topics == {"orders-dlt": 4, "orders-validation-dlt": 1}
    assert run_summary([p, busy_partition(1)]).totals()["dlt_topics"] == {
        "orders-dlt": 5,
        "orders-validation-dlt": 1,
    }


def test_a_stopped_run_says_why_and_round_trips() -> None:
    done, stopped, later = busy_partition(0), busy_partition(1), busy_partition(2)
    stopped.stop_reason, stopped.stopped_by, stopped.left = "stopped", "window_closed", 7
    later.stop_reason, later.stopped_by = "stopped", "killed"
    summary = run_summary([later, done, stopped])
    assert summary.stopped is None
    summary.note_stops()
    assert summary.stopped == "window_closed"  # the lowest stopped partition's reason
    data = json.loads(json.dumps(summary.to_dict()))
    assert data["status"] == "ok"
    assert data["stopped"] == "window_closed"
    assert data["partitions"][1]["left"] == 7
    assert data["partitions"][1]["stop_reason"] == "stopped"
    again = RunSummary.from_dict(data)
    assert again.stopped == "window_closed"
    assert again.to_dict() == summary.to_dict()


def test_a_run_that_was_not_stopped_says_so() -> None:
    summary = run_summary([busy_partition(0)])
    summary.note_stops()
    assert summary.stopped is None
    assert summary.to_dict()["stopped"] is None
    summary.stopped = "max_run"  # an operator's own label is kept
    summary.note_stops()
    assert summary.stopped == "max_run"


def test_a_later_pass_of_the_same_run_adds_up_partition_by_partition():
    from airflow_kafka_retry.engine.drain.summary import DeadLetter, PartitionSummary, RunSummary

    def run(*partitions):
        return RunSummary(
            topology="t.yaml",
            tier=1,
            topic="t-retry-1",
            group="g",
            engine="local",
            cutoff_ms=1,
            started_ms=10,
            finished_ms=20,
            partitions=list(partitions),
        )

    first = run(
        PartitionSummary(
            "t-retry-1",
            0,
            "g",
            start_offset=5,
            first_offset=5,
            last_offset=9,
            committed_offset=10,
            stop_reason="not_due",
            next_due_ms=100,
            drained=5,
            succeeded=4,
            routed={"t-dlt": 1},
            dead_lettered={"E": 1},
            dlt_topics={"t-dlt": 1},
            transactions=1,
            duration_s=0.5,
            dead_letters=[DeadLetter("t-retry-1", 0, 7, "E", "fatal", "t-dlt", 0, 3)],
        )
    )
    later = run(
        PartitionSummary(
            "t-retry-1",
            0,
            "g",
            start_offset=10,
            first_offset=10,
            last_offset=11,
            committed_offset=12,
            stop_reason="end",
            drained=2,
            succeeded=1,
            routed={"t-dlt": 1, "t-retry-2": 0},
            dead_lettered={"E": 1},
            dlt_topics={"t-dlt": 1},
            transactions=1,
            duration_s=0.25,
            dead_letters=[DeadLetter("t-retry-1", 0, 11, "E", "fatal", "t-dlt", 0, 4)],
        ),
        PartitionSummary("t-retry-1", 1, "g", drained=3, succeeded=3, stop_reason="end"),
    )
    later.finished_ms = 30
    first.partitions[0].lateness_ms.add(400)
    later.partitions[0].lateness_ms.add(1200)
    later.partitions[0].handler_ms.add(5)
    first.absorb(later, cap=1)
    p0, p1 = sorted(first.partitions, key=lambda p: p.partition)
    assert (p0.start_offset, p0.first_offset, p0.last_offset, p0.committed_offset) == (5, 5, 11, 12)
    assert (p0.stop_reason, p0.next_due_ms, p0.drained, p0.succeeded, p0.transactions) == (
        "end",
        None,
        7,
        5,
        2,
    )
    assert (p0.routed, p0.dead_lettered, p0.dlt_topics) == (
        {"t-dlt": 2, "t-retry-2": 0},
        {"E": 2},
        {"t-dlt": 2},
    )
    assert [d.offset for d in p0.dead_letters] == [7]
    assert p0.dead_letters_truncated == 1
    assert p0.duration_s == 0.75
    assert p1.drained == 3
    assert (p0.lateness_ms.count, p0.lateness_ms.max_ms, p0.handler_ms.count) == (2, 1200, 1)
    assert first.finished_ms == 30
    assert first.totals()["drained"] == 10
    assert first.ok
