"""
Forged share-group dead letters choose nothing (issue 48 items 1 and 2): where a redelivery may write is the
topology's ``input.sources`` and ``input.group``, checked when the input lane reads a dead letter and again
when the tier record is redelivered; anything else is a NotRedeliverableError that names why (the DLT).
"""

from __future__ import annotations

import pytest

from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.headers.codec import (
    ATTEMPTS,
    RETRY_TOPIC_NAMES,
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
    redelivery_plan,
)
from airflow_kafka_retry.policy.topology.model import Topology

NAMES = RETRY_TOPIC_NAMES
SHARE = {
    "topic": "orders",
    "group_id": "orders-retrier",
    "input": {"family": "share-group", "dlq": "dlq.orders-share"},
    "on_due": "redeliver",
    "attempts": 3,
    "backoff": {"kind": "fixed", "delay": "2s"},
}
TOPOLOGY = Topology.from_mapping(SHARE)
TARGETS = RedeliveryTargets.of(TOPOLOGY)
LONG = "x" * 600


def letter(topic: str = "orders", partition: int = 1, group: bytes | None = b"orders-share") -> list:
    headers = [
        ("__dlq.errors.topic", topic.encode()),
        ("__dlq.errors.partition", str(partition).encode()),
        ("__dlq.errors.offset", b"7"),
        ("__dlq.errors.delivery.count", b"1"),
        ("__dlq.errors.message", b"Offset rejected by client."),
    ]
    if group is not None:
        headers.insert(3, ("__dlq.errors.group", group))
    return headers


def asked_log(seen: list[bytes]):  # type: ignore[no-untyped-def]
    def logged(key: bytes) -> Redelivery | None:
        seen.append(key)
        return Redelivery(2, ("orders", 1, 7), 1_000, 3_000)

    return logged


# ---------------------------------------------------------------------- the topology's allow-list
def test_the_default_allow_list_is_the_topic_and_the_group_is_the_dlqs() -> None:
    assert RedeliveryTargets(frozenset({"orders"}), "orders-share", "dlq.orders-share") == TARGETS
    listed = Topology.from_mapping(
        {**SHARE, "input": {**SHARE["input"], "sources": ["orders", "orders-eu"]}}  # type: ignore[dict-item]
    )
    assert RedeliveryTargets.of(listed).sources == {"orders", "orders-eu"}
    assert listed.to_dict()["input"]["sources"] == ["orders", "orders-eu"]
    named = Topology.from_mapping(
        {**SHARE, "input": {"family": "share-group", "dlq": "queues.orders", "group": "orders-share"}}
    )
    assert RedeliveryTargets.of(named).group == "orders-share"


