"""A topology's ``dead_letter_queues``: other frameworks' DLQs it watches, each with an optional family."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from airflow_kafka_retry.policy.dead_letters.queues import DeadLetterQueue
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.policy.topology.model import Topology

BASE = {"topic": "orders", "group_id": "orders-service", "attempts": 3}


def problems(error: TopologyError) -> dict[str, str]:
    """field -> problem, for every problem the error reports."""
    return {str(e.field): e.problem for e in error.errors}


def test_a_topology_file_names_queues_by_name_or_with_their_family(tmp_path: Path) -> None:
    path = tmp_path / "orders.yaml"
    path.write_text(
        textwrap.dedent(
            """
            topic: orders
            group_id: orders-service
            dead_letter_queues:
              - dlq.orders-share
              - {topic: connect-dlq-payments, family: kafka-connect}
              - topic: airflow-dlq
                family: airflow
            """
        )
    )
    topology = load_topology(path)
    assert topology.dead_letter_queues == (
        DeadLetterQueue("dlq.orders-share"),
        DeadLetterQueue("connect-dlq-payments", "kafka-connect"),
        DeadLetterQueue("airflow-dlq", "airflow"),
    )
    assert topology.dead_letter_queue_topics == ("dlq.orders-share", "connect-dlq-payments", "airflow-dlq")
    assert topology.queue_family("connect-dlq-payments") == "kafka-connect"
    assert topology.queue_family("dlq.orders-share") is None  # detected per record
    assert topology.queue_family("orders-dlt") is None  # not one of the queues
    assert topology.to_dict()["dead_letter_queues"] == [
        {"topic": "dlq.orders-share", "family": None},
        {"topic": "connect-dlq-payments", "family": "kafka-connect"},
        {"topic": "airflow-dlq", "family": "airflow"},
    ]
    # the queues are watched, never drained: the retry path is unchanged
    assert [t.topic for t in topology.tiers] == ["orders", "orders-retry-1", "orders-retry-2"]
    assert [t.topic for t in topology.dlt_tiers] == ["orders-dlt"]


def test_no_queues_by_default() -> None:
    topology = Topology.from_mapping(BASE)
    assert topology.dead_letter_queues == ()
    assert topology.to_dict()["dead_letter_queues"] == []


@pytest.mark.parametrize(
    ("queues", "field", "words"),
    [
        ("dlq.x", "dead_letter_queues", "must be a list of dead-letter topics"),
        ([3], "dead_letter_queues[0]", "must be a topic name or a mapping"),
        ([{"family": "kafka-connect"}], "dead_letter_queues[0].topic", "must name the dead-letter topic"),
        ([{"topc": "x"}], "dead_letter_queues[0].topc", "did you mean 'topic'?"),
        ([{"topic": "x", "family": "connect"}], "dead_letter_queues[0].family", "must be one of share-group"),
        ([{"topic": "x", "family": "unknown"}], "dead_letter_queues[0].family", "or left out to detect"),
        (["a b"], "dead_letter_queues[0].topic", "not a legal Kafka topic name"),
        (["orders"], "dead_letter_queues[0].topic", "the topology's main topic (tier 0)"),
        (["ok", "orders-retry-2"], "dead_letter_queues[1].topic", "the topology's retry tier 2"),
        (["orders-dlt"], "dead_letter_queues[0].topic", "the topology's own DLT"),
        (["orders-parking"], "dead_letter_queues[0].topic", "the topology's own parking topic"),
        (["x", {"topic": "x", "family": "airflow"}], "dead_letter_queues[1].topic", "listed twice"),
    ],
)
def test_each_bad_queue_is_named_by_its_field(queues: object, field: str, words: str) -> None:
    with pytest.raises(TopologyError) as caught:
        Topology.from_mapping({**BASE, "dead_letter_queues": queues}, source="orders.yaml")
    found = problems(caught.value)
    assert field in found, found
    assert words in found[field]
    assert "orders.yaml" in str(caught.value)


def test_an_exception_dlt_and_an_input_are_the_topologys_own_too() -> None:
    routed = {**BASE, "dlt_routing": {"-validation-dlt": ["myapp.errors.Invalid"]}}
    with pytest.raises(TopologyError) as caught:
        Topology.from_mapping({**routed, "dead_letter_queues": ["orders-validation-dlt"]})
    assert "the topology's own DLT" in problems(caught.value)["dead_letter_queues[0].topic"]
    share = {**BASE, "input": {"family": "share-group", "dlq": "dlq.orders-share"}}
    with pytest.raises(TopologyError) as caught:
        Topology.from_mapping({**share, "dead_letter_queues": ["dlq.orders-share", "orders"]})
    found = problems(caught.value)
    assert "the topology's input (tier 0)" in found["dead_letter_queues[0].topic"]
    assert "the source of its input's dead letters" in found["dead_letter_queues[1].topic"]


def test_every_problem_is_reported_at_once_with_the_index_it_was_written_at() -> None:
    with pytest.raises(TopologyError) as caught:
        Topology.from_mapping(
            {
                **BASE,
                "dead_letter_queues": [{"topic": "x", "family": "nope"}, 7, "orders-dlt", "x", "y z"],
            },
            source="orders.yaml",
        )
    found = problems(caught.value)
    assert set(found) == {
        "dead_letter_queues[0].family",
        "dead_letter_queues[1]",
        "dead_letter_queues[2].topic",
        "dead_letter_queues[3].topic",
        "dead_letter_queues[4].topic",
    }
    assert "listed twice (also dead_letter_queues[0])" in found["dead_letter_queues[3].topic"]
    assert "not a legal Kafka topic name" in found["dead_letter_queues[4].topic"]
    assert len(caught.value.errors) == len(found)  # one problem per field


def test_a_topology_built_in_python_is_checked_the_same() -> None:
    with pytest.raises(TopologyError) as caught:
        Topology(topic="orders", group_id="g", dead_letter_queues=("dlq.x",))  # type: ignore[arg-type]
    assert "must be a DeadLetterQueue" in problems(caught.value)["dead_letter_queues[0]"]
    with pytest.raises(TopologyError) as caught:
        Topology(topic="orders", group_id="g", dead_letter_queues=(DeadLetterQueue("q", "bogus"),))  # type: ignore[arg-type]
    assert "must be one of" in problems(caught.value)["dead_letter_queues[0].family"]
    ok = Topology(topic="orders", group_id="g", dead_letter_queues=(DeadLetterQueue("q", "airflow"),))
    assert ok.queue_family("q") == "airflow"
