"""
The idle lanes' check cadence: ``policy/timing/idle_checks.py`` (pure) and ``triggers/check_pace.py``.

No broker: a watch is a stand-in with heads, ``read_due`` and ``awaited`` as ``HeadWatch`` has them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_kafka_retry.engine.heads.peek import PartitionHead
from airflow_kafka_retry.policy.timing.idle_checks import check_at_ms, idle_interval_ms
from airflow_kafka_retry.policy.timing.waves import Wave
from airflow_kafka_retry.triggers.check_pace import (
    AWAITED_TOPIC_CHECK_MS,
    IDLE_SPREAD,
    CheckPace,
    random_spread,
)

BUSY, IDLE, CAP = 1_000, 30_000, 300_000
NOW = 1_000_000_000


def test_the_idle_interval_doubles_while_nothing_changes_up_to_its_cap() -> None:
    seen, interval = [], 0
    for _ in range(7):
        interval = idle_interval_ms(interval, changed=False, base_ms=IDLE, max_ms=CAP)
        seen.append(interval)
    assert seen == [30_000, 60_000, 120_000, 240_000, 300_000, 300_000, 300_000]


def test_any_change_brings_the_idle_interval_back_to_its_base() -> None:
    assert idle_interval_ms(240_000, changed=True, base_ms=IDLE, max_ms=CAP) == IDLE


@pytest.mark.parametrize(("cap", "expected"), [(IDLE, IDLE), (10_000, IDLE), (0, IDLE)])
def test_a_cap_at_or_below_the_base_means_no_back_off(cap: int, expected: int) -> None:
    assert idle_interval_ms(IDLE, changed=False, base_ms=IDLE, max_ms=cap) == expected


def test_no_idle_check_setting_stays_at_zero() -> None:
    assert idle_interval_ms(0, changed=False, base_ms=0, max_ms=CAP) == 0


def test_a_pending_wave_is_checked_at_the_busy_cadence() -> None:
    at = check_at_ms(NOW, busy_ms=BUSY, idle_ms=CAP, first_fire_ms=None, wave_pending=True)
    assert at == NOW + BUSY


def test_an_idle_lane_is_checked_after_its_idle_interval() -> None:
    at = check_at_ms(NOW, busy_ms=BUSY, idle_ms=240_000, first_fire_ms=None, wave_pending=False)
    assert at == NOW + 240_000


@pytest.mark.parametrize(
    ("first_fire", "expected"),
    [
        (NOW - 5_000, NOW + BUSY),  # due already (held by a window or a run): busy
        (NOW + 500, NOW + BUSY),  # due within the busy cadence
        (NOW + 20_000, NOW + 19_000),  # due later: once, right before it may fire
        (NOW + 3_600_000, NOW + 240_000),  # due in an hour: no later than the idle interval
    ],
)
def test_a_head_is_checked_right_before_it_may_fire(first_fire: int, expected: int) -> None:
    at = check_at_ms(NOW, busy_ms=BUSY, idle_ms=240_000, first_fire_ms=first_fire, wave_pending=False)
    assert at == expected


@dataclass
class _Watch:
    heads: dict[tuple[str, int], PartitionHead] = field(default_factory=dict)
    read_due: bool = True
    awaited: list[str] = field(default_factory=list)


def _pace(fire_ahead: float = 0.0) -> CheckPace:
    pace = CheckPace.of(
        {
            "commit_check": 1.0,
            "idle_check": 30.0,
            "idle_check_max": 300.0,
            "fire_ahead": fire_ahead,
            "refire_after": 45.0,
        }
    )
    pace.spread = lambda: 1.0  # every idle interval waited in full (the spread: its own test)
    return pace


def _idle_checks(pace: CheckPace, watch: Any, committed: dict[tuple[str, int], int], count: int) -> list[int]:
    """``count`` checks that each see ``committed``; the intervals between them (ms)."""
    now, gaps = NOW, []
    for _ in range(count):
        pace.saw(watch, committed, wave_pending=False)
        pace.plan(watch, now, None)
        gaps.append(pace.next_ms - now)
        now = pace.next_ms
    return gaps


def test_an_idle_lane_backs_off_and_comes_back_at_a_moved_offset() -> None:
    pace, watch = _pace(), _Watch()
    assert _idle_checks(pace, watch, {("t", 0): 5}, 6) == [30_000, 60_000, 120_000, 240_000, 300_000, 300_000]
    assert pace.saw(watch, {("t", 0): 7}, wave_pending=False) is True  # moved: a run, or a reset by hand
    pace.plan(watch, NOW, None)
    assert pace.next_ms == NOW + 30_000


def test_the_first_check_and_a_new_partition_are_changes() -> None:
    pace, watch = _pace(), _Watch()
    assert pace.saw(watch, {("t", 0): 5}, wave_pending=False) is False  # nothing to compare with
    assert _idle_checks(pace, watch, {("t", 0): 5}, 2) == [60_000, 120_000]
    pace.saw(watch, {("t", 0): 5, ("t", 1): -1}, wave_pending=False)
    assert pace.interval_ms == 30_000


def test_a_head_fetched_between_checks_brings_the_check_before_it_falls_due() -> None:
    pace, watch = _pace(fire_ahead=2.0), _Watch()
    _idle_checks(pace, watch, {("t", 0): 5}, 5)  # backed off: the next check 300 s away
    watch.heads[("t", 0)] = PartitionHead(0, 5, NOW + 40_000, NOW, 6)
    pace.heads_between(watch, NOW)
    assert pace.next_ms == NOW + 40_000 - 2_000 - 1_000  # before it may fire (fire_ahead), a busy step early
    pace.saw(watch, {("t", 0): 5}, wave_pending=False)
    assert pace.interval_ms == 30_000  # a head learnt is a change


def test_a_dlt_head_has_no_due_time_and_is_busy() -> None:
    pace, watch = _pace(), _Watch(read_due=False)
    _idle_checks(pace, watch, {("dlt", 0): 0}, 3)
    watch.heads[("dlt", 0)] = PartitionHead(0, 0, None, NOW, 1)
    pace.heads_between(watch, NOW)
    assert pace.next_ms == NOW + 1_000


def test_a_wave_is_checked_busy_and_as_it_expires_and_a_fired_one_busy() -> None:
    pace, watch = _pace(), _Watch()
    wave = Wave((("t", 0, 5),), NOW - 44_500, NOW - 44_500)
    pace.saw(watch, {("t", 0): 5}, wave_pending=True)
    pace.plan(watch, NOW, wave)
    assert pace.next_ms == min(NOW + 1_000, wave.expires_ms(45_000)) == NOW + 500
    _idle_checks(pace, watch, {("t", 0): 5}, 4)
    pace.fired(NOW)
    assert pace.next_ms == NOW + 1_000


def test_an_awaited_topic_is_looked_for_every_few_seconds_however_idle() -> None:
    pace, watch = _pace(), _Watch(awaited=["orders-dlq"])
    assert set(_idle_checks(pace, watch, {("t", 0): 5}, 5)) == {AWAITED_TOPIC_CHECK_MS}
    assert pace.interval_ms == 300_000  # the lane's own checks are backed off all the same


def test_a_reopened_watch_checks_at_once_from_the_base_interval() -> None:
    pace, watch = _pace(), _Watch()
    _idle_checks(pace, watch, {("t", 0): 5}, 5)
    pace.restart()
    assert pace.due(NOW)
    assert _idle_checks(pace, watch, {("t", 0): 5}, 1) == [30_000]


def test_lanes_opened_together_back_off_apart() -> None:
    """A thousand lanes' idle checks, each interval cut by up to IDLE_SPREAD at random: never later."""
    paces = [_pace() for _ in range(1000)]
    watch = _Watch()
    for pace in paces:
        pace.spread = random_spread
    nexts = []
    for pace in paces:
        pace.saw(watch, {("t", 0): 5}, wave_pending=False)
        pace.plan(watch, NOW, None)
        nexts.append(pace.next_ms - NOW)
    assert all(30_000 * (1 - IDLE_SPREAD) <= gap <= 30_000 for gap in nexts), (min(nexts), max(nexts))
    assert len({gap // 1000 for gap in nexts}) >= 5, sorted(set(nexts))[:10]  # over at least 5 seconds
