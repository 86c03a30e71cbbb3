"""``bench/replay_rate.py``'s windows: moves per second in each full window, the last one apart."""

from __future__ import annotations

from bench.replay_rate import windows


def test_full_windows_and_the_shorter_last_one():
    stamps = [1000 + 100 * i for i in range(25)]  # 10 a second for 2.4 s
    full, tail = windows(stamps, 1.0)
    assert full == [10.0, 10.0]
    assert tail == {"seconds": 0.4, "records": 5}


def test_a_stall_shows_as_a_low_window():
    stamps = [0, 100, 200, 2500, 2600, 3100]
    full, _ = windows(stamps, 1.0)
    assert full == [3.0, 0.0, 2.0]


def test_no_copies_no_windows():
    assert windows([], 10.0) == ([], None)
