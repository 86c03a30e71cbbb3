"""Unit tests for airflow_kafka_retry.policy.topology.model and .errors (pure, no network, no Airflow).

Covers every topology key, ``load_topology`` from YAML files, the validation messages (file, field,
problem), the derived tiers and topic names, DLT topics and consumer groups.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from airflow_kafka_retry.policy.classify import DEFAULT_NOT_RETRYABLE
from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.headers.header_policy import MIN_HEADER_BYTES, HeaderPolicy
from airflow_kafka_retry.policy.timing.backoff import BackOff
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.policy.topology.model import DEFAULT_TIER_GROUP_TEMPLATE, Tier, Topology

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLE = FIXTURES / "policy_orders_topology.yaml"
BASE = "topic: orders\ngroup_id: orders-service\n"


class InvalidOrder(ValueError):
    """Stands in for myapp.errors.InvalidOrder, a class the policy cannot import by that name."""


InvalidOrder.__module__ = "myapp.errors"


# ---------------------------------------------------------------------- helpers
def write(tmp_path: Path, text: str, name: str = "topology.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load(tmp_path: Path, extra: str = "", *, base: str = BASE) -> Topology:
    return load_topology(write(tmp_path, base + textwrap.dedent(extra)))


def load_error(tmp_path: Path, text: str) -> tuple[TopologyError, Path]:
    path = write(tmp_path, text)
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    return info.value, path


def names(tiers: tuple[Tier, ...]) -> list[str]:
    return [t.topic for t in tiers]


def make(**kwargs) -> Topology:
    kwargs.setdefault("topic", "orders")
    kwargs.setdefault("group_id", "orders-service")
    return Topology(**kwargs)


# ---------------------------------------------------------------------- the example topology
def _assert_is_example(topology: Topology, source: Path) -> None:
    assert topology.source == str(source)
    assert topology.topic == "orders"
    assert topology.group_id == "orders-service"
    assert topology.attempts == 4
    assert topology.backoff == BackOff("exponential", initial_ms=30_000, multiplier=2.0, max_ms=600_000)
    assert topology.topic_suffixing == "index"
    assert topology.index_start == 1
    assert topology.retry_suffix == "-retry"
    assert topology.dlt_suffix == "-dlt"
    assert topology.reuse_same_interval is False
    assert topology.not_retryable == ("json.JSONDecodeError", "myapp.errors.InvalidOrder")
    assert topology.default_not_retryable is True
    assert topology.retry_only == ()
    assert topology.traverse_causes is True
    assert topology.dlt_routing == (("-validation-dlt", ("myapp.errors.InvalidOrder",)),)
    assert topology.dlt_strategy == "always_retry_on_error"
    assert topology.timeout_ms == 2 * 3_600_000
    assert topology.headers == HeaderPolicy(
        include_stacktrace=True, strip_previous_exception_headers=True, max_header_bytes=16_384
    )
    assert topology.tier_group_template == DEFAULT_TIER_GROUP_TEMPLATE
    assert topology.tiers == (
        Tier(0, "orders", 0, "main"),
        Tier(1, "orders-retry-1", 30_000, "retry"),
        Tier(2, "orders-retry-2", 60_000, "retry"),
        Tier(3, "orders-retry-3", 120_000, "retry"),
    )
    assert topology.dlt_topic == "orders-dlt"
    assert topology.dlt_tiers == (
        Tier(-1, "orders-dlt", 0, "dlt"),
        Tier(-1, "orders-validation-dlt", 0, "dlt"),
    )


def test_example_fixture_loads(tmp_path: Path) -> None:
    _assert_is_example(load_topology(EXAMPLE), EXAMPLE)


def test_example_written_to_tmp_path_loads(tmp_path: Path) -> None:
    copy = tmp_path / "orders.yaml"
    shutil.copy(EXAMPLE, copy)
    topology = load_topology(copy)
    _assert_is_example(topology, copy)
    from_fixture = load_topology(EXAMPLE)
    assert {**_fields(topology), "source": None} == {**_fields(from_fixture), "source": None}
    assert topology.tiers == from_fixture.tiers


def _fields(topology: Topology) -> dict:
    return {
        name: getattr(topology, name)
        for name in Topology.__dataclass_fields__
        if Topology.__dataclass_fields__[name].init
    }


def test_example_accepts_path_as_str() -> None:
    assert load_topology(str(EXAMPLE)).source == str(EXAMPLE)


def test_example_consumer_groups() -> None:
    topology = load_topology(EXAMPLE)
    assert [topology.consumer_group(t) for t in topology.tiers] == [
        "orders-service",
        "orders-service-orders-retry-1",
        "orders-service-orders-retry-2",
        "orders-service-orders-retry-3",
    ]
    assert [topology.consumer_group(t) for t in topology.dlt_tiers] == [
        "orders-service-orders-dlt",
        "orders-service-orders-validation-dlt",
    ]


def test_example_classifier() -> None:
    classifier = load_topology(EXAMPLE).classifier
    assert classifier.not_retryable == (
        *DEFAULT_NOT_RETRYABLE,
        "json.JSONDecodeError",
        "myapp.errors.InvalidOrder",
    )
    assert classifier.retry_only == ()
    assert classifier.traverse_causes is True
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads("{broken")
    assert classifier.is_fatal(info.value)
    assert classifier.is_fatal(InvalidOrder("no customer"))
    assert classifier.is_retryable(ConnectionError("broker away"))
    assert classifier.is_fatal(TypeError("default fatal"))


def test_example_to_dict_is_plain_json_data() -> None:
    data = load_topology(EXAMPLE).to_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["source"] == str(EXAMPLE)
    assert data["backoff"] == {"kind": "exponential", "delays_ms": [30_000, 60_000, 120_000]}
    assert data["tiers"][0] == {
        "index": 0,
        "topic": "orders",
        "kind": "main",
        "delay_ms": 0,
        "reusable": False,
        "consumer_group": "orders-service",
    }
    assert data["tiers"][3] == {
        "index": 3,
        "topic": "orders-retry-3",
        "kind": "retry",
        "delay_ms": 120_000,
        "reusable": False,
        "consumer_group": "orders-service-orders-retry-3",
    }
    assert data["dlt"] == "orders-dlt"
    assert data["dlt_topics"] == ["orders-dlt", "orders-validation-dlt"]
    assert data["dlt_routing"] == {"orders-validation-dlt": ["myapp.errors.InvalidOrder"]}
    assert data["dlt_strategy"] == "always_retry_on_error"
    assert data["timeout_ms"] == 7_200_000
    assert data["retry_only"] == []
    assert data["traverse_causes"] is True
    assert data["not_retryable"][-2:] == ["json.JSONDecodeError", "myapp.errors.InvalidOrder"]
    assert data["headers"] == {
        "include_stacktrace": True,
        "strip_previous_exception_headers": True,
        "max_header_bytes": 16_384,
        "naming": "retry_topic",
        "cause": "immediate",
    }


# ---------------------------------------------------------------------- defaults and each key
def test_minimal_topology_defaults(tmp_path: Path) -> None:
    topology = load(tmp_path)
    assert topology.attempts == 3
    assert topology.backoff == BackOff()
    assert topology.topic_suffixing == "index"
    assert topology.index_start == 1
    assert topology.retry_suffix == "-retry"
    assert topology.dlt_suffix == "-dlt"
    assert topology.reuse_same_interval is False
    assert topology.not_retryable == ()
    assert topology.default_not_retryable is True
    assert topology.retry_only == ()
    assert topology.traverse_causes is True
    assert topology.dlt_routing == ()
    assert topology.dlt_strategy == "always_retry_on_error"
    assert topology.timeout_ms is None
    assert topology.headers == HeaderPolicy()
    assert topology.tier_group_template == "{group_id}-{topic}"
    assert names(topology.tiers) == ["orders", "orders-retry-1", "orders-retry-2"]
    assert [t.delay_ms for t in topology.retry_tiers] == [1_000, 1_000]
    assert names(topology.dlt_tiers) == ["orders-dlt"]


def test_from_mapping_source_defaults_to_python() -> None:
    topology = Topology.from_mapping({"topic": "orders", "group_id": "g"})
    assert topology.source == "<python>"
    assert Topology.from_mapping({"topic": "orders", "group_id": "g"}, source="inline").source == "inline"


@pytest.mark.parametrize("topic", ["orders", "Orders.V2", "a", "my_topic-1.x", "x" * 240])
def test_topic_key(tmp_path: Path, topic: str) -> None:
    topology = load(tmp_path, base=f"topic: '{topic}'\ngroup_id: g\n")
    assert topology.topic == topic
    assert topology.tiers[0] == Tier(0, topic, 0, "main")
    assert topology.dlt_topic == f"{topic}-dlt"


@pytest.mark.parametrize("group_id", ["orders-service", "svc", "group with spaces", "ü-group"])
def test_group_id_key(tmp_path: Path, group_id: str) -> None:
    topology = load(tmp_path, base=f"topic: orders\ngroup_id: '{group_id}'\n")
    assert topology.group_id == group_id
    assert topology.consumer_group(topology.tiers[0]) == group_id


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [
        (1, ["orders"]),
        (2, ["orders", "orders-retry-1"]),
        (5, ["orders", "orders-retry-1", "orders-retry-2", "orders-retry-3", "orders-retry-4"]),
    ],
)
def test_attempts_key(tmp_path: Path, attempts: int, expected: list[str]) -> None:
    topology = load(tmp_path, f"attempts: {attempts}\n")
    assert topology.attempts == attempts
    assert names(topology.tiers) == expected
    assert [t.index for t in topology.tiers] == list(range(attempts))


def test_backoff_fixed(tmp_path: Path) -> None:
    topology = load(tmp_path, "attempts: 4\nbackoff: {kind: fixed, delay: 5s}\n")
    assert topology.backoff == BackOff("fixed", delay_ms=5_000)
    assert [t.delay_ms for t in topology.retry_tiers] == [5_000, 5_000, 5_000]


def test_backoff_kind_defaults_to_fixed(tmp_path: Path) -> None:
    assert load(tmp_path, "backoff: {delay: 2s}\n").backoff == BackOff("fixed", delay_ms=2_000)


def test_backoff_fixed_delay_defaults_to_one_second(tmp_path: Path) -> None:
    assert load(tmp_path, "backoff: {kind: fixed}\n").backoff == BackOff("fixed", delay_ms=1_000)


def test_backoff_exponential(tmp_path: Path) -> None:
    topology = load(
        tmp_path, "attempts: 7\nbackoff: {kind: exponential, initial: 1s, multiplier: 2, max: 10s}\n"
    )
    assert topology.backoff == BackOff("exponential", initial_ms=1_000, multiplier=2.0, max_ms=10_000)
    assert isinstance(topology.backoff.multiplier, float)
    assert [t.delay_ms for t in topology.retry_tiers] == [1_000, 2_000, 4_000, 8_000, 10_000, 10_000]


def test_backoff_exponential_defaults(tmp_path: Path) -> None:
    topology = load(tmp_path, "backoff: {kind: exponential}\n")
    assert topology.backoff == BackOff("exponential", initial_ms=1_000, multiplier=2.0, max_ms=30_000)


def test_backoff_exponential_block_style_with_plain_numbers(tmp_path: Path) -> None:
    topology = load(
        tmp_path,
        """\
        attempts: 4
        backoff:
          kind: exponential
          initial: 500
          multiplier: 1.5
          max: 1000.0
        """,
    )
    assert topology.backoff == BackOff("exponential", initial_ms=500, multiplier=1.5, max_ms=1_000)
    assert [t.delay_ms for t in topology.retry_tiers] == [500, 750, 1_000]


def test_backoff_custom(tmp_path: Path) -> None:
    topology = load(tmp_path, "attempts: 6\nbackoff: {kind: custom, delays: [1s, 5s, 30s]}\n")
    assert topology.backoff == BackOff("custom", delays=(1_000, 5_000, 30_000))
    # fewer entries than retries: the last one repeats
    assert [t.delay_ms for t in topology.retry_tiers] == [1_000, 5_000, 30_000, 30_000, 30_000]


def test_backoff_custom_mixed_duration_spellings(tmp_path: Path) -> None:
    topology = load(tmp_path, "attempts: 5\nbackoff: {kind: custom, delays: [500, 1500.0, 2s, 1m]}\n")
    assert topology.backoff.delays == (500, 1_500, 2_000, 60_000)


@pytest.mark.parametrize(
    ("suffixing", "expected"),
    [
        ("index", ["orders-retry-1", "orders-retry-2", "orders-retry-3"]),
        ("delay", ["orders-retry-1000", "orders-retry-2000", "orders-retry-4000"]),
    ],
)
def test_topic_suffixing_key(tmp_path: Path, suffixing: str, expected: list[str]) -> None:
    topology = load(
        tmp_path,
        f"""\
        attempts: 4
        backoff: {{kind: exponential, initial: 1s, multiplier: 2, max: 10s}}
        topic_suffixing: {suffixing}
        """,
    )
    assert topology.topic_suffixing == suffixing
    assert names(topology.retry_tiers) == expected


@pytest.mark.parametrize(
    ("index_start", "expected"),
    [
        (0, ["orders-retry-0", "orders-retry-1", "orders-retry-2"]),
        (1, ["orders-retry-1", "orders-retry-2", "orders-retry-3"]),
    ],
)
def test_index_start_key(tmp_path: Path, index_start: int, expected: list[str]) -> None:
    topology = load(tmp_path, f"attempts: 4\nindex_start: {index_start}\n")
    assert topology.index_start == index_start
    assert names(topology.retry_tiers) == expected
    # Tier.index stays 1..n whatever the naming
    assert [t.index for t in topology.retry_tiers] == [1, 2, 3]


@pytest.mark.parametrize(
    ("retry_suffix", "dlt_suffix", "retry_topics", "dlt"),
    [
        ("-retry", "-dlt", ["orders-retry-1", "orders-retry-2"], "orders-dlt"),
        ("-again", "-dead", ["orders-again-1", "orders-again-2"], "orders-dead"),
        (".retry", ".DLT", ["orders.retry-1", "orders.retry-2"], "orders.DLT"),
        ("_r", "_d", ["orders_r-1", "orders_r-2"], "orders_d"),
    ],
)
def test_retry_and_dlt_suffix_keys(
    tmp_path: Path, retry_suffix: str, dlt_suffix: str, retry_topics: list[str], dlt: str
) -> None:
    topology = load(tmp_path, f"retry_suffix: '{retry_suffix}'\ndlt_suffix: '{dlt_suffix}'\n")
    assert topology.retry_suffix == retry_suffix
    assert topology.dlt_suffix == dlt_suffix
    assert names(topology.retry_tiers) == retry_topics
    assert topology.dlt_topic == dlt
    assert names(topology.dlt_tiers) == [dlt]


def test_reuse_same_interval_key(tmp_path: Path) -> None:
    text = "attempts: 7\nbackoff: {kind: exponential, initial: 1s, multiplier: 2, max: 10s}\n"
    reused = load(tmp_path, text + "reuse_same_interval: true\n")
    separate = load(tmp_path, text + "reuse_same_interval: false\n")
    assert reused.reuse_same_interval is True
    assert separate.reuse_same_interval is False
    assert len(reused.retry_tiers) == 5
    assert len(separate.retry_tiers) == 6


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            "[json.JSONDecodeError, myapp.errors.InvalidOrder]",
            ("json.JSONDecodeError", "myapp.errors.InvalidOrder"),
        ),
        ("myapp.errors.InvalidOrder", ("myapp.errors.InvalidOrder",)),  # a single name
        ("[]", ()),
        ("null", ()),
    ],
)
def test_not_retryable_key(tmp_path: Path, value: str, expected: tuple[str, ...]) -> None:
    topology = load(tmp_path, f"not_retryable: {value}\n")
    assert topology.not_retryable == expected
    assert topology.classifier.not_retryable == (*DEFAULT_NOT_RETRYABLE, *expected)


def test_not_retryable_makes_classes_fatal(tmp_path: Path) -> None:
    topology = load(tmp_path, "not_retryable: [myapp.errors.InvalidOrder, KeyError]\n")
    assert topology.classifier.is_fatal(InvalidOrder())
    assert topology.classifier.is_fatal(KeyError("k"))
    assert not topology.classifier.is_fatal(ValueError("v"))


@pytest.mark.parametrize("flag", [True, False])
def test_default_not_retryable_key(tmp_path: Path, flag: bool) -> None:
    topology = load(tmp_path, f"default_not_retryable: {str(flag).lower()}\nnot_retryable: [KeyError]\n")
    assert topology.default_not_retryable is flag
    expected = (*DEFAULT_NOT_RETRYABLE, "KeyError") if flag else ("KeyError",)
    assert topology.classifier.not_retryable == expected
    assert topology.classifier.is_fatal(TypeError("default fatal")) is flag
    assert topology.classifier.is_fatal(KeyError("k"))


def test_retry_only_key(tmp_path: Path) -> None:
    topology = load(tmp_path, "retry_only: [ConnectionError, myapp.errors.Transient]\n")
    assert topology.retry_only == ("ConnectionError", "myapp.errors.Transient")
    assert topology.classifier.retry_only == ("ConnectionError", "myapp.errors.Transient")
    assert topology.classifier.is_retryable(ConnectionRefusedError())
    assert not topology.classifier.is_retryable(ValueError())
    assert topology.to_dict()["retry_only"] == ["ConnectionError", "myapp.errors.Transient"]


def test_retry_only_single_string(tmp_path: Path) -> None:
    assert load(tmp_path, "retry_only: TimeoutError\n").retry_only == ("TimeoutError",)


@pytest.mark.parametrize("flag", [True, False])
def test_traverse_causes_key(tmp_path: Path, flag: bool) -> None:
    topology = load(tmp_path, f"traverse_causes: {str(flag).lower()}\nnot_retryable: [KeyError]\n")
    assert topology.traverse_causes is flag
    assert topology.classifier.traverse_causes is flag
    wrapped = RuntimeError("wrapper")
    wrapped.__cause__ = KeyError("inner")
    assert topology.classifier.is_fatal(wrapped) is flag


def test_dlt_routing_key(tmp_path: Path) -> None:
    topology = load(
        tmp_path,
        """\
        dlt_routing:
          -validation-dlt: [myapp.errors.InvalidOrder, KeyError]
          -poison-dlt: UnicodeError
        """,
    )
    assert topology.dlt_routing == (
        ("-validation-dlt", ("myapp.errors.InvalidOrder", "KeyError")),
        ("-poison-dlt", ("UnicodeError",)),
    )
    assert names(topology.dlt_tiers) == ["orders-dlt", "orders-validation-dlt", "orders-poison-dlt"]
    assert all(t.kind == "dlt" and t.index == -1 and t.delay_ms == 0 for t in topology.dlt_tiers)
    assert topology.dlt_topic == "orders-dlt"  # the main DLT is always first
    assert topology.to_dict()["dlt_routing"] == {
        "orders-validation-dlt": ["myapp.errors.InvalidOrder", "KeyError"],
        "orders-poison-dlt": ["UnicodeError"],
    }


@pytest.mark.parametrize("value", ["{}", "null"])
def test_empty_dlt_routing_is_no_routing(tmp_path: Path, value: str) -> None:
    topology = load(tmp_path, f"dlt_routing: {value}\n")
    assert topology.dlt_routing == ()
    assert names(topology.dlt_tiers) == ["orders-dlt"]


@pytest.mark.parametrize("strategy", ["always_retry_on_error", "fail_on_error"])
def test_dlt_strategy_with_dlt(tmp_path: Path, strategy: str) -> None:
    topology = load(tmp_path, f"dlt_strategy: {strategy}\n")
    assert topology.dlt_strategy == strategy
    assert topology.dlt_topic == "orders-dlt"
    assert names(topology.dlt_tiers) == ["orders-dlt"]


def test_dlt_strategy_no_dlt(tmp_path: Path) -> None:
    topology = load(tmp_path, "dlt_strategy: no_dlt\n")
    assert topology.dlt_strategy == "no_dlt"
    assert topology.dlt_topic is None
    assert topology.dlt_tiers == ()
    assert topology.to_dict()["dlt"] is None
    assert topology.to_dict()["dlt_topics"] == []
    with pytest.raises(TopologyError, match="'orders-dlt' is not on this retry path"):
        topology.tier_for_topic("orders-dlt")


@pytest.mark.parametrize(
    ("value", "expected_ms"),
    [
        ("2h", 7_200_000),
        ("500ms", 500),
        ("30s", 30_000),
        ("1d", 86_400_000),
        ("60000", 60_000),
        ("45000", 45_000),
        ("1.5m", 90_000),
        ("null", None),
    ],
)
def test_timeout_key(tmp_path: Path, value: str, expected_ms: int | None) -> None:
    topology = load(tmp_path, f"timeout: {value}\n")
    assert topology.timeout_ms == expected_ms
    assert topology.to_dict()["timeout_ms"] == expected_ms


@pytest.mark.parametrize(
    ("yaml_headers", "expected"),
    [
        ("{include_stacktrace: false}", HeaderPolicy(include_stacktrace=False)),
        ("{strip_previous_exception_headers: false}", HeaderPolicy(strip_previous_exception_headers=False)),
        ("{max_header_bytes: 4096}", HeaderPolicy(max_header_bytes=4_096)),
        (f"{{max_header_bytes: {MIN_HEADER_BYTES}}}", HeaderPolicy(max_header_bytes=1_024)),
        ("{}", HeaderPolicy()),
        (
            "{include_stacktrace: false, strip_previous_exception_headers: false, max_header_bytes: 65536}",
            HeaderPolicy(False, False, 65_536),
        ),
        ("{naming: dead_letter}", HeaderPolicy(naming="dead_letter")),
        ("{naming: retry_topic}", HeaderPolicy()),
    ],
)
def test_headers_keys(tmp_path: Path, yaml_headers: str, expected: HeaderPolicy) -> None:
    topology = load(tmp_path, f"headers: {yaml_headers}\n")
    assert topology.headers == expected
    assert topology.to_dict()["headers"] == {
        "include_stacktrace": expected.include_stacktrace,
        "strip_previous_exception_headers": expected.strip_previous_exception_headers,
        "max_header_bytes": expected.max_header_bytes,
        "naming": expected.naming,
        "cause": expected.cause,
    }


def test_header_policy_defaults() -> None:
    assert HeaderPolicy() == HeaderPolicy(True, True, 16_384)
    assert MIN_HEADER_BYTES == 1_024


@pytest.mark.parametrize(
    ("template", "retry_group", "dlt_group"),
    [
        ("{group_id}-{topic}", "orders-service-orders-retry-1", "orders-service-orders-dlt"),
        ("{topic}.consumer", "orders-retry-1.consumer", "orders-dlt.consumer"),
        ("{group_id}.{topic}.v2", "orders-service.orders-retry-1.v2", "orders-service.orders-dlt.v2"),
        ("retry-{group_id}", "retry-orders-service", "retry-orders-service"),
    ],
)
def test_tier_group_template_key(tmp_path: Path, template: str, retry_group: str, dlt_group: str) -> None:
    topology = load(tmp_path, f"tier_group_template: '{template}'\n")
    assert topology.tier_group_template == template
    assert topology.consumer_group(topology.tiers[0]) == "orders-service"  # main keeps the service's group
    assert topology.consumer_group(topology.tiers[1]) == retry_group
    assert topology.consumer_group(topology.dlt_tiers[0]) == dlt_group


# ---------------------------------------------------------------------- tiers and topic names
def test_index_suffixing_names_and_delays() -> None:
    topology = make(attempts=4, backoff=BackOff("custom", delays=(1_000, 5_000, 30_000)))
    assert topology.tiers == (
        Tier(0, "orders", 0, "main"),
        Tier(1, "orders-retry-1", 1_000, "retry"),
        Tier(2, "orders-retry-2", 5_000, "retry"),
        Tier(3, "orders-retry-3", 30_000, "retry"),
    )
    assert topology.retry_tiers == topology.tiers[1:]


def test_index_start_zero_is_springs_naming() -> None:
    topology = make(attempts=4, index_start=0)
    assert names(topology.retry_tiers) == ["orders-retry-0", "orders-retry-1", "orders-retry-2"]


def test_delay_suffixing_single_delay() -> None:
    topology = make(attempts=2, topic_suffixing="delay", backoff=BackOff("fixed", delay_ms=30_000))
    assert names(topology.retry_tiers) == ["orders-retry-30000"]


def test_delay_suffixing_of_a_fixed_backoff_falls_back_to_indexes_from_zero_as_spring_does() -> None:
    # Spring's DestinationTopicPropertiesFactory: isFixedDelay (several delays, all equal) ->
    # joinWithRetrySuffix(indexInBackoffValues), whatever the suffixing strategy
    topology = make(attempts=4, topic_suffixing="delay", backoff=BackOff("fixed", delay_ms=30_000))
    assert names(topology.retry_tiers) == ["orders-retry-0", "orders-retry-1", "orders-retry-2"]
    custom = make(
        attempts=3, topic_suffixing="delay", index_start=1, backoff=BackOff("custom", delays=(5, 5))
    )
    assert names(custom.retry_tiers) == ["orders-retry-0", "orders-retry-1"]


def test_delay_suffixing_duplicates_get_an_index() -> None:
    topology = make(attempts=4, topic_suffixing="delay", backoff=BackOff("custom", delays=(1_000, 30_000)))
    assert names(topology.retry_tiers) == [
        "orders-retry-1000",
        "orders-retry-30000-0",
        "orders-retry-30000-1",
    ]


def test_delay_suffixing_spring_example_without_reuse() -> None:
    topology = make(
        attempts=7,
        topic_suffixing="delay",
        backoff=BackOff("exponential", initial_ms=1_000, multiplier=2.0, max_ms=10_000),
    )
    assert names(topology.retry_tiers) == [
        "orders-retry-1000",
        "orders-retry-2000",
        "orders-retry-4000",
        "orders-retry-8000",
        "orders-retry-10000-0",
        "orders-retry-10000-1",
    ]
    assert not any(t.reusable for t in topology.tiers)


def test_delay_suffixing_ignores_index_start() -> None:
    topology = make(
        attempts=3, topic_suffixing="delay", index_start=0, backoff=BackOff("custom", delays=(10, 20))
    )
    assert names(topology.retry_tiers) == ["orders-retry-10", "orders-retry-20"]


@pytest.mark.parametrize(
    ("suffixing", "expected"),
    [
        ("index", ["orders-retry-1", "orders-retry-2", "orders-retry-3", "orders-retry-4", "orders-retry-5"]),
        (
            "delay",
            [
                "orders-retry-1000",
                "orders-retry-2000",
                "orders-retry-4000",
                "orders-retry-8000",
                "orders-retry-10000",
            ],
        ),
    ],
)
def test_same_interval_reuse_collapses_trailing_equal_delays(suffixing: str, expected: list[str]) -> None:
    topology = make(
        attempts=7,
        topic_suffixing=suffixing,
        reuse_same_interval=True,
        backoff=BackOff("exponential", initial_ms=1_000, multiplier=2.0, max_ms=10_000),
    )
    assert names(topology.retry_tiers) == expected
    assert [t.delay_ms for t in topology.retry_tiers] == [1_000, 2_000, 4_000, 8_000, 10_000]
    assert [t.reusable for t in topology.tiers] == [False, False, False, False, False, True]
    last = topology.retry_tiers[-1]
    assert topology.next_tier(last) is last


def test_same_interval_reuse_longer_trailing_run() -> None:
    topology = make(attempts=6, reuse_same_interval=True, backoff=BackOff("custom", delays=(1_000, 5_000)))
    # delays 1s, 5s, 5s, 5s, 5s -> two tiers, the second reusable
    assert [(t.topic, t.delay_ms, t.reusable) for t in topology.retry_tiers] == [
        ("orders-retry-1", 1_000, False),
        ("orders-retry-2", 5_000, True),
    ]


@pytest.mark.parametrize("suffixing", ["index", "delay"])
def test_all_equal_delays_reuse_a_single_topic(suffixing: str) -> None:
    topology = make(
        attempts=5,
        topic_suffixing=suffixing,
        reuse_same_interval=True,
        backoff=BackOff("fixed", delay_ms=5_000),
    )
    assert topology.retry_tiers == (Tier(1, "orders-retry", 5_000, "retry", reusable=True),)
    assert topology.next_tier(topology.retry_tiers[0]) is topology.retry_tiers[0]


def test_all_equal_delays_single_topic_uses_retry_suffix() -> None:
    topology = make(attempts=3, reuse_same_interval=True, retry_suffix="-again")
    assert names(topology.retry_tiers) == ["orders-again"]


def test_reuse_with_distinct_delays_changes_nothing() -> None:
    kwargs = dict(attempts=4, backoff=BackOff("custom", delays=(1_000, 2_000, 3_000)))
    assert make(reuse_same_interval=True, **kwargs).tiers == make(**kwargs).tiers
    assert not any(t.reusable for t in make(reuse_same_interval=True, **kwargs).tiers)


@pytest.mark.parametrize("suffixing", ["index", "delay"])
def test_reuse_with_a_single_retry_names_it_with_the_bare_suffix_as_spring_does(suffixing: str) -> None:
    # Spring: isSameIntervalReuse && retryTopicsAmount == 1 -> the retry suffix alone; one
    # attempt goes through it, so it is not reusable
    topology = make(attempts=2, reuse_same_interval=True, topic_suffixing=suffixing)
    assert topology.retry_tiers == (Tier(1, "orders-retry", 1_000, "retry", reusable=False),)
    assert topology.next_tier(topology.retry_tiers[0]) is None


def test_reuse_with_the_last_delay_repeated_earlier_is_an_error() -> None:
    # 10, 5, 10, 10: Spring assumes repeats are at the end (v3.2.10
    # DestinationTopicPropertiesFactory.java:222)
    # and would give 10000 a reusable topic that 5000 comes after; refuse it, naming the delays.
    with pytest.raises(
        TopologyError, match=r"10000 ms repeats earlier in \[10000, 5000, 10000, 10000\]"
    ) as info:
        make(
            attempts=5,
            reuse_same_interval=True,
            topic_suffixing="delay",
            backoff=BackOff("custom", delays=(10_000, 5_000, 10_000, 10_000)),
        )
    assert info.value.field == "reuse_same_interval"


def test_without_reuse_equal_delays_get_separate_topics() -> None:
    topology = make(attempts=4, backoff=BackOff("fixed", delay_ms=5_000))
    assert names(topology.retry_tiers) == ["orders-retry-1", "orders-retry-2", "orders-retry-3"]
    assert not any(t.reusable for t in topology.tiers)


def test_single_attempt_has_no_retry_tiers() -> None:
    topology = make(attempts=1, reuse_same_interval=True)
    assert topology.tiers == (Tier(0, "orders", 0, "main"),)
    assert topology.retry_tiers == ()
    assert topology.next_tier(topology.tiers[0]) is None


def test_all_topic_names_are_distinct() -> None:
    topology = make(
        attempts=8,
        topic_suffixing="delay",
        dlt_routing=(("-a-dlt", ("KeyError",)), ("-b-dlt", ("OSError",))),
        backoff=BackOff("custom", delays=(1, 2, 1, 2, 1)),
    )
    all_topics = names(topology.tiers) + names(topology.dlt_tiers)
    assert len(set(all_topics)) == len(all_topics)


def test_dlt_topic_names() -> None:
    topology = make(dlt_routing=(("-validation-dlt", ("myapp.errors.InvalidOrder",)),))
    assert topology.dlt_topic == "orders-dlt"
    assert topology.dlt_tiers == (
        Tier(-1, "orders-dlt", 0, "dlt"),
        Tier(-1, "orders-validation-dlt", 0, "dlt"),
    )


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (DEFAULT_TIER_GROUP_TEMPLATE, ["svc", "svc-orders-retry-1", "svc-orders-retry-2", "svc-orders-dlt"]),
        ("{topic}-grp", ["svc", "orders-retry-1-grp", "orders-retry-2-grp", "orders-dlt-grp"]),
    ],
)
def test_consumer_group_per_tier(template: str, expected: list[str]) -> None:
    topology = make(group_id="svc", tier_group_template=template)
    assert [topology.consumer_group(t) for t in (*topology.tiers, *topology.dlt_tiers)] == expected


def test_consumer_groups_of_retry_tiers_are_distinct_by_default() -> None:
    topology = make(attempts=6)
    groups = [topology.consumer_group(t) for t in (*topology.tiers, *topology.dlt_tiers)]
    assert len(set(groups)) == len(groups)


# ---------------------------------------------------------------------- queries
def test_tier_by_index() -> None:
    topology = make(attempts=3)
    assert topology.tier(0) == Tier(0, "orders", 0, "main")
    assert topology.tier(2).topic == "orders-retry-2"


@pytest.mark.parametrize("index", [-1, 3, 99, True, "1", 1.0, None])
def test_tier_out_of_range(index: object) -> None:
    topology = make(attempts=3)
    with pytest.raises(TopologyError) as info:
        topology.tier(index)  # type: ignore[arg-type]
    assert str(info.value) == (
        f"<python>: field 'tier': tier {index!r} does not exist; valid tiers are 0 (main topic 'orders') to 2"
    )


def test_tier_for_topic() -> None:
    topology = make(attempts=3, dlt_routing=(("-validation-dlt", ("KeyError",)),))
    assert topology.tier_for_topic("orders") is topology.tiers[0]
    assert topology.tier_for_topic("orders-retry-2") is topology.tiers[2]
    assert topology.tier_for_topic("orders-dlt") == Tier(-1, "orders-dlt", 0, "dlt")
    assert topology.tier_for_topic("orders-validation-dlt") == Tier(-1, "orders-validation-dlt", 0, "dlt")


def test_tier_for_unknown_topic_names_source_and_known_topics(tmp_path: Path) -> None:
    topology = load(tmp_path, "attempts: 2\n")
    with pytest.raises(TopologyError) as info:
        topology.tier_for_topic("payments")
    message = str(info.value)
    assert message.startswith(str(tmp_path / "topology.yaml"))
    assert "field 'topic'" in message
    assert "'payments' is not on this retry path (orders, orders-retry-1, orders-dlt)" in message


def test_next_tier() -> None:
    topology = make(attempts=3, dlt_routing=(("-x-dlt", ("KeyError",)),))
    main, first, second = topology.tiers
    assert topology.next_tier(main) is first
    assert topology.next_tier(first) is second
    assert topology.next_tier(second) is None
    for dlt in topology.dlt_tiers:
        assert topology.next_tier(dlt) is None


@pytest.mark.parametrize(
    ("spec", "topic"),
    [
        (0, "orders"),
        (2, "orders-retry-2"),
        ("0", "orders"),
        ("1", "orders-retry-1"),
        ("orders-retry-2", "orders-retry-2"),
        ("dlt", "orders-dlt"),
        ("orders-validation-dlt", "orders-validation-dlt"),
        ("orders", "orders"),
    ],
)
def test_select(spec: int | str, topic: str) -> None:
    topology = make(attempts=3, dlt_routing=(("-validation-dlt", ("KeyError",)),))
    assert topology.select(spec).topic == topic


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (3, "tier 3 does not exist"),
        ("7", "tier 7 does not exist"),
        ("payments", "'payments' is not on this retry path"),
        ("-1", "'-1' is not on this retry path"),
    ],
)
def test_select_unknown(spec: int | str, fragment: str) -> None:
    with pytest.raises(TopologyError, match=fragment):
        make(attempts=3).select(spec)


def test_select_dlt_under_no_dlt() -> None:
    with pytest.raises(TopologyError) as info:
        make(dlt_strategy="no_dlt").select("dlt")
    assert str(info.value) == "<python>: field 'tier': this topology has no DLT (dlt_strategy: no_dlt)"


def test_destinations_from() -> None:
    topology = make(attempts=3, dlt_routing=(("-validation-dlt", ("KeyError",)),))
    main, first, last = topology.tiers
    dlts = [
        "orders-dlt",
        "orders-validation-dlt",
        "orders-parking",
    ]  # parking: replayed records that fail again
    assert topology.destinations_from(main) == ["orders-retry-1", *dlts]
    assert topology.destinations_from(first) == ["orders-retry-2", *dlts]
    assert topology.destinations_from(last) == dlts
    assert topology.destinations_from(topology.dlt_tiers[1]) == dlts


def test_destinations_from_reusable_tier_and_no_dlt() -> None:
    reused = make(attempts=4, reuse_same_interval=True)
    assert reused.destinations_from(reused.tiers[1]) == ["orders-retry", "orders-dlt", "orders-parking"]
    no_dlt = make(attempts=2, dlt_strategy="no_dlt")
    assert no_dlt.destinations_from(no_dlt.tiers[0]) == ["orders-retry-1"]
    assert no_dlt.destinations_from(no_dlt.tiers[1]) == []


def test_topology_is_frozen() -> None:
    topology = make()
    with pytest.raises(AttributeError):
        topology.attempts = 5  # type: ignore[misc]


# ---------------------------------------------------------------------- validation messages
def assert_located(error: TopologyError, path: Path, field: str | None, *fragments: str) -> None:
    message = str(error)
    assert message.startswith(f"{path}: "), message
    assert error.source == str(path)
    if field is not None:
        assert f"field '{field}'" in message, message
        assert error.field == field
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("topik", "did you mean 'topic'?"),
        ("retry_sufix", "did you mean 'retry_suffix'?"),
        ("groupid", "did you mean 'group_id'?"),
        ("backof", "did you mean 'backoff'?"),
        ("not_retriable", "did you mean 'not_retryable'?"),
        ("timeout_ms", "did you mean 'timeout'?"),
        ("header", "did you mean 'headers'?"),
    ],
)
def test_unknown_key_with_did_you_mean(tmp_path: Path, key: str, suggestion: str) -> None:
    error, path = load_error(tmp_path, BASE + f"{key}: 1\n")
    assert_located(error, path, key, "unknown key", suggestion)
    assert str(error) == f"{path}: field '{key}': unknown key; {suggestion}"


def test_unknown_key_without_close_match_lists_known_keys(tmp_path: Path) -> None:
    error, path = load_error(tmp_path, BASE + "zzz: 1\n")
    assert_located(error, path, "zzz", "unknown key; known keys: topic, group_id, attempts, backoff")
    assert "tier_group_template" in str(error)


@pytest.mark.parametrize(
    ("backoff", "field", "fragment"),
    [
        ("{kind: exponential, maximum: 10s}", "backoff.maximum", "did you mean 'max'?"),
        ("{kind: exponential, delay: 10s}", "backoff.delay", "known keys: kind, initial, multiplier, max"),
        ("{kind: fixed, delay_ms: 10s}", "backoff.delay_ms", "did you mean 'delay'?"),
        ("{kind: fixed, initial: 1s}", "backoff.initial", "known keys: kind, delay"),
        ("{kind: custom, delay: 1s, delays: [1s]}", "backoff.delay", "did you mean 'delays'?"),
    ],
)
def test_unknown_backoff_key(tmp_path: Path, backoff: str, field: str, fragment: str) -> None:
    error, path = load_error(tmp_path, BASE + f"backoff: {backoff}\n")
    assert_located(error, path, field, "unknown key", fragment)


def test_unknown_headers_key(tmp_path: Path) -> None:
    error, path = load_error(tmp_path, BASE + "headers: {include_stack: true}\n")
    assert_located(
        error,
        path,
        "headers.include_stack",
        "unknown key; did you mean 'include_stacktrace'?",
    )


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("group_id: orders-service\n", "topic"),
        ("topic: orders\n", "group_id"),
    ],
)
def test_missing_required(tmp_path: Path, text: str, field: str) -> None:
    error, path = load_error(tmp_path, text)
    assert str(error) == f"{path}: field '{field}': is required"


def test_missing_both_required_keys_reports_both(tmp_path: Path) -> None:
    error, path = load_error(tmp_path, "attempts: 3\n")
    assert [(e.source, e.field, e.problem) for e in error.errors] == [
        (str(path), "topic", "is required"),
        (str(path), "group_id", "is required"),
    ]
    assert str(error) == (
        f"2 problems:\n  - {path}: field 'topic': is required\n  - {path}: field 'group_id': is required"
    )


@pytest.mark.parametrize(
    ("extra", "field", "fragment"),
    [
        (
            "timeout: 5 minutes\n",
            "timeout",
            "expected a duration like '500ms', '30s', '5m', '2h' or milliseconds",
        ),
        ("timeout: 30x\n", "timeout", "got '30x'"),
        ("timeout: -5s\n", "timeout", "got '-5s'"),
        ("timeout: -5\n", "timeout", "cannot be negative"),
        ("timeout: true\n", "timeout", "got True"),
        ("timeout: 0.5ms\n", "timeout", "not a whole number of milliseconds"),
        ("timeout: 0\n", "timeout", "must be a positive duration"),
        ("timeout: 0s\n", "timeout", "must be a positive duration"),
        ("backoff: {kind: fixed, delay: fast}\n", "backoff.delay", "got 'fast'"),
        ("backoff: {kind: exponential, initial: soon}\n", "backoff.initial", "got 'soon'"),
        ("backoff: {kind: exponential, max: 10 mins}\n", "backoff.max", "got '10 mins'"),
        ("backoff: {kind: custom, delays: [1s, later, 3s]}\n", "backoff.delays[1]", "got 'later'"),
        ("backoff: {kind: custom, delays: [1s, 2.5]}\n", "backoff.delays[1]", "whole, non-negative"),
    ],
)
def test_bad_durations(tmp_path: Path, extra: str, field: str, fragment: str) -> None:
    error, path = load_error(tmp_path, BASE + extra)
    assert_located(error, path, field, fragment)


@pytest.mark.parametrize(
    ("extra", "field", "fragment"),
    [
        (
            "attempts: '3'\n",
            "attempts",
            "must be an integer from 1 to 32766 (total attempts, first included), got '3'",
        ),
        ("attempts: 0\n", "attempts", "got 0"),
        ("attempts: -2\n", "attempts", "got -2"),
        ("attempts: true\n", "attempts", "got True"),
        ("attempts: 2.5\n", "attempts", "got 2.5"),
        ("reuse_same_interval: 'yes'\n", "reuse_same_interval", "must be true or false, got 'yes'"),
        ("reuse_same_interval: 1\n", "reuse_same_interval", "must be true or false, got 1"),
        ("default_not_retryable: 0\n", "default_not_retryable", "must be true or false, got 0"),
        ("traverse_causes: 'no'\n", "traverse_causes", "must be true or false, got 'no'"),
        ("not_retryable: {a: b}\n", "not_retryable", "must be a list of dotted exception class paths"),
        ("not_retryable: 5\n", "not_retryable", "must be a list of dotted exception class paths, got 5"),
        ("not_retryable: [KeyError, 1]\n", "not_retryable[1]", "1 is not a dotted exception class path"),
        (
            "not_retryable: ['not a class']\n",
            "not_retryable[0]",
            "'not a class' is not a dotted exception class",
        ),
        ("not_retryable: [myapp..Error]\n", "not_retryable[0]", "'myapp..Error' is not a dotted"),
        (
            "retry_only: [my-app.Error]\n",
            "retry_only[0]",
            "'my-app.Error' is not a dotted exception class path",
        ),
        ("retry_only: [1up.Error]\n", "retry_only[0]", "'1up.Error' is not a dotted"),
        ("backoff: 5s\n", "backoff", "must be a mapping with 'kind' and its settings"),
        ("backoff: [fixed]\n", "backoff", "must be a mapping"),
        ("backoff: {kind: linear}\n", "backoff.kind", "must be fixed, exponential or custom, got 'linear'"),
        (
            "backoff: {kind: exponential, multiplier: '2'}\n",
            "backoff.multiplier",
            "must be a number >= 1.0, got '2'",
        ),
        ("backoff: {kind: exponential, multiplier: true}\n", "backoff.multiplier", "got True"),
        ("backoff: {kind: exponential, multiplier: 0.5}\n", "backoff", "multiplier must be >= 1.0, got 0.5"),
        (
            "backoff: {kind: exponential, initial: 1m}\n",
            "backoff",
            "max (30000 ms) is smaller than initial (60000 ms)",
        ),
        ("backoff: {kind: custom}\n", "backoff.delays", "must be a non-empty list of durations"),
        ("backoff: {kind: custom, delays: []}\n", "backoff.delays", "must be a non-empty list of durations"),
        ("backoff: {kind: custom, delays: 5s}\n", "backoff.delays", "must be a non-empty list of durations"),
        ("topic_suffixing: name\n", "topic_suffixing", "must be one of index, delay, got 'name'"),
        (
            "dlt_strategy: retry\n",
            "dlt_strategy",
            "must be one of always_retry_on_error, fail_on_error, no_dlt, got 'retry'",
        ),
        ("index_start: 2\n", "index_start", "must be 0 (Spring's naming) or 1, got 2"),
        ("index_start: '1'\n", "index_start", "got '1'"),
        ("retry_suffix: ''\n", "retry_suffix", "must be a non-empty string"),
        ("retry_suffix: 5\n", "retry_suffix", "must be a non-empty string"),
        ("dlt_suffix: null\n", "dlt_suffix", "must be a non-empty string"),
        ("dlt_suffix: -retry\n", "dlt_suffix", "retry_suffix and dlt_suffix must differ"),
        (
            "dlt_routing: [a, b]\n",
            "dlt_routing",
            "must map a topic suffix (e.g. -validation-dlt) to exception classes",
        ),
        ("dlt_routing: {-x-dlt: []}\n", "dlt_routing.-x-dlt", "list at least one exception class"),
        (
            "dlt_routing: {-x-dlt: null}\n",
            "dlt_routing.-x-dlt",
            "must be a list of dotted exception class paths",
        ),
        (
            "dlt_routing: {-x-dlt: [KeyError, 'bad name']}\n",
            "dlt_routing.-x-dlt[1]",
            "'bad name' is not a dotted exception class path",
        ),
        ("dlt_routing: {-dlt: [KeyError]}\n", "dlt_routing.-dlt", "suffix '-dlt' is used twice"),
        ("headers: 5\n", "headers", "must be a mapping, got 5"),
        ("headers: null\n", "headers", "must be a mapping, got None"),
        (
            "headers: {include_stacktrace: 'yes'}\n",
            "headers.include_stacktrace",
            "must be true or false, got 'yes'",
        ),
        (
            "headers: {strip_previous_exception_headers: 1}\n",
            "headers.strip_previous_exception_headers",
            "must be true or false, got 1",
        ),
        (
            "headers: {max_header_bytes: 16k}\n",
            "headers.max_header_bytes",
            "must be an integer >= 1024, got '16k'",
        ),
        ("headers: {max_header_bytes: 2048.0}\n", "headers.max_header_bytes", "got 2048.0"),
        ("headers: {max_header_bytes: true}\n", "headers.max_header_bytes", "got True"),
        (
            "tier_group_template: static-group\n",
            "tier_group_template",
            "must be a string containing {group_id} or {topic}, got 'static-group'",
        ),
        ("group_id: ''\n", "group_id", "a non-empty consumer group id is required"),
        ("group_id: '   '\n", "group_id", "a non-empty consumer group id is required"),
        ("group_id: 123\n", "group_id", "a non-empty consumer group id is required"),
    ],
)
def test_bad_values(tmp_path: Path, extra: str, field: str, fragment: str) -> None:
    # later keys win in PyYAML, so "group_id: ''" below BASE overrides BASE's group_id
    error, path = load_error(tmp_path, BASE + extra)
    assert_located(error, path, field, fragment)


def test_both_retry_only_and_not_retryable(tmp_path: Path) -> None:
    error, path = load_error(tmp_path, BASE + "not_retryable: [KeyError]\nretry_only: [ConnectionError]\n")
    assert str(error) == (
        f"{path}: field 'retry_only': set either not_retryable or retry_only, not both (as in Spring)"
    )


def test_retry_only_with_default_not_retryable_is_fine(tmp_path: Path) -> None:
    topology = load(tmp_path, "retry_only: [ConnectionError]\ndefault_not_retryable: true\n")
    assert topology.classifier.not_retryable == DEFAULT_NOT_RETRYABLE


@pytest.mark.parametrize(
    "topic",
    ["orders topic", "orders/x", "orders:v1", "ordérs", "orders!", "", "x" * 250],
)
def test_illegal_topic_name(tmp_path: Path, topic: str) -> None:
    error, path = load_error(tmp_path, f"topic: '{topic}'\ngroup_id: g\n")
    assert_located(error, path, "topic", f"{topic!r} is not a legal Kafka topic name")


@pytest.mark.parametrize("topic", ["123", "null", "[a, b]"])
def test_topic_of_wrong_type(tmp_path: Path, topic: str) -> None:
    error, path = load_error(tmp_path, f"topic: {topic}\ngroup_id: g\n")
    assert_located(error, path, "topic", "is not a legal Kafka topic name")


def test_derived_topic_name_too_long(tmp_path: Path) -> None:
    topic = (
        "x" * 245
    )  # legal itself, but x...x-retry-1 is 253 characters (a short parking suffix keeps that legal)
    error, path = load_error(tmp_path, f"topic: {topic}\ngroup_id: g\nparking_suffix: -p\n")
    assert_located(
        error,
        path,
        "retry_suffix",
        f"derived topic name '{topic}-retry-1' is not a legal Kafka topic name",
        "1-249 characters from a-z A-Z 0-9 . _ -",
    )


def test_derived_dlt_name_illegal(tmp_path: Path) -> None:
    error, path = load_error(tmp_path, BASE + "dlt_routing: {'-bad dlt': [KeyError]}\n")
    assert_located(error, path, None, "derived topic name 'orders-bad dlt' is not a legal Kafka topic name")


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "null\n", "~\n"])
def test_empty_yaml(tmp_path: Path, text: str) -> None:
    error, path = load_error(tmp_path, text)
    assert str(error) == f"{path}: the file is empty; a topology needs at least 'topic' and 'group_id'"
    assert error.field is None


@pytest.mark.parametrize(
    ("text", "kind"),
    [("- topic: orders\n- group_id: g\n", "list"), ("just a string\n", "str"), ("42\n", "int")],
)
def test_yaml_that_is_not_a_mapping(tmp_path: Path, text: str, kind: str) -> None:
    error, path = load_error(tmp_path, text)
    assert str(error) == f"{path}: a topology must be a mapping of keys, got {kind}"


def test_invalid_yaml_names_line(tmp_path: Path) -> None:
    error, path = load_error(tmp_path, "topic: orders\ngroup_id: orders-service\nattempts: 3: 4\n")
    message = str(error)
    assert message.startswith(f"{path}: not valid YAML at line 3, column ")
    assert "mapping values are not allowed here" in message


def test_invalid_yaml_names_line_of_bad_indentation(tmp_path: Path) -> None:
    text = "topic: orders\ngroup_id: orders-service\nbackoff:\n  kind: fixed\n   delay: 5s\nattempts: 3\n"
    error, path = load_error(tmp_path, text)
    assert str(error).startswith(f"{path}: not valid YAML at line 5, column ")


def test_invalid_yaml_unclosed_flow_mapping(tmp_path: Path) -> None:
    error, path = load_error(tmp_path, "topic: orders\ngroup_id: g\nbackoff: {kind: fixed, delay: 5s\n")
    assert str(error).startswith(f"{path}: not valid YAML at line ")


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(TopologyError) as info:
        load_topology(path)
    assert str(info.value).startswith(f"{path}: cannot read the file: ")
    assert "No such file" in str(info.value)


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="cannot read the file"):
        load_topology(tmp_path)


@pytest.mark.parametrize("value", [0, 100, 1023, -1])
def test_headers_max_header_bytes_too_small(tmp_path: Path, value: int) -> None:
    error, path = load_error(tmp_path, BASE + f"headers: {{max_header_bytes: {value}}}\n")
    assert str(error) == f"{path}: field 'headers.max_header_bytes': must be an integer >= 1024, got {value}"


def test_dlt_routing_under_no_dlt(tmp_path: Path) -> None:
    error, path = load_error(
        tmp_path,
        BASE
        + """\
