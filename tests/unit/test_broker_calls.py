"""The watchers' broker calls (``triggers/broker_calls.py``): a thread each, a deadline, a cap.

Pure thread-and-loop logic: each "call" here is a function blocked on an event the test sets, standing for
a client call stuck in librdkafka. Through the real trigger and broker: test_topology_lane_independence.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_kafka_retry.triggers import broker_calls
from airflow_kafka_retry.triggers.broker_calls import BrokerCalls, CallStuck, abandoned_calls

LIVENESS_S = 30.0  # a bound for what must happen, never a speed check


def _blocked(release: threading.Event, started: threading.Event | None = None):
    def call() -> str:
        if started is not None:
            started.set()
        release.wait(LIVENESS_S)
        return "late"

    return call


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + LIVENESS_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_calls_blocked_on_their_broker_hold_no_other_lanes_call() -> None:
    """Ten lanes' calls blocked (more than asyncio's default executor has threads on a small machine)."""
    release = threading.Event()

    async def main() -> list[str]:
        # asyncio's default executor as on a 2-core triggerer (6 threads): the calls must not use it
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=6))
        lanes = [BrokerCalls(f"lane {i}") for i in range(11)]
        started = [threading.Event() for _ in range(10)]
        stuck = [
            asyncio.ensure_future(lane.run("blocked", _blocked(release, s)))
            for lane, s in zip(lanes, started)
        ]
        deadline = time.monotonic() + LIVENESS_S
        while not all(s.is_set() for s in started):
            assert time.monotonic() < deadline, "the blocked calls never started"
            await asyncio.sleep(0.01)
        healthy = await lanes[10].run("quick", lambda: "answered")
        order = [healthy, "released" if release.is_set() else "still blocked"]
        release.set()
        order += await asyncio.gather(*stuck)
        return order

    try:
        assert asyncio.run(main()) == ["answered", "still blocked"] + ["late"] * 10
    finally:
        release.set()


def test_a_call_past_its_deadline_is_abandoned_and_its_lane_backs_off_until_it_returns() -> None:
    release = threading.Event()
    closed: list[str] = []

    async def main() -> list[str]:
        lane, other = BrokerCalls("retry_1: t (group g)"), BrokerCalls("retry_2")
        seen = []
        with pytest.raises(CallStuck, match=r"retry_1: t \(group g\): reading did not return within 0 s"):
            await lane.run("reading", _blocked(release), deadline_s=0.2)
        assert lane.stuck
        assert abandoned_calls() == 1
        with pytest.raises(CallStuck, match="its reading has not returned"):
            await lane.run("reading again", lambda: "never called")
        # closing what the abandoned call uses waits for it: it runs in its thread once it returns
        await lane.after("closing", lambda: closed.append("closed"))
        seen.append(f"closed before the return: {closed}")
        seen.append(await other.run("quick", lambda: "the other lane answers"))
        release.set()
        await asyncio.to_thread(_until, lambda: not lane.stuck, "the abandoned call never ended")
        seen.append(await lane.run("reading", lambda: "the lane answers again"))
        return seen

    try:
        assert asyncio.run(main()) == [
            "closed before the return: []",
            "the other lane answers",
            "the lane answers again",
        ]
    finally:
        release.set()
    assert closed == ["closed"]
    assert abandoned_calls() == 0


def test_abandoned_calls_are_capped_for_the_process(monkeypatch) -> None:
    monkeypatch.setattr(broker_calls, "MAX_ABANDONED", 2)
    release = threading.Event()

    async def main() -> None:
        for i in range(2):
            with pytest.raises(CallStuck, match="did not return"):
                await BrokerCalls(f"lane {i}").run("reading", _blocked(release), deadline_s=0.1)
        lane = BrokerCalls("lane 2")
        with pytest.raises(
            CallStuck, match=r"2 broker calls of this triggerer are still blocked .*at most 2"
        ):
            await lane.run("reading", lambda: "never called")
        ran: list[str] = []
        await lane.after("closing", lambda: ran.append("closed"))  # what releases is never refused
        assert ran == ["closed"]
        release.set()
        await asyncio.to_thread(_until, lambda: abandoned_calls() == 0, "the abandoned calls never ended")
        assert await lane.run("reading", lambda: "answered") == "answered"

    try:
        asyncio.run(main())
    finally:
        release.set()


def test_what_a_call_raises_reaches_its_lane_as_it_is() -> None:
    """A TimeoutError the call raises itself is its error, not the deadline (the lane is not stuck)."""

    def times_out() -> None:
        raise TimeoutError("from the client")

    async def main() -> None:
        lane = BrokerCalls("lane")
        with pytest.raises(TimeoutError, match="from the client"):
            await lane.run("reading", times_out, deadline_s=10)
        assert not lane.stuck
        assert await lane.run("reading", lambda: 7) == 7

    asyncio.run(main())


def test_a_cancelled_call_leaves_closing_to_its_thread() -> None:
    """The trigger cancelled while a call runs: the watch the call uses is closed once it returns."""
    release, started = threading.Event(), threading.Event()
    closed: list[str] = []

    async def main() -> None:
        lane = BrokerCalls("lane")
        task = asyncio.ensure_future(lane.run("reading", _blocked(release, started)))
        await asyncio.to_thread(started.wait, LIVENESS_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await lane.after("closing", lambda: closed.append("closed"))
        assert closed == []
        release.set()
        await asyncio.to_thread(_until, lambda: bool(closed), "the watch was never closed")

    try:
        asyncio.run(main())
    finally:
        release.set()
    assert closed == ["closed"]


def test_at_most_slots_calls_run_side_by_side_and_one_ending_lets_the_next_in(monkeypatch) -> None:
    """A burst of calls (4,000 lanes opening at once) runs SLOTS at a time; those waiting have no thread."""
    monkeypatch.setattr(broker_calls, "SLOTS", 3)
    monkeypatch.setattr(broker_calls, "SLOW_S", LIVENESS_S)  # none turns slow in this test
    releases = [threading.Event() for _ in range(5)]
    started: list[int] = []
    lock = threading.Lock()

    def call(i: int):
        def blocked() -> int:
            with lock:
                started.append(i)
            releases[i].wait(LIVENESS_S)
            return i

        return blocked

    async def main() -> list[object]:
        threads = threading.active_count()
        tasks = [asyncio.ensure_future(BrokerCalls(f"lane {i}").run("opening", call(i))) for i in range(5)]
        deadline = time.monotonic() + LIVENESS_S
        while len(started) < 3:
            assert time.monotonic() < deadline, "the first calls never started"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # room for a fourth to start, were it let in
        seen: list[object] = [sorted(started), threading.active_count() - threads]
        releases[1].set()  # one ends: the first waiting call takes its slot
        while len(started) < 4:
            assert time.monotonic() < deadline, "the call held back never started"
            await asyncio.sleep(0.01)
        seen.append(started[3])
        for release in releases:
            release.set()
        seen.append(sorted(await asyncio.gather(*tasks)))
        return seen

    try:
        assert asyncio.run(main()) == [[0, 1, 2], 3, 3, [0, 1, 2, 3, 4]]
    finally:
        for release in releases:
            release.set()


def test_a_call_running_past_slow_s_gives_its_slot_up(monkeypatch) -> None:
    """One slot: a call blocked on its broker past SLOW_S lets the next call start beside it."""
    monkeypatch.setattr(broker_calls, "SLOTS", 1)
    monkeypatch.setattr(broker_calls, "SLOW_S", 0.2)
    release = threading.Event()

    async def main() -> str:
        started = threading.Event()
        blocked = asyncio.ensure_future(BrokerCalls("lane 0").run("reading", _blocked(release, started)))
        await asyncio.to_thread(started.wait, LIVENESS_S)
        answered = await BrokerCalls("lane 1").run("quick", lambda: "answered", deadline_s=LIVENESS_S)
        assert not blocked.done()
        release.set()
        assert await blocked == "late"
        return answered

    try:
        assert asyncio.run(main()) == "answered"
    finally:
        release.set()


def test_a_call_that_never_got_a_slot_by_its_deadline_leaves_the_queue(monkeypatch) -> None:
    """No thread was started for it: its lane is not stuck, and nothing runs it later."""
    monkeypatch.setattr(broker_calls, "SLOTS", 1)
    monkeypatch.setattr(broker_calls, "SLOW_S", LIVENESS_S)
    release = threading.Event()
    ran: list[str] = []

    async def main() -> None:
        started = threading.Event()
        blocked = asyncio.ensure_future(BrokerCalls("lane 0").run("reading", _blocked(release, started)))
        await asyncio.to_thread(started.wait, LIVENESS_S)
        lane = BrokerCalls("lane 1")
        with pytest.raises(CallStuck, match=r"lane 1: quick did not start within 0 s: .* 1 slots"):
            await lane.run("quick", lambda: ran.append("ran"), deadline_s=0.2)
        assert not lane.stuck
        assert abandoned_calls() == 0
        release.set()
        assert await blocked == "late"
        assert await lane.run("again", lambda: "answered") == "answered"

    try:
        asyncio.run(main())
    finally:
        release.set()
    assert ran == []
    assert broker_calls.running_calls() == 0
