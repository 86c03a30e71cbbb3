"""Scheduled redrive policies (issue 51, part 3): ``redrive:`` parsed and checked, by file and field."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.redrive.policies import RedrivePolicy
from airflow_kafka_retry.policy.topology.acl import acl_bindings
from airflow_kafka_retry.policy.topology.model import Topology

SOURCE = "orders.yaml"
GOOD = {"exception": ["TimeoutError"], "after": "1h", "every": "1h", "max_redrives": 3, "rate": "100/s"}


def topology(policies: object, **extra: object) -> Topology:
    data = {"topic": "orders", "group_id": "svc", "attempts": 3, "redrive": policies, **extra}
    return Topology.from_mapping(data, source=SOURCE)


def problems(policies: object, **extra: object) -> dict[str | None, str]:
    """Field -> problem, for every problem the topology reports."""
    with pytest.raises(TopologyError) as caught:
        topology(policies, **extra)
    for error in caught.value.errors:
        assert error.source == SOURCE, error
    return {e.field: e.problem for e in caught.value.errors}


def test_the_issue_s_example_parses_with_its_defaults():
    [policy] = topology([GOOD]).redrive
    assert policy == RedrivePolicy(
        name="policy-1",
        exception=("TimeoutError",),
        after_ms=3_600_000,
        every_ms=3_600_000,
        max_redrives=3,
        rate=100.0,
        dlt=None,
        to="main",
    )
    assert policy.to_dict()["after"] == "1h"
    assert topology([GOOD]).to_dict()["redrive"][0]["rate"] == 100.0
    named = topology(
        [
            {**GOOD, "name": "timeouts", "exception": "myapp.errors.Timeout", "rate": 20},
            {
                "name": "billing",
                "original_topic": "billing",
                "after": "0s",
                "every": "90m",
                "max_redrives": 1,
            },
        ],
        dlt_routing={"-validation-dlt": ["ValueError"]},
    )
    first, second = named.redrive
    assert (first.name, first.exception, first.rate) == ("timeouts", ("myapp.errors.Timeout",), 20.0)
    assert (second.original_topic, second.after_ms, second.every_ms, second.rate) == (
        ("billing",),
        0,
        5_400_000,
        None,
    )
    assert topology(
        [{**GOOD, "dlt": "orders-validation-dlt", "to": "first-tier"}], dlt_routing={"-validation-dlt": ["X"]}
    )


def test_every_field_is_checked_with_its_name():
    found = problems(
        [
            {
                "exceptions": ["TimeoutError"],  # misspelt: no selector left
                "after": "soon",
                "every": "0s",
                "max_redrives": 0,
                "rate": "0/s",
                "name": "bad name",
            },
            {"exception": ["Timeout Error", 3], "every": "1h", "max_redrives": True, "rate": -5},
            {"original_topic": [], "after": "1h", "every": "1h", "max_redrives": 2, "rate": "fast"},
            "every hour",
        ]
    )
    assert "did you mean 'exception'" in found["redrive[0].exceptions"]
    assert "at least one selector" in found["redrive[0]"]
    assert "duration" in found["redrive[0].after"]
    assert "at least 1s" in found["redrive[0].every"]
    assert ">= 1" in found["redrive[0].max_redrives"]
    assert "above 0" in found["redrive[0].rate"]
    assert "letters, digits" in found["redrive[0].name"]
    assert "not one of the dotted exception class paths" in found["redrive[1].exception[0]"]
    assert "redrive[1].exception[1]" in found
    assert found["redrive[1].after"] == "is required"
    assert ">= 1" in found["redrive[1].max_redrives"]
    assert "above 0" in found["redrive[1].rate"]
    assert "non-empty list" in found["redrive[2].original_topic"]
    assert "above 0" in found["redrive[2].rate"]
    assert "must be a mapping" in found["redrive[3]"]
    assert "must be a list" in problems({"exception": "X"})["redrive"]


def test_the_policies_are_checked_against_the_topology():
    found = problems(
        [
            {**GOOD, "dlt": "orders-parking", "to": "payments"},
            {**GOOD, "name": "policy-1", "original_topic": ["no topic!"]},
            {
                **GOOD,
                "name": "other",
                "rate": 0,
                "to": "elsewhere",
            },  # a field's problem: the rest still checked
        ]
    )
    assert "not a DLT of this topology (orders-dlt)" in found["redrive[0].dlt"]
    assert "own topology's topics" in found["redrive[0].to"]
    assert "names another policy too" in found["redrive[1].name"]
    assert "above 0" in found["redrive[2].rate"]
    assert "own topology's topics" in found["redrive[2].to"]
    assert "no retry tier" in problems([{**GOOD, "to": "first-tier"}], attempts=1)["redrive[0].to"]
    assert "no_dlt" in problems([GOOD], dlt_strategy="no_dlt")["redrive"]
    assert "release_on: replay" in problems([GOOD], ordering="key", release_on="replay")["redrive"]
    assert topology([GOOD], ordering="key").redrive  # release_on: dlt frees the key at the dead letter


def test_the_replay_role_may_park_only_where_policies_are():
    def parking_writes(t: Topology) -> list[str]:
        return [b.operation for b in acl_bindings(t, roles=["replay"]) if b.name == "orders-parking"]

    assert parking_writes(topology([GOOD])) == ["READ", "WRITE"]
    assert parking_writes(Topology.from_mapping({"topic": "orders", "group_id": "svc"})) == ["READ"]