dlt_strategy: no_dlt
dlt_routing:
  -validation-dlt: [myapp.errors.InvalidOrder]
""",
    )
    assert str(error) == (
        f"{path}: field 'dlt_routing.-validation-dlt': "
        "exception-specific DLTs make no sense with dlt_strategy: no_dlt"
    )


def test_validation_from_python_mapping_names_python_source() -> None:
    with pytest.raises(TopologyError) as info:
        Topology.from_mapping({"topic": "orders", "group_id": "g", "attempts": 0})
    assert str(info.value).startswith("<python>: field 'attempts': ")


def test_direct_construction_validates() -> None:
    with pytest.raises(TopologyError, match="field 'retry_only'"):
        Topology(topic="orders", group_id="g", not_retryable=("KeyError",), retry_only=("OSError",))
    with pytest.raises(TopologyError, match="field 'timeout': must be a positive duration"):
        Topology(topic="orders", group_id="g", timeout_ms=-1)


def test_topology_error_is_value_error() -> None:
    assert issubclass(TopologyError, ValueError)


# ---------------------------------------------------------------------- TopologyError itself
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "bad"),
        ({"field": "backoff.initial"}, "field 'backoff.initial': bad"),
        ({"source": "t.yaml"}, "t.yaml: bad"),
        ({"field": "topic", "source": "t.yaml"}, "t.yaml: field 'topic': bad"),
    ],
)
def test_topology_error_message(kwargs: dict, message: str) -> None:
    error = TopologyError("bad", **kwargs)
    assert str(error) == message
    assert error.problem == "bad"
    assert error.field == kwargs.get("field")
    assert error.source == kwargs.get("source")


def test_topology_error_located() -> None:
    inner = TopologyError("must be true or false", field="include_stacktrace")
    outer = inner.located(source="t.yaml", field_prefix="headers")
    assert str(outer) == "t.yaml: field 'headers.include_stacktrace': must be true or false"
    assert outer.field == "headers.include_stacktrace"
    assert outer.source == "t.yaml"
    assert outer.problem == inner.problem
    # no field of its own: the prefix becomes the field; an existing source is kept
    assert TopologyError("x").located(field_prefix="headers").field == "headers"
    assert TopologyError("x", source="a.yaml").located().source == "a.yaml"
    assert TopologyError("x", source="a.yaml").located(source="b.yaml").source == "b.yaml"


# ---------------------------------------------------------------------- regressions of fixed bugs
def test_bug_backoff_kind_of_unhashable_type(tmp_path: Path) -> None:
    error, path = load_error(tmp_path, BASE + "backoff: {kind: [fixed]}\n")
    assert_located(error, path, "backoff.kind", "must be fixed, exponential or custom")


def test_bug_tier_group_template_of_wrong_type(tmp_path: Path) -> None:
    error, path = load_error(tmp_path, BASE + "tier_group_template: 5\n")
    assert_located(error, path, "tier_group_template")


@pytest.mark.parametrize("template", ["{group_id}-{tier}", "{group_id}-{topic"])
def test_bug_tier_group_template_unusable(tmp_path: Path, template: str) -> None:
    error, path = load_error(tmp_path, BASE + f"tier_group_template: '{template}'\n")
    assert_located(error, path, "tier_group_template")


@pytest.mark.parametrize(
    ("extra", "field", "collision"),
    [
        ("dlt_suffix: -retry-1\n", "dlt_suffix", "'orders-retry-1' is also the retry tier 1 topic"),
        (
            "dlt_routing: {-retry-2: [KeyError]}\n",
            "dlt_routing.-retry-2",
            "'orders-retry-2' is also the retry tier 2",
        ),
        ("dlt_routing: {'': [KeyError]}\n", "dlt_routing.", "'orders' is also the main tier 0 topic"),
    ],
)
def test_bug_topic_name_collisions_rejected(tmp_path: Path, extra: str, field: str, collision: str) -> None:
    error, path = load_error(tmp_path, BASE + extra)
    assert_located(
        error, path, field, f"derived topic name {collision}", "every tier and DLT needs its own topic"
    )


@pytest.mark.parametrize("topic", [".", ".."])
def test_bug_dot_topic_names_are_illegal(tmp_path: Path, topic: str) -> None:
    error, path = load_error(tmp_path, f"topic: '{topic}'\ngroup_id: g\n")
    assert_located(error, path, "topic", "is not a legal Kafka topic name")


def test_bug_index_start_bool_rejected(tmp_path: Path) -> None:
    error, path = load_error(tmp_path, BASE + "index_start: true\n")
    assert_located(error, path, "index_start", "got True")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("retry_suffix: /retry\n", "retry_suffix"),
        ("dlt_suffix: ' dlt'\n", "dlt_suffix"),
        ("dlt_routing: {'-bad dlt': [KeyError]}\n", "dlt_routing.-bad dlt"),
    ],
)
def test_bug_derived_name_error_names_the_offending_field(tmp_path: Path, extra: str, field: str) -> None:
    error, path = load_error(tmp_path, BASE + extra)
    assert_located(error, path, field, "is not a legal Kafka topic name")
