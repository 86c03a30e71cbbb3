"""The due decision: due, idle, wait until the earliest due time or the window's opening, skip past the
deadline."""

from __future__ import annotations

from datetime import datetime

import pytest

from airflow_kafka_retry.policy.timing.due_check import check_due
from airflow_kafka_retry.policy.timing.windows import ReprocessWindow

NOW = 1_700_000_000_000
MIN = 60_000


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def test_nothing_pending_is_idle():
    check = check_due({}, now_ms=NOW, deadline_ms=NOW)
    assert (check.action, check.earliest_due_ms, check.wake_ms) == ("idle", None, None)
    assert check.reason == "nothing is pending"


def test_due_partitions_and_earliest_due_time():
    check = check_due({3: NOW - 5, 0: NOW + MIN, 1: NOW, 2: NOW - MIN}, now_ms=NOW)
    assert check.action == "due"
    assert check.due_partitions == (1, 2, 3)  # due at or before now, in partition order
    assert check.pending_partitions == (0, 1, 2, 3)
    assert check.earliest_due_ms == NOW - MIN
    assert check.wake_ms is None


def test_pending_not_due_waits_until_the_earliest_due_time():
    check = check_due({0: NOW + 5 * MIN, 1: NOW + 2 * MIN}, now_ms=NOW, deadline_ms=NOW + 2 * MIN)
    assert (check.action, check.wake_ms, check.earliest_due_ms) == ("wait", NOW + 2 * MIN, NOW + 2 * MIN)
    assert check.due_partitions == ()
    assert "not due yet" in check.reason


def test_a_wait_past_the_deadline_skips():
    check = check_due({0: NOW + 5 * MIN}, now_ms=NOW, deadline_ms=NOW + 5 * MIN - 1)
    assert (check.action, check.wake_ms) == ("skip", NOW + 5 * MIN)
    assert "the next scheduled run will see them" in check.reason


def test_no_deadline_waits_however_long():
    assert check_due({0: NOW + 10**9}, now_ms=NOW).action == "wait"


BERLIN = ReprocessWindow.parse("01:00-05:00", "Europe/Berlin")


def test_closed_window_waits_for_its_opening_even_when_records_are_due():
    now = ms("2026-11-23T12:00:00+00:00")  # 13:00 in Berlin (CET): closed
    opening = ms("2026-11-24T00:00:00+00:00")  # 01:00 CET
    check = check_due({0: now - MIN}, now_ms=now, window=BERLIN)
    assert (check.action, check.wake_ms) == ("wait", opening)
    assert "window 01:00-05:00 Europe/Berlin is closed" in check.reason
    assert "2026-11-24T00:00:00.000+00:00" in check.reason


def test_closed_window_with_records_due_after_its_opening_waits_for_the_records():
    now = ms("2026-11-23T12:00:00+00:00")
    due = ms("2026-11-24T02:00:00+00:00")
    check = check_due({0: due}, now_ms=now, window=BERLIN)
    assert (check.action, check.wake_ms) == ("wait", due)


def test_closed_window_past_the_deadline_skips():
    now = ms("2026-11-23T12:00:00+00:00")
    check = check_due({0: now - MIN}, now_ms=now, window=BERLIN, deadline_ms=now + 60 * MIN)
    assert (check.action, check.wake_ms) == ("skip", ms("2026-11-24T00:00:00+00:00"))


def test_closed_window_and_idle_tier_is_idle():
    now = ms("2026-11-23T12:00:00+00:00")
    assert check_due({}, now_ms=now, window=BERLIN).action == "idle"


@pytest.mark.parametrize("at", ["2026-11-24T00:00:00+00:00", "2026-11-24T03:59:59+00:00"])
def test_open_window_with_due_records_is_due(at):
    now = ms(at)
    assert check_due({0: now - MIN}, now_ms=now, window=BERLIN).action == "due"


def test_summer_time_opening():
    now = ms("2026-07-01T12:00:00+00:00")
    check = check_due({0: now}, now_ms=now, window=BERLIN)
    assert check.wake_ms == ms("2026-07-01T23:00:00+00:00")  # 01:00 CEST


def test_to_dict_is_plain_data():
    check = check_due({1: NOW - 1}, now_ms=NOW)
    assert check.to_dict() == {
        "action": "due",
        "now_ms": NOW,
        "due_partitions": [1],
        "earliest_due_ms": NOW - 1,
        "wake_ms": None,
        "reason": check.reason,
        "pending_partitions": [1],
    }
