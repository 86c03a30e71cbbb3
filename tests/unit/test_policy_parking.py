"""Parking (topology key, resolver decision) and the replay audit headers (pure policy)."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.engine.kafka.topic_admin import topology_topics
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.headers import codec as H
from airflow_kafka_retry.policy.headers.replay import (
    REPLAY_HEADERS,
    ReplayAudit,
    is_replayed,
    read_replay_audit,
    replayed_headers,
)
from airflow_kafka_retry.policy.routing.resolver import DestinationResolver
from airflow_kafka_retry.policy.topology.model import Topology

NOW = 1_800_000_000_000
AUDIT = ReplayAudit("r-1", "orders-dlt", 2, 17, NOW)


def topology(**kwargs) -> Topology:
    return Topology.from_mapping(
        {
            "topic": "orders",
            "group_id": "svc",
            "attempts": 3,
            "not_retryable": ["KeyError"],
            "dlt_routing": {"-invalid-dlt": ["LookupError"]},
            **kwargs,
        }
    )


# ---------------------------------------------------------------------- topology
def test_parking_topic_default_custom_and_in_the_topics_to_create():
    assert topology().parking_topic == "orders-parking"
    custom = topology(parking_suffix=".parked")
    assert custom.parking_topic == "orders.parked"
    assert custom.to_dict()["parking"] == "orders.parked"
    assert topology_topics(custom)[-1] == "orders.parked"
    assert "orders.parked" in custom.destinations_from(custom.tier(1))
    no_dlt = Topology.from_mapping({"topic": "orders", "group_id": "svc", "dlt_strategy": "no_dlt"})
    assert no_dlt.parking_topic is None
    assert not any("parking" in t for t in topology_topics(no_dlt))


@pytest.mark.parametrize(
    ("suffix", "message"),
    [
        ("-dlt", "derived topic name 'orders-dlt' is also the dead-letter topic"),
        ("-retry-1", "derived topic name 'orders-retry-1' is also the retry tier 1 topic"),
        ("/bad", "derived topic name 'orders/bad' is not a legal Kafka topic name"),
        ("", "must be a non-empty string"),
    ],
)
def test_bad_parking_suffix_names_the_field(suffix, message):
    with pytest.raises(TopologyError) as info:
        topology(parking_suffix=suffix)
    assert "field 'parking_suffix'" in str(info.value)
    assert message in str(info.value)


# ---------------------------------------------------------------------- resolver
KNOWN = {(AUDIT.replay_id, AUDIT.topic, AUDIT.partition, AUDIT.offset)}  # what the replay log says


def resolve(t: Topology, topic: str, attempt: int, exc: BaseException, headers=None):
    def known(
        a: ReplayAudit, digest: str
    ) -> bool:  # the copy's digest: tests/unit/test_replay_copy_binding.py
        return (a.replay_id, a.topic, a.partition, a.offset) in KNOWN

    return DestinationResolver(t, clock=lambda: NOW, replay_known=known).resolve(
        topic=topic, partition=1, attempt=attempt, exception=exc, original_timestamp_ms=NOW, headers=headers
    )


@pytest.mark.parametrize(
    ("topic", "attempt", "exc", "reason"),
    [
        ("orders-retry-2", 3, RuntimeError("again"), "exhausted"),
        ("orders", 1, KeyError("fatal"), "not_retryable"),
        ("orders-dlt", 4, RuntimeError("again"), "dlt_failure_retried"),
    ],
)
def test_a_replayed_record_that_fails_again_is_parked_wherever_it_would_be_dead_lettered(
    topic, attempt, exc, reason
):
    t = topology()
    plain = resolve(t, topic, attempt, exc)
    assert plain.action == "dlt"
    assert plain.topic != "orders-parking"
    assert not plain.parked
    parked = resolve(t, topic, attempt, exc, headers=AUDIT.headers())
    assert (parked.action, parked.topic, parked.reason, parked.parked) == (
        "dlt",
        "orders-parking",
        reason,
        True,
    )
    assert (parked.partition, parked.next_attempt) == (plain.partition, plain.next_attempt)


def test_a_replayed_record_still_retries_through_the_tiers():
    t = topology()
    dest = resolve(t, "orders", 1, RuntimeError("transient"), headers=AUDIT.headers())
    assert (dest.action, dest.topic, dest.parked) == ("retry", "orders-retry-1", False)


def test_exception_specific_dlts_are_parked_too_and_drops_stay_drops():
    t = topology()
    assert resolve(t, "orders-retry-2", 3, IndexError("x")).topic == "orders-invalid-dlt"
    assert resolve(t, "orders-retry-2", 3, IndexError("x"), headers=AUDIT.headers()).topic == "orders-parking"
    failing = topology(dlt_strategy="fail_on_error")
    assert resolve(failing, "orders-dlt", 2, RuntimeError("x"), headers=AUDIT.headers()).action == "drop"


@pytest.mark.parametrize(
    "headers",
    [
        [("dlt_replay-id", b"r-1")],  # incomplete
        ReplayAudit("r-1", "payments-dlt", 2, 17, NOW).headers(),  # another topology's DLT
        ReplayAudit("r-2", "orders-dlt", 2, 17, NOW).headers(),  # the log does not know this move
    ],
)
def test_an_unconfirmed_replay_claim_is_ignored_and_marked(headers):
    dest = resolve(topology(), "orders-retry-2", 3, RuntimeError("again"), headers=headers)
    assert (dest.topic, dest.parked, dest.untrusted_replay) == ("orders-dlt", False, True)
    unchecked = DestinationResolver(topology(), clock=lambda: NOW).resolve(
        topic="orders-retry-2",
        partition=0,
        attempt=3,
        exception=RuntimeError("x"),
        original_timestamp_ms=NOW,
        headers=AUDIT.headers(),
    )
    assert (unchecked.topic, unchecked.untrusted_replay) == ("orders-dlt", True), "trusted without a log"


# ---------------------------------------------------------------------- audit headers
def test_audit_headers_round_trip():
    assert read_replay_audit(AUDIT.headers()) == AUDIT
    assert is_replayed(AUDIT.headers())
    assert not is_replayed([("other", b"x")])
    assert read_replay_audit([]) is None
    broken = [(k, v if k != "dlt_replay-source-offset" else b"\x01") for k, v in AUDIT.headers()]
    assert read_replay_audit(broken) is None


def dlt_record_headers() -> list:
    return [
        ("trace-id", b"t1"),
        (H.RETRY_TOPIC_NAMES.original_topic, b"orders"),
        (H.RETRY_TOPIC_NAMES.original_offset, H.encode_int64(9)),
        (H.DEAD_LETTER_NAMES.original_partition, H.encode_int32(2)),
        (H.RETRY_TOPIC_NAMES.exception_fqcn, b"KeyError"),
        (H.DEAD_LETTER_NAMES.exception_message, b"old"),
        (H.ORIGINAL_TIMESTAMP, H.encode_big_integer(5)),
        (H.ATTEMPTS, H.encode_int32(4)),
        (H.BACKOFF_TIMESTAMP, H.encode_big_integer(7)),
        *ReplayAudit("older", "orders-dlt", 0, 1, 2).headers(),
    ]


def test_replayed_headers_keep_originals_and_own_headers_and_start_a_fresh_attempt_count():
    out = replayed_headers(dlt_record_headers(), AUDIT)
    names = [k for k, _ in out]
    assert ("trace-id", b"t1") in out
    coords = H.read_original_coordinates(out)
    assert (coords.topic, coords.partition, coords.offset) == ("orders", 2, 9)  # both families kept
    assert not {H.ATTEMPTS, H.BACKOFF_TIMESTAMP, H.ORIGINAL_TIMESTAMP} & set(names)
    assert H.read_attempts(out) == 1
    assert H.RETRY_TOPIC_NAMES.exception_fqcn not in names
    assert H.DEAD_LETTER_NAMES.exception_message not in names
    assert read_replay_audit(out) == AUDIT
    assert [n for n in names if n in REPLAY_HEADERS] == list(REPLAY_HEADERS)


def test_replayed_headers_for_a_retry_tier_carry_the_tiers_attempt_and_due_now():
    out = replayed_headers(dlt_record_headers(), AUDIT, attempt=2, due_ms=NOW)
    assert H.read_attempts(out) == 2
    assert H.read_due_ms(out) == NOW
    assert [k for k, _ in out].count(H.ATTEMPTS) == 1
