"""Unit tests for airflow_kafka_retry.policy.timing.durations (pure, no network, no Airflow)."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.policy.timing.durations import format_duration_ms, parse_duration_ms


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [
        ("500ms", 500),
        ("30s", 30_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("0s", 0),
        ("0", 0),
        ("250", 250),  # no unit: milliseconds
        ("1500ms", 1_500),
        ("1.5s", 1_500),  # fraction that is a whole number of milliseconds
        ("0.5m", 30_000),
        ("1.5h", 5_400_000),
        ("2.5d", 216_000_000),
        ("0.001s", 1),
        (" 30s ", 30_000),  # surrounding blanks
        ("30 s", 30_000),  # blank between number and unit
        ("10m", 600_000),
    ],
)
def test_parse_strings(text: str, expected_ms: int) -> None:
    assert parse_duration_ms(text) == expected_ms


@pytest.mark.parametrize(("value", "expected_ms"), [(0, 0), (1, 1), (30_000, 30_000), (10**12, 10**12)])
def test_plain_ints_are_milliseconds(value: int, expected_ms: int) -> None:
    assert parse_duration_ms(value) == expected_ms


@pytest.mark.parametrize(("value", "expected_ms"), [(0.0, 0), (1000.0, 1000), (30000.0, 30000)])
def test_whole_floats_are_milliseconds(value: float, expected_ms: int) -> None:
    result = parse_duration_ms(value)
    assert result == expected_ms
    assert type(result) is int


def test_result_is_always_int() -> None:
    assert type(parse_duration_ms("1.5s")) is int
    assert type(parse_duration_ms("30s")) is int


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "abc",
        "30x",  # unknown unit
        "30S",  # units are lower case
        "30sec",
        "5 minutes",
        "-5s",  # negative
        "1e3",
        ".5s",  # needs a leading digit
        "5.",
        "s",
        "1,5s",
        "30s30s",
        None,
        [],
        {},
        True,  # bool is not an int here
        False,
    ],
)
def test_bad_values_raise_value_error_naming_accepted_forms(value: object) -> None:
    accepted = r"expected a duration like '500ms', '30s', '5m', '2h' or milliseconds"
    with pytest.raises(ValueError, match=accepted):
        parse_duration_ms(value)


@pytest.mark.parametrize("value", ["0.5ms", "1.0005s", "0.1ms"])
def test_fraction_that_is_not_whole_milliseconds_is_rejected(value: str) -> None:
    with pytest.raises(ValueError, match="not a whole number of milliseconds"):
        parse_duration_ms(value)


def test_negative_int_rejected() -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        parse_duration_ms(-1)


@pytest.mark.parametrize("value", [-1.0, 1.5, 0.25])
def test_negative_or_fractional_float_rejected(value: float) -> None:
    with pytest.raises(ValueError, match="whole, non-negative"):
        parse_duration_ms(value)


@pytest.mark.parametrize(("text", "expected_ms"), [("1.001s", 1001), ("1.003s", 1003), ("1.005s", 1005)])
def test_fraction_that_is_whole_ms_despite_float_rounding(text: str, expected_ms: int) -> None:
    assert parse_duration_ms(text) == expected_ms


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0ms"),
        (1, "1ms"),
        (500, "500ms"),
        (1_500, "1500ms"),
        (1_000, "1s"),
        (90_000, "90s"),
        (300_000, "5m"),
        (7_200_000, "2h"),
        (5_400_000, "90m"),
        (86_400_000, "1d"),
        (172_800_000, "2d"),
    ],
)
def test_format_duration(ms: int, text: str) -> None:
    assert format_duration_ms(ms) == text


@pytest.mark.parametrize("ms", [0, 1, 999, 1_000, 61_000, 3_600_000, 90_061_001, 86_400_000 * 3])
def test_format_then_parse_round_trips(ms: int) -> None:
    assert parse_duration_ms(format_duration_ms(ms)) == ms
