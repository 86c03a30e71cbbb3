"""Tests of airflow_kafka_retry.policy.routing.resolver (pure, injected clock, no network, no Airflow)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from airflow_kafka_retry.policy.errors import TopologyError
from airflow_kafka_retry.policy.headers.codec import ATTEMPTS, encode_int32, read_attempts
from airflow_kafka_retry.policy.routing.resolver import Destination, DestinationResolver, wall_clock_ms
from airflow_kafka_retry.policy.timing.backoff import BackOff
from airflow_kafka_retry.policy.topology.file import load_topology
from airflow_kafka_retry.policy.topology.model import Topology

EXAMPLE = Path(__file__).parent / "fixtures" / "policy_orders_topology.yaml"
NOW = 1_700_000_000_000
HOUR = 3_600_000


class InvalidOrder(ValueError):
    """Stands in for myapp.errors.InvalidOrder (matched by MRO name, not importable)."""


InvalidOrder.__module__ = "myapp.errors"


def json_error() -> json.JSONDecodeError:
    try:
        json.loads("{oops")
    except json.JSONDecodeError as exc:
        return exc
    raise AssertionError("unreachable")


def wrapped(outer: BaseException, cause: BaseException) -> BaseException:
    try:
        raise outer from cause
    except BaseException as exc:
        return exc


def make(**kwargs) -> Topology:
    kwargs.setdefault("topic", "orders")
    kwargs.setdefault("group_id", "orders-service")
    return Topology(**kwargs)


def resolver_for(topology: Topology, now: int = NOW) -> DestinationResolver:
    return DestinationResolver(topology, clock=lambda: now)


def resolve(
    resolver: DestinationResolver,
    topic: str,
    attempt: int,
    exc: BaseException,
    *,
    partition: int = 3,
    original: int | None = None,
) -> Destination:
    return resolver.resolve(
        topic=topic,
        partition=partition,
        attempt=attempt,
        exception=exc,
        original_timestamp_ms=NOW if original is None else original,
    )


@pytest.fixture
def example() -> DestinationResolver:
    return resolver_for(load_topology(EXAMPLE))


# ---------------------------------------------------------------------- retries
@pytest.mark.parametrize(
    ("topic", "attempt", "next_topic", "delay"),
    [
        ("orders", 1, "orders-retry-1", 30_000),
        ("orders-retry-1", 2, "orders-retry-2", 60_000),
        ("orders-retry-2", 3, "orders-retry-3", 120_000),
    ],
)
def test_retryable_failure_goes_to_next_tier(
    example: DestinationResolver, topic: str, attempt: int, next_topic: str, delay: int
) -> None:
    assert resolve(example, topic, attempt, ConnectionError("broker away")) == Destination(
        action="retry",
        topic=next_topic,
        partition=3,
        next_attempt=attempt + 1,
        due_ms=NOW + delay,
        delay_ms=delay,
        reason="retryable",
    )


@pytest.mark.parametrize("partition", [0, 1, 7, 99])
def test_same_partition(example: DestinationResolver, partition: int) -> None:
    assert resolve(example, "orders", 1, ValueError(), partition=partition).partition == partition
    assert resolve(example, "orders-retry-3", 4, ValueError(), partition=partition).partition == partition
    assert resolve(example, "orders", 1, json_error(), partition=partition).partition == partition


def test_due_time_uses_injected_clock_at_resolve_time() -> None:
    ticks = iter([1_000, 5_000])
    resolver = DestinationResolver(make(backoff=BackOff("fixed", delay_ms=250)), clock=lambda: next(ticks))
    first = resolver.resolve(
        topic="orders", partition=0, attempt=1, exception=ValueError(), original_timestamp_ms=0
    )
    second = resolver.resolve(
        topic="orders-retry-1", partition=0, attempt=2, exception=ValueError(), original_timestamp_ms=0
    )
    assert (first.due_ms, first.delay_ms) == (1_250, 250)
    assert (second.topic, second.due_ms, second.delay_ms) == ("orders-retry-2", 5_250, 250)


def test_default_clock_is_wall_clock() -> None:
    before = time.time_ns() // 1_000_000
    now = wall_clock_ms()
    after = time.time_ns() // 1_000_000
    assert before <= now <= after
    resolver = DestinationResolver(make())
    assert resolver.clock is wall_clock_ms
    dest = resolver.resolve(
        topic="orders", partition=0, attempt=1, exception=ValueError(), original_timestamp_ms=before
    )
    assert before + 1_000 <= dest.due_ms <= time.time_ns() // 1_000_000 + 1_000


def test_full_path_of_a_record_that_always_fails(example: DestinationResolver) -> None:
    topic, attempt, path = "orders", 1, []
    while True:
        dest = resolve(example, topic, attempt, RuntimeError("still broken"))
        path.append((dest.action, dest.topic, dest.next_attempt, dest.delay_ms, dest.reason))
        if dest.action != "retry":
            break
        topic, attempt = dest.topic, dest.next_attempt
    assert path == [
        ("retry", "orders-retry-1", 2, 30_000, "retryable"),
        ("retry", "orders-retry-2", 3, 60_000, "retryable"),
        ("retry", "orders-retry-3", 4, 120_000, "retryable"),
        ("dlt", "orders-dlt", 5, 0, "exhausted"),
    ]


# ---------------------------------------------------------------------- DLT
def test_exhausted_goes_to_dlt(example: DestinationResolver) -> None:
    assert resolve(example, "orders-retry-3", 4, ValueError("again")) == Destination(
        "dlt", "orders-dlt", 3, 5, NOW, 0, "exhausted"
    )


def test_single_attempt_goes_straight_to_dlt() -> None:
    dest = resolve(resolver_for(make(attempts=1)), "orders", 1, ValueError())
    assert dest == Destination("dlt", "orders-dlt", 3, 2, NOW, 0, "exhausted")


def test_attempt_beyond_last_tier_is_exhausted(example: DestinationResolver) -> None:
    # an attempt number larger than the topology allows (e.g. attempts lowered since) -> DLT
    assert resolve(example, "orders-retry-1", 9, ValueError()).reason == "exhausted"


def test_no_tier_left_is_exhausted_even_if_attempt_header_is_low(example: DestinationResolver) -> None:
    # last tier, but the record claims attempt 1 (header lost): there is nowhere further to go
    dest = resolve(example, "orders-retry-3", 1, ValueError())
    assert (dest.action, dest.topic, dest.reason, dest.next_attempt) == ("dlt", "orders-dlt", "exhausted", 2)


@pytest.mark.parametrize(("topic", "attempt"), [("orders", 1), ("orders-retry-2", 3)])
def test_fatal_goes_straight_to_dlt(example: DestinationResolver, topic: str, attempt: int) -> None:
    assert resolve(example, topic, attempt, json_error()) == Destination(
        "dlt", "orders-dlt", 3, attempt + 1, NOW, 0, "not_retryable"
    )


@pytest.mark.parametrize("exc", [TypeError("x"), wrapped(RuntimeError("wrapper"), json_error())])
def test_default_fatal_and_fatal_cause(example: DestinationResolver, exc: BaseException) -> None:
    assert resolve(example, "orders", 1, exc).reason == "not_retryable"


def test_fatal_check_ignores_cause_without_traversal() -> None:
    """traverse_causes governs the topology's own lists (Spring's retryOn/notRetryOn classifier)."""
    resolver = resolver_for(make(traverse_causes=False, not_retryable=("myapp.errors.InvalidOrder",)))
    assert resolve(resolver, "orders", 1, wrapped(RuntimeError("wrapper"), InvalidOrder())).action == "retry"
    assert resolve(resolver, "orders", 1, InvalidOrder()).action == "dlt"


def test_default_fatal_list_is_traversed_whatever_traverse_causes_says() -> None:
    """Spring's default fatal classifier always traverses causes: v3.2.10 ExceptionClassifier.java:227."""
    resolver = resolver_for(make(traverse_causes=False))
    assert resolve(resolver, "orders", 1, wrapped(RuntimeError("wrapper"), json_error())).action == "dlt"
    assert resolve(resolver, "orders", 1, json_error()).action == "dlt"


