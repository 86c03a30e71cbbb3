"""A topology's ordering and release_on: the values, the topics they name, and what they refuse."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.topology.model import Topology

BASE = {"topic": "orders", "group_id": "orders-service"}


def topology(**fields: Any) -> Topology:
    return Topology.from_mapping({**BASE, **fields}, source="orders.yaml")


def test_ordering_is_off_by_default_and_names_no_topics() -> None:
    t = topology()
    assert (t.ordering, t.release_on, t.hold_topic, t.order_state_topic) == ("none", "dlt", None, None)


def test_ordering_key_names_the_hold_and_state_topics_and_shows_them() -> None:
    t = topology(ordering="key", release_on="replay")
    assert (t.hold_topic, t.order_state_topic) == ("orders-hold", "orders-order-state")
    shown = t.to_dict()
    assert shown["ordering"] == "key"
    assert shown["release_on"] == "replay"
    assert shown["hold_topic"] == "orders-hold"


@pytest.mark.parametrize(
    ("fields", "field", "problem"),
    [
        ({"ordering": "keys"}, "ordering", "must be one of none, key, got 'keys'"),
        ({"ordering": "key", "release_on": "never"}, "release_on", "must be one of dlt, replay"),
        ({"release_on": "replay"}, "release_on", "applies only with ordering: key"),
        (
            {"ordering": "key", "release_on": "replay", "dlt_strategy": "no_dlt"},
            "release_on",
            "dlt_strategy: no_dlt writes no dead letter",
        ),
        (
            {"ordering": "key", "input": {"family": "kafka-connect", "dlq": "dlq-orders"}},
            "ordering",
            "has no main-topic order to keep",
        ),
    ],
)
def test_a_bad_ordering_is_refused_naming_the_file_and_field(
    fields: dict[str, Any], field: str, problem: str
) -> None:
    with pytest.raises(TopologyError) as caught:
        topology(**fields)
    message = str(caught.value)
    assert f"orders.yaml: field '{field}'" in message
    assert problem in message