@pytest.mark.parametrize(
    ("sources", "words"),
    [
        (["orders-dlt"], "own DLT"),
        (["orders-parking"], "own parking topic"),
        (["orders-dlt-replay-log"], "replay log"),
        (["orders-parking-replay-log"], "replay log"),
        (["orders-redelivery-log"], "own redelivery log"),
        (["orders-retry-1"], "own tier 1"),
        (["dlq.orders-share"], "own tier 0"),
        (["payments-dlt-replay-log"], "replay or redelivery log"),
        (["billing-redelivery-log"], "replay or redelivery log"),
        (["__consumer_offsets"], "internal topic"),
        (["bad topic"], "not a legal Kafka topic name"),
        ([LONG], "not a legal Kafka topic name"),
        (["orders", "orders"], "listed twice"),
    ],
)
def test_a_source_the_provider_must_not_write_is_refused_at_load(sources: list[str], words: str) -> None:
    with pytest.raises(TopologyError) as caught:
        Topology.from_mapping(
            {**SHARE, "input": {**SHARE["input"], "sources": sources}},  # type: ignore[dict-item]
            source="share.yaml",
        )
    problems = [e for e in caught.value.errors if e.field and e.field.startswith("input.sources[")]
    assert problems, str(caught.value)
    assert words in problems[0].problem
    assert "share.yaml" in str(caught.value)
    assert len(str(caught.value)) < 600  # a 600-character name is cut, not echoed whole


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"input": {"family": "share-group", "dlq": "queues.orders"}}, "input.group", "dlq.<group>"),
        ({"input": {"family": "share-group", "dlq": "dlq.x", "sources": "a b"}}, "input.sources[0]", "legal"),
        ({"input": {"family": "share-group", "dlq": "dlq.x", "sources": [3]}}, "input.sources", "list of"),
        ({"input": {"family": "share-group", "dlq": "dlq.x", "group": ""}}, "input.group", "must name"),
        (
            {"on_due": "handle", "input": {"family": "share-group", "dlq": "dlq.x", "sources": ["a"]}},
            "input.sources",
            "drop them",
        ),
        (
            {"group_id": "orders-share", "input": {**SHARE["input"], "group": "orders-share"}},
            "group_id",
            "DLQ",
        ),
    ],
)
def test_input_sources_and_group_name_their_field(change: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(TopologyError) as caught:
        Topology.from_mapping({**SHARE, **change}, source="share.yaml")
    problems = [e for e in caught.value.errors if e.field == field]
    assert problems, str(caught.value)
    assert words in problems[0].problem


# ---------------------------------------------------------------------- the input lane's dead letters
@pytest.mark.parametrize(
    ("headers", "words"),
    [
        (letter("payments-commands", 3), "'payments-commands' is not one this topology redelivers to"),
        (letter("orders-dlt"), "'orders-dlt' is not one"),
        (letter("orders-parking"), "'orders-parking' is not one"),
        (letter("orders-dlt-replay-log"), "'orders-dlt-replay-log' is not one"),
        (letter("orders-redelivery-log"), "'orders-redelivery-log' is not one"),
        (letter(LONG), "cut from 600 characters"),
        (letter("orders\x00evil"), "'orders?evil'"),
        (letter(group=b"payments-share"), "names share group 'payments-share'"),
        (letter(group=None), "names share group none"),
    ],
)
def test_a_forged_dead_letter_goes_to_the_dlt_with_its_reason(headers: list, words: str) -> None:
    asked: list[bytes] = []
    found = dead_letter_round(headers, 5_000, b"k", b"v", NAMES, asked_log(asked), targets=TARGETS)
    assert isinstance(found.error, NotRedeliverableError)
    assert words in str(found.error)
    assert len(str(found.error)) < 700
    assert (found.attempt, found.logged, asked) == (1, None, [])  # the log is not consulted, nor deleted from
    first = read_original_coordinates(found.headers)
    assert first.topic == headers[0][1].decode()  # the DLT record still says where it claimed to come from
    resolver = DestinationResolver(TOPOLOGY, clock=lambda: 10_000)
    destination = resolver.resolve(
        topic="dlq.orders-share", partition=0, attempt=1, exception=found.error, original_timestamp_ms=0
    )
    assert (destination.action, destination.topic) == ("dlt", "orders-dlt")


def test_a_dead_letter_of_an_allowed_source_keeps_its_round() -> None:
    asked: list[bytes] = []
    found = dead_letter_round(letter(), 5_000, b"k", b"v", NAMES, asked_log(asked), targets=TARGETS)
    assert isinstance(found.error, ShareGroupRejection)
    assert asked == [entry_key(("orders", 1, 7))]
    assert found.attempt == 2


# ---------------------------------------------------------------------- a tier record (forged in the tier)
def tier_record(topic: str = "orders", group: bytes | None = b"orders-share") -> list:
    return [
        ("kafka_original-topic", b"orders"),
        ("kafka_original-partition", encode_int32(1)),
        ("kafka_original-offset", b"\x00" * 7 + b"\x07"),
        *letter(topic, 3, group),
        (ATTEMPTS, encode_int32(2)),
    ]


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        (tier_record("payments-commands"), "'payments-commands' is not one"),
        (tier_record("orders-dlt"), "'orders-dlt' is not one"),
        (tier_record("orders-dlt-replay-log"), "'orders-dlt-replay-log' is not one"),
        (tier_record(LONG), "cut from 600 characters"),
        (tier_record(group=b"other"), "names share group 'other'"),
    ],
)
def test_a_forged_tier_record_is_not_redelivered(headers: list, words: str) -> None:
    plan = redelivery_plan(headers, 2, 7_000, NAMES, targets=TARGETS)
    assert isinstance(plan, NotRedeliverableError)
    assert words in str(plan)


def test_a_tier_record_of_an_allowed_source_goes_back_to_it() -> None:
    plan = redelivery_plan(tier_record(), 2, 7_000, NAMES, targets=TARGETS)
    assert plan == RedeliveryPlan("orders", 3, Redelivery(2, ("orders", 1, 7), None, 7_000))