def test_default_not_retryable_off_retries_type_errors() -> None:
    resolver = resolver_for(make(default_not_retryable=False))
    assert resolve(resolver, "orders", 1, TypeError()).action == "retry"


def test_retry_only_sends_other_exceptions_to_dlt() -> None:
    resolver = resolver_for(make(retry_only=("ConnectionError",)))
    assert resolve(resolver, "orders", 1, ConnectionResetError()).action == "retry"
    assert resolve(resolver, "orders", 1, ValueError()) == Destination(
        "dlt", "orders-dlt", 3, 2, NOW, 0, "not_retryable"
    )


@pytest.mark.parametrize(("topic", "attempt"), [("orders", 1), ("orders-retry-2", 3)])
def test_exception_specific_dlt_for_fatal(example: DestinationResolver, topic: str, attempt: int) -> None:
    assert resolve(example, topic, attempt, InvalidOrder("no customer")) == Destination(
        "dlt", "orders-validation-dlt", 3, attempt + 1, NOW, 0, "not_retryable"
    )


def test_exception_specific_dlt_via_cause(example: DestinationResolver) -> None:
    exc = wrapped(RuntimeError("handler"), InvalidOrder("no customer"))
    dest = resolve(example, "orders-retry-1", 2, exc)
    assert (dest.action, dest.topic, dest.reason) == ("dlt", "orders-validation-dlt", "not_retryable")


