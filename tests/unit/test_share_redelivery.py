"""Pure parts of share-group back-off retries: the topology's input, a dead letter's round, a redelivery."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.headers.codec import (
    ATTEMPTS,
    BACKOFF_TIMESTAMP,
    ORIGINAL_TIMESTAMP,
    RETRY_TOPIC_NAMES,
    encode_big_integer,
    encode_int32,
    read_original_coordinates,
)
from airflow_kafka_retry.policy.routing.resolver import DestinationResolver
from airflow_kafka_retry.policy.routing.share_redelivery import (
    NotRedeliverableError,
    Redelivery,
    RedeliveryPlan,
    RedeliveryTargets,
    ShareGroupRejection,
    dead_letter_round,
    entry_key,
    redelivery_headers,
    redelivery_plan,
)
from airflow_kafka_retry.policy.topology.model import Topology

NAMES = RETRY_TOPIC_NAMES
SHARE_TOPOLOGY = {
    "topic": "orders",
    "group_id": "orders-retrier",
    "input": {"family": "share-group", "dlq": "dlq.orders-share"},
    "on_due": "redeliver",
    "attempts": 3,
    "backoff": {"kind": "fixed", "delay": "2s"},
}


def share_dead_letter(topic: str = "orders", partition: int = 1, offset: int = 7) -> list[tuple[str, bytes]]:
    """The six headers the broker writes (decimal text), as tests/integration saw them."""
    return [
        ("__dlq.errors.topic", topic.encode()),
        ("__dlq.errors.partition", str(partition).encode()),
        ("__dlq.errors.offset", str(offset).encode()),
        ("__dlq.errors.group", b"orders-share"),
        ("__dlq.errors.delivery.count", b"1"),
        ("__dlq.errors.message", b"Offset rejected by client."),
    ]


TARGETS = RedeliveryTargets.of(Topology.from_mapping(SHARE_TOPOLOGY))


def nothing_logged(key: bytes) -> Redelivery | None:
    return None


# ---------------------------------------------------------------------- the topology
def test_an_input_dlq_is_tier_0_and_the_topic_names_the_rest() -> None:
    topology = Topology.from_mapping(SHARE_TOPOLOGY)
    assert [t.topic for t in topology.tiers] == ["dlq.orders-share", "orders-retry-1", "orders-retry-2"]
    assert topology.dlt_topic == "orders-dlt"
    assert topology.consumer_group(topology.tier(0)) == "orders-retrier"
    assert topology.to_dict()["input"] == {"family": "share-group", "dlq": "dlq.orders-share"}
    assert topology.to_dict()["on_due"] == "redeliver"
    assert Topology.from_mapping({"topic": "t", "group_id": "g"}).on_due == "handle"


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"input": None}, "on_due", "needs an input"),
        (
            {"input": {"family": "kafka-connect", "dlq": "connect-dlq"}},
            "on_due",
            "needs input.family: share-group",
        ),
        ({"on_due": "resend"}, "on_due", "must be one of handle, redeliver"),
        ({"input": {"family": "share", "dlq": "dlq.x"}}, "input.family", "must be one of share-group"),
        ({"input": {"family": "share-group"}}, "input.dlq", "must name the dead-letter topic"),
        ({"input": {"family": "share-group", "dlq": "dlq.x", "topic": "y"}}, "input.topic", "unknown key"),
        ({"input": "dlq.x"}, "input", "must be a mapping"),
        ({"group_id": "orders-share"}, "group_id", "is the share group whose DLQ"),
        (
            {"input": {"family": "share-group", "dlq": "dlq.bad topic"}},
            "input.dlq",
            "not a legal Kafka topic name",
        ),
    ],
)
def test_a_bad_input_names_its_field(change: dict[str, object], field: str, words: str) -> None:
    data = {**SHARE_TOPOLOGY, **change}
    if data["input"] is None:
        del data["input"]
    with pytest.raises(TopologyError) as caught:
        Topology.from_mapping(data, source="share.yaml")
    problems = [e for e in caught.value.errors if e.field == field]
    assert problems, str(caught.value)
    assert words in problems[0].problem
    assert "share.yaml" in str(caught.value)


def test_handle_fits_any_input_family() -> None:
    topology = Topology.from_mapping(
        {"topic": "payments", "group_id": "g", "input": {"family": "kafka-connect", "dlq": "connect-dlq"}}
    )
    assert topology.tier(0).topic == "connect-dlq"
    assert topology.on_due == "handle"


# ---------------------------------------------------------------------- a dead letter's round
def test_a_dead_letter_the_log_does_not_know_is_round_1_from_its_source() -> None:
    found = dead_letter_round(share_dead_letter(), 5_000, b"k", b"v", NAMES, nothing_logged, targets=TARGETS)
    assert found.attempt == 1
    assert found.logged is None
    assert isinstance(found.error, ShareGroupRejection)
    assert "Offset rejected by client." in str(found.error)
    assert "after 1 deliveries" in str(found.error)
    first = read_original_coordinates(found.headers)
    assert (first.topic, first.partition, first.offset) == ("orders", 1, 7)
    assert dict(found.headers)[ORIGINAL_TIMESTAMP] == encode_big_integer(5_000)
    assert found.headers[4:] == share_dead_letter()  # the dead letter's own headers, kept after them


def test_a_logged_redelivery_continues_its_round_and_keeps_the_first_source() -> None:
    logged = {entry_key(("orders", 0, 42)): Redelivery(2, ("orders", 1, 7), 1_000, 3_000)}
    found = dead_letter_round(
        share_dead_letter(partition=0, offset=42), 9_000, b"k", b"v", NAMES, logged.get, targets=TARGETS
    )
    assert found.attempt == 2
    assert found.logged == b"orders/0/42"
    first = read_original_coordinates(found.headers)
    assert (first.topic, first.partition, first.offset) == ("orders", 1, 7)
    assert dict(found.headers)[ORIGINAL_TIMESTAMP] == encode_big_integer(1_000)


def test_a_dead_letter_without_its_record_or_its_source_cannot_be_redelivered() -> None:
    empty = dead_letter_round(share_dead_letter(), 1, None, None, NAMES, nothing_logged, targets=TARGETS)
    assert isinstance(empty.error, NotRedeliverableError)
    assert "copy.record.enable is false" in str(empty.error)
    spring = dead_letter_round(
        [("kafka_dlt-original-topic", b"x")], 1, b"k", b"v", NAMES, nothing_logged, targets=TARGETS
    )
    assert isinstance(spring.error, NotRedeliverableError)
    assert "names no source" in str(spring.error)
    bad = share_dead_letter()
    bad[1] = ("__dlq.errors.partition", b"\x00\x00\x00\x01")  # 4-byte int, not decimal text
    odd = dead_letter_round(bad, 1, b"k", b"v", NAMES, nothing_logged, targets=TARGETS)
    assert isinstance(odd.error, NotRedeliverableError)
    assert "__dlq.errors.partition" in str(odd.error)


# ---------------------------------------------------------------------- a due tier record
def _tier_record(partition: int = 1) -> list[tuple[str, bytes]]:
    found = dead_letter_round(
        share_dead_letter(partition=partition), 5_000, b"k", b"v", NAMES, nothing_logged, targets=TARGETS
    )
    return [
        *found.headers,
        ("kafka_exception-fqcn", b"x.Y"),
        (ATTEMPTS, encode_int32(2)),
        (BACKOFF_TIMESTAMP, encode_big_integer(7_000)),
    ]


def test_a_due_record_goes_back_to_its_source_partition_with_its_round() -> None:
    plan = redelivery_plan(_tier_record(), 2, 7_000, NAMES, targets=TARGETS)
    assert plan == RedeliveryPlan("orders", 1, Redelivery(2, ("orders", 1, 7), 5_000, 7_000))
    headers = redelivery_headers(_tier_record(), NAMES)
    assert [name for name, _ in headers] == [
        "kafka_original-topic",
        "kafka_original-partition",
        "kafka_original-offset",
        ORIGINAL_TIMESTAMP,
        ATTEMPTS,
        BACKOFF_TIMESTAMP,
    ]
    assert dict(headers)[ATTEMPTS] == encode_int32(2)


def test_a_tier_record_without_a_share_source_goes_to_the_dlt() -> None:
    plan = redelivery_plan([(ATTEMPTS, encode_int32(2))], 2, None, NAMES, targets=TARGETS)
    assert isinstance(plan, NotRedeliverableError)
    assert "__dlq.errors.topic" in str(plan)


def test_a_log_entry_round_trips_and_a_bad_one_is_refused() -> None:
    entry = Redelivery(3, ("orders", 1, 7), 1_000, None)
    assert Redelivery.decode(entry.encode()) == entry
    for bad, why in (
        (b"[]", "not a JSON object"),
        (
            b'{"attempt": 0, "original_topic": "o", "original_partition": 0, "original_offset": 0}',
            "attempt >= 1",
        ),
        (b"x", "Expecting value"),
    ):
        with pytest.raises(ValueError, match=why):
            Redelivery.decode(bad)


# ---------------------------------------------------------------------- where the input lane routes
def test_each_round_waits_in_its_own_tier_and_rounds_past_attempts_go_to_the_dlt() -> None:
    topology = Topology.from_mapping(
        {**SHARE_TOPOLOGY, "backoff": {"kind": "custom", "delays": ["2s", "5s"]}}
    )
    resolver = DestinationResolver(topology, clock=lambda: 10_000)

    def resolve(attempt: int, error: Exception) -> tuple[str, str | None, int, int]:
        d = resolver.resolve(
            topic="dlq.orders-share", partition=0, attempt=attempt, exception=error, original_timestamp_ms=0
        )
        return d.action, d.topic, d.next_attempt, d.due_ms

    rejected = ShareGroupRejection("Offset rejected by client.")
    assert resolve(1, rejected) == ("retry", "orders-retry-1", 2, 12_000)
    assert resolve(2, rejected) == ("retry", "orders-retry-2", 3, 15_000)  # the log said round 2
    assert resolve(3, rejected) == ("dlt", "orders-dlt", 4, 10_000)
    assert resolve(1, NotRedeliverableError("no record"))[:2] == ("dlt", "orders-dlt")
