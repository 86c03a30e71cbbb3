"""When an event-driven tier fires a wave, and when a fired wave counts as taken."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.policy.timing.waves import Wave, plan_wave
from airflow_kafka_retry.policy.timing.windows import ReprocessWindow

A, B = ("t", 0), ("t", 1)
NOW = 1_700_000_000_000


def test_nothing_pending_is_idle():
    assert plan_wave({}, now_ms=NOW).action == "idle"


def test_due_heads_fire_now_with_only_the_due_partitions():
    plan = plan_wave({A: NOW - 5, B: NOW + 60_000}, now_ms=NOW, fire_ahead_ms=2_000)
    assert (plan.action, plan.not_before_ms, plan.keys) == ("fire", NOW, (A,))


def test_a_head_due_within_fire_ahead_fires_early_and_the_run_waits_for_it():
    plan = plan_wave({A: NOW + 1_500, B: NOW + 1_800}, now_ms=NOW, fire_ahead_ms=2_000)
    assert (plan.action, plan.not_before_ms, plan.keys) == ("fire", NOW + 1_500, (A,))


def test_a_later_head_waits_until_fire_ahead_before_it():
    plan = plan_wave({A: NOW + 10_000}, now_ms=NOW, fire_ahead_ms=2_000)
    assert (plan.action, plan.wake_ms) == ("wait", NOW + 8_000)
    assert plan_wave({A: NOW + 10_000}, now_ms=NOW).wake_ms == NOW + 10_000


def test_a_closed_window_fires_ahead_of_its_opening_not_before_it():
    window = ReprocessWindow.parse("01:00-02:00", "UTC")
    midnight = 1_699_920_000_000  # 2023-11-14 00:00 UTC
    opens = midnight + 3_600_000
    plan = plan_wave({A: midnight - 5}, now_ms=opens - 60_000, window=window, fire_ahead_ms=2_000)
    assert (plan.action, plan.wake_ms) == ("wait", opens - 2_000)
    plan = plan_wave({A: midnight - 5}, now_ms=opens - 1_000, window=window, fire_ahead_ms=2_000)
    assert (plan.action, plan.not_before_ms, plan.keys) == ("fire", opens, (A,))


def test_negative_fire_ahead_is_refused():
    with pytest.raises(ValueError, match="fire_ahead_ms"):
        plan_wave({A: NOW}, now_ms=NOW, fire_ahead_ms=-1)


def test_a_wave_is_taken_once_the_group_commits_past_one_of_its_heads():
    wave = Wave((("t", 0, 10), ("t", 1, 4)), fired_ms=NOW, not_before_ms=NOW)
    assert not wave.taken({A: 10, B: 4})
    assert wave.taken({A: 11, B: 4})
    assert wave.taken({A: 10})  # partition 1 is gone (topic re-created): nothing to wait for
    assert not wave.expired(NOW + 999, 1_000)
    assert wave.expired(NOW + 1_000, 1_000)


def test_a_wave_survives_its_state_round_trip_and_foreign_state_is_ignored():
    wave = Wave((("t", 0, 10),), fired_ms=NOW, not_before_ms=NOW + 5)
    assert Wave.from_state(wave.to_state()) == wave
    for foreign in (None, "x", {"positions": "bad"}, {"positions": [["t", 0, 1]]}, [1, 2]):
        assert Wave.from_state(foreign) is None


def test_a_wave_fired_ahead_expires_counting_from_when_it_became_runnable():
    wave = Wave((("t", 0, 10),), fired_ms=NOW, not_before_ms=NOW + 3_000)
    assert not wave.expired(NOW + 62_999, 60_000)
    assert wave.expired(NOW + 63_000, 60_000)
