"""``compat:`` presets, explicit keys over presets, ``{suffix}`` groups, the cause header, every error at
once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_kafka_retry.cli import main
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.headers.failure import describe_exception
from airflow_kafka_retry.policy.routing.resolver import DestinationResolver
from airflow_kafka_retry.policy.topology.compat import PRESETS, apply_preset
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.policy.topology.model import Topology
from airflow_kafka_retry.policy.topology.naming import NamingError, dlt_routing_suffix, retry_topics

BASE = {"topic": "orders", "group_id": "orders-service"}


def make(**keys: object) -> Topology:
    return Topology.from_mapping({**BASE, **keys})


# ---------------------------------------------------------------------- presets
@pytest.mark.parametrize("name", ["spring-3.2", "spring-2.7", "spring-builder-4.0", "spring-builder-4.1"])
def test_every_spring_preset_sets_every_spring_default(name: str) -> None:
    topology = make(compat=name)
    assert topology.topic_suffixing == "delay"
    assert topology.index_start == 0
    assert topology.reuse_same_interval is (name in ("spring-3.2", "spring-builder-4.1"))
    assert topology.dlt_routing_naming == "key"
    assert topology.tier_group_template == "{group_id}{suffix}"
    assert topology.traverse_causes is False
    assert topology.headers.cause == "handler"
    assert set(topology.compat_applied) == {
        "topic_suffixing",
        "index_start",
        "reuse_same_interval",
        "dlt_routing_naming",
        "tier_group_template",
        "traverse_causes",
        "headers.cause",
    }


def test_none_is_the_providers_own_defaults() -> None:
    assert make() == make(compat="none") == Topology(topic="orders", group_id="orders-service")
    assert PRESETS["none"].defaults == {}


def test_explicit_keys_override_the_preset() -> None:
    topology = make(
        compat="spring-3.2",
        topic_suffixing="index",
        index_start=1,
        reuse_same_interval=False,
        traverse_causes=True,
        tier_group_template="{group_id}-{topic}",
        dlt_routing_naming="suffix",
        headers={"cause": "root", "naming": "dead_letter"},
    )
    assert [t.topic for t in topology.retry_tiers] == ["orders-retry-1", "orders-retry-2"]
    assert topology.traverse_causes is True
    assert topology.headers.cause == "root"
    assert topology.headers.naming == "dead_letter"
    assert topology.consumer_group(topology.retry_tiers[0]) == "orders-service-orders-retry-1"
    shown = topology.to_dict()["compat"]
    assert shown["from_preset"] == {}
    assert shown["overridden"] == {
        "topic_suffixing": "index",
        "index_start": 1,
        "reuse_same_interval": False,
        "dlt_routing_naming": "suffix",
        "tier_group_template": "{group_id}-{topic}",
        "traverse_causes": True,
        "headers.cause": "root",
    }


def test_apply_preset_merges_headers_key_by_key() -> None:
    merged, applied = apply_preset({"headers": {"include_stacktrace": False}}, PRESETS["spring-3.2"])
    assert merged["headers"] == {"include_stacktrace": False, "cause": "handler"}
    assert "headers.cause" in applied
    assert "headers.include_stacktrace" not in applied


def test_spring_27_has_no_exception_based_dlts() -> None:
    with pytest.raises(TopologyError, match="arrived in 3.2") as info:
        make(compat="spring-2.7", dlt_routing={"-validation": ["ValueError"]})
    assert info.value.field == "dlt_routing.-validation"


def test_unknown_preset_names_the_choices(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("topic: orders\ngroup_id: g\ncompat: spring-3.3\n")
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert str(info.value).startswith(
        f"{path}: field 'compat': must be one of none, spring-3.2, spring-2.7, "
        "spring-builder-4.0, spring-builder-4.1, got 'spring-3.3': none ("
    )
    assert "spring-2.7 (@RetryableTopic" in str(info.value)  # each preset with what it matches


# ---------------------------------------------------------------------- groups and exception DLTs
def test_suffix_placeholder_in_tier_group_template() -> None:
    topology = make(tier_group_template="{group_id}.{suffix}", dlt_routing={"-bad-dlt": ["ValueError"]})
    assert [topology.consumer_group(t) for t in topology.tiers] == [
        "orders-service",
        "orders-service.-retry-1",
        "orders-service.-retry-2",
    ]
    assert [topology.consumer_group(t) for t in topology.dlt_tiers] == [
        "orders-service.-dlt",
        "orders-service.-bad-dlt",
    ]


def test_template_with_unknown_placeholder_lists_the_allowed_ones() -> None:
    with pytest.raises(TopologyError, match=r"only \{group_id\}, \{topic\} and \{suffix\} may be used"):
        make(tier_group_template="{group_id}{tier}")


def test_spring_exception_dlt_routes_by_its_spring_name() -> None:
    topology = make(compat="spring-3.2", dlt_routing={"-validation": ["ValueError"]})
    resolver = DestinationResolver(topology, clock=lambda: 0)
    assert resolver.dlt_topic_for(ValueError()) == "orders-validation-dlt"
    assert resolver.dlt_topic_for(KeyError()) == "orders-dlt"
    assert dlt_routing_suffix("-validation", dlt_suffix="-dlt", naming="suffix") == "-validation"


def test_spring_exception_dlt_key_equal_to_nothing_collides_with_the_dlt() -> None:
    with pytest.raises(TopologyError, match="used twice"):
        make(compat="spring-3.2", dlt_routing={"": ["ValueError"]})


def test_naming_rejects_repeats_that_do_not_trail_under_reuse() -> None:
    with pytest.raises(NamingError, match="1000 ms repeats earlier"):
        retry_topics([1000, 1000, 2000], retry_suffix="-retry", suffixing="delay", reuse=True)
    # without reuse the same delays are fine (Spring: '-<i - first index>')
    assert [t.suffix for t in retry_topics([1000, 1000, 2000], retry_suffix="-retry", suffixing="delay")] == [
        "-retry-1000-0",
        "-retry-1000-1",
        "-retry-2000",
    ]


# ---------------------------------------------------------------------- cause header
def _chain() -> Exception:
    try:
        try:
            try:
                raise KeyError("sku")
            except KeyError as root:
                raise LookupError("catalog") from root
        except LookupError as middle:
            raise RuntimeError("handler failed") from middle
    except RuntimeError as top:
        return top


@pytest.mark.parametrize(
    ("rule", "expected"), [("immediate", "LookupError"), ("root", "KeyError"), ("handler", "RuntimeError")]
)
def test_cause_header_rules(rule: str, expected: str) -> None:
    info = describe_exception(_chain(), cause_rule=rule)  # type: ignore[arg-type]
    assert info.fqcn == "RuntimeError"
    assert info.cause_fqcn == expected


def test_without_a_cause_only_handler_rule_writes_the_header() -> None:
    assert describe_exception(ValueError("x")).cause_fqcn is None
    assert describe_exception(ValueError("x"), cause_rule="root").cause_fqcn is None
    assert describe_exception(ValueError("x"), cause_rule="handler").cause_fqcn == "ValueError"


# ---------------------------------------------------------------------- every error at once
BROKEN = """\
topic: orders
attempts: 0
topic_suffixing: delays
backoff: {kind: exponential, initial: 30x, maximum: 1m}
reuse_same_interval: yes please
not_retryable: [not a class]
headers: {naming: spring, stacktrace: true}
tier_group_template: "{group}"
"""


def test_every_problem_of_a_file_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    error = info.value
    fields = sorted(e.field or "" for e in error.errors)
    assert fields == sorted(
        [
            "group_id",
            "attempts",
            "topic_suffixing",
            "backoff.initial",
            "backoff.maximum",
            "reuse_same_interval",
            "not_retryable[0]",
            "headers.naming",
            "headers.stacktrace",
            "tier_group_template",
        ]
    )
    assert all(e.source == str(path) for e in error.errors)
    message = str(error)
    assert message.startswith(f"{len(error.errors)} problems:\n")
    for e in error.errors:
        assert f"  - {path}: field '{e.field}': {e.problem}" in message


def test_cli_prints_every_problem_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    assert main(["topology", "show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("airflow-kafka-retry: error: 10 problems:\n")
    for field in (
        "group_id",
        "attempts",
        "backoff.initial",
        "backoff.maximum",
        "headers.naming",
        "headers.stacktrace",
        "tier_group_template",
        "not_retryable[0]",
    ):
        assert f"field '{field}'" in err


def test_a_single_problem_is_still_one_plain_error(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("topic: orders\ngroup_id: g\nattempts: 0\n")
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert info.value.errors == (info.value,)
    assert info.value.field == "attempts"
    assert str(info.value).startswith(f"{path}: field 'attempts': must be an integer from 1")


def test_derived_name_problems_are_all_reported_one_per_field() -> None:
    with pytest.raises(TopologyError) as info:
        make(retry_suffix="/r", dlt_suffix="/d")
    assert [(e.field, e.problem.split(" is ")[0]) for e in info.value.errors] == [
        ("retry_suffix", "derived topic name 'orders/r-1'"),
        ("dlt_suffix", "derived topic name 'orders/d'"),
    ]


def test_show_prints_the_preset_and_where_each_value_came_from(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "topic: orders\ngroup_id: orders-service\ncompat: spring-builder-4.0\nattempts: 4\n"
        "traverse_causes: true\n"
    )
    assert main(["topology", "show", str(path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["compat"]["preset"] == "spring-builder-4.0"
    assert "RetryTopicConfigurationBuilder" in shown["compat"]["matches"]
    assert shown["compat"]["overridden"] == {"traverse_causes": True}
    assert shown["compat"]["from_preset"]["tier_group_template"] == "{group_id}{suffix}"
    assert [(t["topic"], t["consumer_group"]) for t in shown["tiers"]] == [
        ("orders", "orders-service"),
        ("orders-retry-0", "orders-service-retry-0"),
        ("orders-retry-1", "orders-service-retry-1"),
        ("orders-retry-2", "orders-service-retry-2"),
    ]


def test_a_preset_does_not_hide_a_headers_key_that_is_not_a_mapping() -> None:
    with pytest.raises(TopologyError, match="must be a mapping, got None") as info:
        make(compat="spring-3.2", headers=None)
    assert info.value.field == "headers"