def test_exception_specific_dlt_for_exhausted_and_timeout() -> None:
    topology = make(attempts=2, timeout_ms=HOUR, dlt_routing=(("-lookup-dlt", ("LookupError",)),))
    resolver = resolver_for(topology)
    # KeyError is retryable: it still retries, then lands in its own DLT
    assert resolve(resolver, "orders", 1, KeyError("k")).topic == "orders-retry-1"
    assert resolve(resolver, "orders-retry-1", 2, KeyError("k")) == Destination(
        "dlt", "orders-lookup-dlt", 3, 3, NOW, 0, "exhausted"
    )
    assert resolve(resolver, "orders", 1, KeyError("k"), original=NOW - HOUR - 1) == Destination(
        "dlt", "orders-lookup-dlt", 3, 2, NOW, 0, "timeout"
    )
    assert resolve(resolver, "orders-retry-1", 2, ValueError()).topic == "orders-dlt"


def test_first_matching_exception_specific_dlt_wins() -> None:
    topology = make(dlt_routing=(("-a-dlt", ("LookupError",)), ("-b-dlt", ("KeyError",))))
    resolver = resolver_for(topology)
    assert resolver.dlt_topic_for(KeyError()) == "orders-a-dlt"
    assert resolver.dlt_topic_for(IndexError()) == "orders-a-dlt"
    assert resolver.dlt_topic_for(ValueError()) == "orders-dlt"


def test_dlt_topic_for_matches_causes_even_without_traversal() -> None:
    """Spring routes to an exception DLT by the exception or any cause (isDirectExcOrCause,
    v3.2.10 DefaultDestinationTopicResolver.java:187-204), whatever traversingCauses says."""
    topology = make(traverse_causes=False, dlt_routing=(("-lookup-dlt", ("LookupError",)),))
    assert resolver_for(topology).dlt_topic_for(wrapped(RuntimeError(), KeyError())) == "orders-lookup-dlt"
    assert resolver_for(topology).dlt_topic_for(RuntimeError()) == "orders-dlt"


# ---------------------------------------------------------------------- timeout
def test_timeout_boundary_is_strictly_greater() -> None:
    resolver = resolver_for(make(attempts=5, timeout_ms=2 * HOUR))
    at_limit = resolve(resolver, "orders-retry-1", 2, ValueError(), original=NOW - 2 * HOUR)
    assert at_limit.action == "retry"
    past = resolve(resolver, "orders-retry-1", 2, ValueError(), original=NOW - 2 * HOUR - 1)
    assert past == Destination("dlt", "orders-dlt", 3, 3, NOW, 0, "timeout")


def test_timeout_from_main_topic(example: DestinationResolver) -> None:
    assert resolve(example, "orders", 1, ValueError(), original=NOW - 3 * HOUR).reason == "timeout"
    assert resolve(example, "orders", 1, ValueError(), original=NOW - HOUR).reason == "retryable"


def test_no_timeout_retries_old_records() -> None:
    resolver = resolver_for(make())
    assert resolve(resolver, "orders", 1, ValueError(), original=0).action == "retry"


