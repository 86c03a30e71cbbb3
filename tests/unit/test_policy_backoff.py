"""Unit tests for airflow_kafka_retry.policy.timing.backoff (pure, no network, no Airflow)."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.policy.timing.backoff import (
    DEFAULT_FIXED_DELAY_MS,
    DEFAULT_MAX_DELAY_MS,
    DEFAULT_MULTIPLIER,
    BackOff,
)
from airflow_kafka_retry.policy.topology.model import Topology


def test_spring_documented_exponential_example() -> None:
    """Spring's reference docs: initial 1s, multiplier 2, max 10s, attempts 7.

    6 retries wait 1, 2, 4, 8, 10, 10 seconds.
    """
    backoff = BackOff("exponential", initial_ms=1_000, multiplier=2.0, max_ms=10_000)
    assert backoff.delays_for(6) == [1_000, 2_000, 4_000, 8_000, 10_000, 10_000]


def test_spring_documented_example_through_topology() -> None:
    topology = Topology(
        topic="orders",
        group_id="svc",
        attempts=7,
        backoff=BackOff("exponential", initial_ms=1_000, multiplier=2.0, max_ms=10_000),
    )
    assert [t.delay_ms for t in topology.retry_tiers] == [1_000, 2_000, 4_000, 8_000, 10_000, 10_000]
    assert topology.to_dict()["backoff"] == {
        "kind": "exponential",
        "delays_ms": [1_000, 2_000, 4_000, 8_000, 10_000, 10_000],
    }


@pytest.mark.parametrize(
    ("initial", "multiplier", "max_ms", "retries", "expected"),
    [
        (1_000, 2.0, 30_000, 0, []),
        (1_000, 2.0, 30_000, 1, [1_000]),
        (1_000, 3.0, 100_000, 5, [1_000, 3_000, 9_000, 27_000, 81_000]),
        (1_000, 1.0, 30_000, 3, [1_000, 1_000, 1_000]),  # multiplier 1 is a fixed back-off
        (1_000, 1.5, 60_000, 4, [1_000, 1_500, 2_250, 3_375]),
        (1_000, 1.5, 60_000, 5, [1_000, 1_500, 2_250, 3_375, 5_062]),  # 5062.5 -> whole ms
        (5_000, 2.0, 5_000, 3, [5_000, 5_000, 5_000]),  # max == initial
        (30_000, 2.0, 600_000, 3, [30_000, 60_000, 120_000]),  # the example topology
        (30_000, 2.0, 600_000, 7, [30_000, 60_000, 120_000, 240_000, 480_000, 600_000, 600_000]),
    ],
)
def test_exponential(initial: int, multiplier: float, max_ms: int, retries: int, expected: list[int]) -> None:
    backoff = BackOff("exponential", initial_ms=initial, multiplier=multiplier, max_ms=max_ms)
    delays = backoff.delays_for(retries)
    assert delays == expected
    assert all(type(d) is int for d in delays)


def test_exponential_never_exceeds_max_for_many_retries() -> None:
    delays = BackOff("exponential", initial_ms=1, multiplier=10.0, max_ms=1_000).delays_for(50)
    assert delays[:4] == [1, 10, 100, 1_000]
    assert set(delays[3:]) == {1_000}


@pytest.mark.parametrize("retries", [0, 1, 2, 6])
def test_fixed(retries: int) -> None:
    assert BackOff("fixed", delay_ms=5_000).delays_for(retries) == [5_000] * retries


def test_fixed_default_is_springs_one_second() -> None:
    assert BackOff().kind == "fixed"
    assert BackOff().delays_for(3) == [DEFAULT_FIXED_DELAY_MS] * 3 == [1_000, 1_000, 1_000]


def test_defaults_match_spring() -> None:
    assert DEFAULT_FIXED_DELAY_MS == 1_000
    assert DEFAULT_MULTIPLIER == 2.0
    assert DEFAULT_MAX_DELAY_MS == 30_000
    assert BackOff("exponential").delays_for(7) == [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000]


@pytest.mark.parametrize(
    ("delays", "retries", "expected"),
    [
        ((1_000, 5_000, 30_000), 3, [1_000, 5_000, 30_000]),  # exactly as many
        ((1_000, 5_000, 30_000), 2, [1_000, 5_000]),  # more entries than retries
        ((1_000, 5_000), 5, [1_000, 5_000, 5_000, 5_000, 5_000]),  # fewer: the last repeats
        ((7_000,), 4, [7_000] * 4),
        ((1_000, 5_000), 0, []),
    ],
)
def test_custom(delays: tuple[int, ...], retries: int, expected: list[int]) -> None:
    assert BackOff("custom", delays=delays).delays_for(retries) == expected


def test_negative_retries_rejected() -> None:
    with pytest.raises(ValueError, match="retries cannot be negative"):
        BackOff().delays_for(-1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "linear"}, "unknown back-off kind 'linear'; use fixed, exponential or custom"),
        ({"kind": "exponential", "multiplier": 0.5}, "multiplier must be >= 1.0, got 0.5"),
        (
            {"kind": "exponential", "initial_ms": 60_000, "max_ms": 30_000},
            r"max \(30000 ms\) is smaller than initial \(60000 ms\)",
        ),
        ({"kind": "custom"}, "a custom back-off needs at least one delay in 'delays'"),
        ({"kind": "custom", "delays": ()}, "a custom back-off needs at least one delay"),
    ],
)
def test_invalid_backoff(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BackOff(**kwargs)


def test_settings_of_other_kinds_are_ignored() -> None:
    # A fixed back-off does not check exponential settings, and vice versa.
    assert BackOff("fixed", delay_ms=10, multiplier=0.1, max_ms=1).delays_for(2) == [10, 10]
    exponential = BackOff("exponential", initial_ms=100, max_ms=400, delay_ms=9)
    assert exponential.delays_for(4) == [100, 200, 400, 400]


def test_backoff_is_frozen_and_comparable() -> None:
    a = BackOff("custom", delays=(1, 2))
    assert a == BackOff("custom", delays=(1, 2))
    with pytest.raises(AttributeError):
        a.kind = "fixed"  # type: ignore[misc]


def test_exponential_truncates_to_whole_milliseconds_at_every_step_like_spring() -> None:
    # spring-retry's ExponentialBackOffPolicy: interval = (long) (interval * multiplier) after each
    # delay, so fractions are lost at every step (a float power would give 11390, 17085, 25628)
    backoff = BackOff("exponential", initial_ms=1_000, multiplier=1.5, max_ms=60_000)
    assert backoff.delays_for(9) == [1_000, 1_500, 2_250, 3_375, 5_062, 7_593, 11_389, 17_083, 25_624]
    # a multiplier too small to move a short interval leaves it where it is, as in Spring
    assert BackOff("exponential", initial_ms=3, multiplier=1.1, max_ms=100).delays_for(3) == [3, 3, 3]
    # once past the cap the interval stops growing
    assert BackOff("exponential", initial_ms=7_000, multiplier=3.0, max_ms=10_000).delays_for(4) == [
        7_000,
        10_000,
        10_000,
        10_000,
    ]
