"""Unit tests for airflow_kafka_retry.policy.timing.windows (pure, no network, no Airflow)."""

from __future__ import annotations

from datetime import datetime, time
from zoneinfo import ZoneInfo

import pytest

from airflow_kafka_retry.policy.timing.windows import ReprocessWindow


def ms(text: str, tz: str = "UTC") -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz)).timestamp() * 1000)


def test_parse_plain_window() -> None:
    window = ReprocessWindow.parse("01:00-05:00", "Europe/Berlin")
    assert (window.start, window.end, window.timezone) == (time(1), time(5), "Europe/Berlin")
    assert str(window) == "01:00-05:00 Europe/Berlin"


def test_default_timezone_is_utc() -> None:
    assert ReprocessWindow.parse("1:00-5:30").timezone == "UTC"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("1-5", "is not of the form 'HH:MM-HH:MM'"),
        ("01:00 to 05:00", "is not of the form"),
        ("25:00-05:00", "25:00 is not a time of day"),
        ("01:00-05:61", "05:61 is not a time of day"),
        ("24:00-05:00", "24:00 is not a time of day (00:00 to 23:59)"),
        ("03:00-03:00", "opens and closes at the same time"),
    ],
)
def test_bad_specs_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"window '{spec}'") as err:
        ReprocessWindow.parse(spec)
    assert message in str(err.value)


def test_unknown_timezone() -> None:
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        ReprocessWindow.parse("01:00-05:00", "Mars/Olympus")


def test_not_a_string() -> None:
    with pytest.raises(ValueError, match="must be a string"):
        ReprocessWindow.parse(100)  # type: ignore[arg-type]


def test_same_day_window_in_its_timezone() -> None:
    window = ReprocessWindow.parse("01:00-05:00", "Europe/Berlin")  # CET = UTC+1 in January
    assert not window.is_open(ms("2026-01-10T23:59:59", "UTC"))  # 00:59:59 in Berlin
    assert window.is_open(ms("2026-01-11T00:00:00", "UTC"))  # 01:00 in Berlin
    assert window.closes_at_ms(ms("2026-01-11T02:00:00", "UTC")) == ms("2026-01-11T05:00", "Europe/Berlin")
    assert not window.is_open(ms("2026-01-11T05:00", "Europe/Berlin"))  # the end is excluded
    assert window.closes_at_ms(ms("2026-01-11T12:00", "Europe/Berlin")) is None


def test_next_open_is_now_when_open_else_the_next_opening() -> None:
    window = ReprocessWindow.parse("01:00-05:00", "Europe/Berlin")
    inside = ms("2026-01-11T03:00", "Europe/Berlin")
    assert window.next_open_ms(inside) == inside
    assert window.next_open_ms(ms("2026-01-11T00:30", "Europe/Berlin")) == ms(
        "2026-01-11T01:00", "Europe/Berlin"
    )
    assert window.next_open_ms(ms("2026-01-11T06:00", "Europe/Berlin")) == ms(
        "2026-01-12T01:00", "Europe/Berlin"
    )


def test_window_across_midnight() -> None:
    window = ReprocessWindow.parse("22:00-04:00")
    assert window.is_open(ms("2026-03-01T23:00"))
    assert window.closes_at_ms(ms("2026-03-01T23:00")) == ms("2026-03-02T04:00")
    assert window.closes_at_ms(ms("2026-03-02T01:00")) == ms("2026-03-02T04:00")  # opened the day before
    assert not window.is_open(ms("2026-03-02T04:00"))
    assert window.next_open_ms(ms("2026-03-02T12:00")) == ms("2026-03-02T22:00")


def test_end_of_day() -> None:
    window = ReprocessWindow.parse("18:00-24:00")
    assert window.closes_at_ms(ms("2026-03-01T23:59")) == ms("2026-03-02T00:00")
    assert not window.is_open(ms("2026-03-02T00:00"))


def test_daylight_saving_change_keeps_wall_clock_times() -> None:
    window = ReprocessWindow.parse("01:00-05:00", "Europe/Berlin")
    # 2026-03-29: clocks go from 02:00 CET to 03:00 CEST; the window is 3 real hours long that night
    opens, closes = ms("2026-03-29T01:00", "Europe/Berlin"), ms("2026-03-29T05:00", "Europe/Berlin")
    assert closes - opens == 3 * 3_600_000
    assert window.next_open_ms(ms("2026-03-28T12:00", "UTC")) == opens
    assert window.closes_at_ms(opens) == closes