def test_fatal_and_exhausted_take_precedence_over_timeout(example: DestinationResolver) -> None:
    old = NOW - 10 * HOUR
    assert resolve(example, "orders", 1, json_error(), original=old).reason == "not_retryable"
    assert resolve(example, "orders-retry-3", 4, ValueError(), original=old).reason == "exhausted"


# ---------------------------------------------------------------------- no_dlt
@pytest.mark.parametrize(
    ("topic", "attempt", "exc"),
    [("orders-retry-2", 3, ValueError()), ("orders", 1, json_error()), ("orders", 1, TypeError())],
)
def test_no_dlt_drops(topic: str, attempt: int, exc: BaseException) -> None:
    resolver = resolver_for(make(dlt_strategy="no_dlt"))
    expected = Destination("drop", None, 3, attempt + 1, NOW, 0, "no_dlt")
    assert resolve(resolver, topic, attempt, exc) == expected


def test_no_dlt_timeout_drops() -> None:
    resolver = resolver_for(make(dlt_strategy="no_dlt", timeout_ms=1_000))
    assert resolve(resolver, "orders", 1, ValueError(), original=NOW - 1_001).action == "drop"


def test_no_dlt_still_retries() -> None:
    resolver = resolver_for(make(dlt_strategy="no_dlt"))
    assert resolve(resolver, "orders", 1, ValueError()).action == "retry"


# ---------------------------------------------------------------------- failures in the DLT
@pytest.mark.parametrize("dlt", ["orders-dlt", "orders-validation-dlt"])
def test_always_retry_on_error_sends_non_fatal_back_to_same_dlt(
    example: DestinationResolver, dlt: str
) -> None:
    assert resolve(example, dlt, 5, RuntimeError("reprocessing failed")) == Destination(
        "dlt", dlt, 3, 6, NOW, 0, "dlt_failure_retried"
    )


@pytest.mark.parametrize("exc", [json_error(), TypeError(), wrapped(RuntimeError(), json_error())])
def test_always_retry_on_error_drops_default_fatal(example: DestinationResolver, exc: BaseException) -> None:
    expected = Destination("drop", None, 3, 6, NOW, 0, "dlt_failure_dropped")
    assert resolve(example, "orders-dlt", 5, exc) == expected


def test_always_retry_on_error_sends_the_topologys_not_retryable_back_to_the_dlt(
    example: DestinationResolver,
) -> None:
    # Spring's resolver only gives up a DLT failure for its resolver-wide fatal exceptions; a
    # topic's own not-retryable classes (InvalidOrder here) keep the record in the DLT
    assert "myapp.errors.InvalidOrder" in example.topology.not_retryable
    assert resolve(example, "orders-dlt", 5, InvalidOrder()) == Destination(
        "dlt", "orders-dlt", 3, 6, NOW, 0, "dlt_failure_retried"
    )
    # and it still skips the retry tiers when it happens on the main topic
    assert resolve(example, "orders", 1, InvalidOrder()).reason == "not_retryable"


def test_without_default_fatal_errors_every_dlt_failure_goes_back() -> None:
    resolver = resolver_for(make(default_not_retryable=False))
    assert resolve(resolver, "orders-dlt", 4, TypeError()).reason == "dlt_failure_retried"


@pytest.mark.parametrize("exc", [RuntimeError("x"), json_error()])
def test_fail_on_error_drops(exc: BaseException) -> None:
    resolver = resolver_for(make(dlt_strategy="fail_on_error"))
    expected = Destination("drop", None, 3, 5, NOW, 0, "dlt_failure_dropped")
    assert resolve(resolver, "orders-dlt", 4, exc) == expected


def test_dlt_failure_ignores_timeout_and_attempts() -> None:
    resolver = resolver_for(make(timeout_ms=1_000, attempts=2))
    dest = resolve(resolver, "orders-dlt", 50, ValueError(), original=0)
    assert (dest.action, dest.topic, dest.reason) == ("dlt", "orders-dlt", "dlt_failure_retried")


def test_failure_in_dlt_never_goes_to_exception_specific_dlt(example: DestinationResolver) -> None:
    # a non-fatal failure while reprocessing the main DLT stays in the main DLT
    topology = make(dlt_routing=(("-lookup-dlt", ("LookupError",)),))
    dest = resolve(resolver_for(topology), "orders-dlt", 4, KeyError())
    assert dest.topic == "orders-dlt"


# ---------------------------------------------------------------------- same-interval reuse
def test_reusable_tier_keeps_record_until_attempts_run_out() -> None:
    topology = make(attempts=5, reuse_same_interval=True, backoff=BackOff("fixed", delay_ms=5_000))
    resolver = resolver_for(topology)
    assert [t.topic for t in topology.retry_tiers] == ["orders-retry"]
    topic, attempt, path = "orders", 1, []
    while True:
        dest = resolve(resolver, topic, attempt, ValueError())
        path.append((dest.topic, dest.next_attempt, dest.due_ms - NOW, dest.reason))
        if dest.action != "retry":
            break
        topic, attempt = dest.topic, dest.next_attempt
    assert path == [
        ("orders-retry", 2, 5_000, "retryable"),
        ("orders-retry", 3, 5_000, "retryable"),
        ("orders-retry", 4, 5_000, "retryable"),
        ("orders-retry", 5, 5_000, "retryable"),
        ("orders-dlt", 6, 0, "exhausted"),
    ]


def test_spring_example_with_reuse() -> None:
    topology = make(
        attempts=7,
        reuse_same_interval=True,
        backoff=BackOff("exponential", initial_ms=1_000, multiplier=2.0, max_ms=10_000),
    )
    resolver = resolver_for(topology)
    topic, attempt, path = "orders", 1, []
    while True:
        dest = resolve(resolver, topic, attempt, ValueError())
        path.append((dest.topic, dest.delay_ms))
        if dest.action != "retry":
            break
        topic, attempt = dest.topic, dest.next_attempt
    assert path == [
        ("orders-retry-1", 1_000),
        ("orders-retry-2", 2_000),
        ("orders-retry-3", 4_000),
        ("orders-retry-4", 8_000),
        ("orders-retry-5", 10_000),
        ("orders-retry-5", 10_000),
        ("orders-dlt", 0),
    ]


def test_fatal_in_reusable_tier_goes_to_dlt() -> None:
    resolver = resolver_for(make(attempts=5, reuse_same_interval=True))
    assert resolve(resolver, "orders-retry", 2, json_error()).reason == "not_retryable"


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("topic", ["payments", "orders-retry-9", "orders-validation-dlt", ""])
def test_unknown_topic(topic: str) -> None:
    resolver = resolver_for(make())
    with pytest.raises(TopologyError) as info:
        resolve(resolver, topic, 1, ValueError())
    assert f"topic {topic!r} is not on this retry path" in str(info.value)
    assert info.value.field == "topic"


def test_unknown_topic_error_names_the_file() -> None:
    with pytest.raises(TopologyError) as info:
        resolve(resolver_for(load_topology(EXAMPLE)), "payments", 1, ValueError())
    assert str(info.value).startswith(f"{EXAMPLE}: field 'topic': topic 'payments' is not on this retry path")


def test_destination_is_frozen() -> None:
    dest = Destination("drop", None, 0, 2, NOW, 0, "no_dlt")
    with pytest.raises(AttributeError):
        dest.topic = "x"  # type: ignore[misc]


# ---------------------------------------------------------------------- regressions of fixed bugs
def test_bug_attempt_number_survives_the_attempts_header() -> None:
    # more attempts than Spring's header can carry (Short.MAX_VALUE) are refused up front ...
    with pytest.raises(TopologyError) as info:
        make(attempts=40_000, reuse_same_interval=True, backoff=BackOff("fixed", delay_ms=1_000))
    assert info.value.field == "attempts"
    assert "1 to 32766" in str(info.value)
    # ... and at the largest allowed count, every attempt number written reads back as itself
    topology = make(attempts=32_766, reuse_same_interval=True, backoff=BackOff("fixed", delay_ms=1_000))
    resolver = resolver_for(topology)
    last_retry = resolve(resolver, "orders-retry", 32_765, ValueError())
    assert (last_retry.action, last_retry.topic, last_retry.next_attempt) == ("retry", "orders-retry", 32_766)
    to_dlt = resolve(resolver, "orders-retry", 32_766, ValueError())
    assert (to_dlt.action, to_dlt.reason, to_dlt.next_attempt) == ("dlt", "exhausted", 32_767)
    for dest in (last_retry, to_dlt):
        assert read_attempts([(ATTEMPTS, encode_int32(dest.next_attempt))]) == dest.next_attempt
