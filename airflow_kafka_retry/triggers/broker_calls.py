"""
The watchers' blocking broker calls: each in a thread of its own, with a deadline the trigger enforces.

``asyncio.to_thread`` runs on the event loop's default executor: min(32, cores + 4) threads, 6 on 2 cores,
shared by every trigger of the triggerer. Once six lanes waited on a lost coordinator (each holding a
thread 15 + 5 s), a healthy lane's call queued behind them and its due records did not fire (measured:
with 6 blocked ``to_thread`` calls, a trivial 7th finished only after 5 s). Here each call starts a
thread of its own that ends with the call: a lane waiting on its broker holds one thread, an idle
topology none, and no lane's call waits for another's longer than :data:`SLOW_S`: at most :data:`SLOTS`
calls run side by side (a burst of openings stays small in memory: a call waiting for its turn has no
thread yet), and a call running longer than :data:`SLOW_S`, a lane waiting on its broker, gives its slot
up. A call that has not started by its deadline is dropped from the queue, and its lane backs off.

Each call has a deadline (:data:`CALL_DEADLINE_S`, beyond the client timeouts the call hands librdkafka,
which normally end it first). A call still running at its deadline is *abandoned*: the lane gets
:class:`CallStuck` and backs off as after any broker error, and the call's thread is left to end when
the client returns (a thread blocked in librdkafka cannot be stopped). Abandoned calls cannot pile up: a
lane makes no new call while its abandoned one runs (each fails at once with :class:`CallStuck`, and the
lane keeps backing off), what must follow the abandoned call (closing the watch it was using) runs in
its thread when it returns, and the process holds at most :data:`MAX_ABANDONED` abandoned calls, past
which every new call fails at once until some return.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Seconds a watcher's broker call may take before it is abandoned (its client timeouts end it first).
CALL_DEADLINE_S = 60.0
#: Abandoned calls (past their deadline, their thread still blocked in the client) a process holds at most.
MAX_ABANDONED = 64
#: Calls that start side by side; a call running longer than :data:`SLOW_S` gives its slot up (it waits on
#: its broker, and holds no other call back). Without it, 800 lanes opening at once ran 800 calls side by
#: side and left the triggerer 38 MB larger (200 topologies: 191 MB, against 152 MB with asyncio's pool;
#: ``bench.topology_watchers``).
SLOTS = 8
SLOW_S = 0.25

_LOCK = threading.Lock()
_abandoned = 0  # guarded by _LOCK
_running = 0  # calls whose thread has not ended, abandoned ones included; guarded by _LOCK


class _Gate:
    """
    At most :data:`SLOTS` calls run side by side, not counting those running longer than :data:`SLOW_S`.

    A call waiting for a slot has no thread yet: it is queued here and its thread starts when a running call
    ends or turns slow. (A thread per waiting call made 4,000 lanes opening at once 4,000 threads, each
    woken on every slot's change: the bench process's load average went past 2,000.)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fast = 0  # calls started and not yet slow or ended
        self._waiting: deque[_Call] = deque()

    def submit(self, call: _Call) -> None:
        """Start ``call`` now if a slot is free, else queue it."""
        with self._lock:
            if self._fast >= SLOTS:
                self._waiting.append(call)
                return
            self._fast += 1
            call.fast = True
        call.start()

    def withdraw(self, call: _Call) -> bool:
        """Take a call that has not started out of the queue; False if it has started."""
        with self._lock:
            try:
                self._waiting.remove(call)
            except ValueError:
                return False
            return True

    def release(self, call: _Call) -> None:
        """``call`` ended or turned slow: its slot goes to the first call waiting, if any."""
        with self._lock:
            if not call.fast:
                return
            call.fast = False
            if self._waiting:
                after = self._waiting.popleft()
                after.fast = True  # the slot passes on: _fast is unchanged
            else:
                self._fast -= 1
                return
        after.start()


_GATE = _Gate()


class CallStuck(RuntimeError):
    """A lane's broker call did not return by its deadline, or an abandoned one has not returned yet."""


def abandoned_calls() -> int:
    """How many abandoned calls of this process still run."""
    with _LOCK:
        return _abandoned


def running_calls() -> int:
    """How many calls of this process have a thread (what the watchers cost in threads right now)."""
    with _LOCK:
        return _running


class _Call:
    """One call: what it is, whether it started, was abandoned, and what runs after it."""

    def __init__(
        self, what: str, fn: Callable[[], Any], loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]
    ) -> None:
        self.what = what
        self.fn = fn
        self.loop = loop
        self.future = future
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.fast = False  # holds one of the gate's slots (guarded by the gate's lock)
        self.ended = False
        self.abandoned = False
        self.after: list[Callable[[], object]] = []

    def start(self) -> None:
        """Its thread, and the gate's slot back after :data:`SLOW_S` if it still runs then."""
        self.started = time.monotonic()
        threading.Thread(target=self.work, name=f"kafka-retry: {self.what}", daemon=True).start()
        with contextlib.suppress(RuntimeError):  # the loop is closed: the slot comes back when the call ends
            self.loop.call_soon_threadsafe(self.loop.call_later, SLOW_S, _GATE.release, self)

    def work(self) -> None:
        try:
            self._work()
        finally:
            _count_running(-1)

    def _work(self) -> None:
        outcome: tuple[Any, BaseException | None]
        try:
            outcome = (self.fn(), None)
        except BaseException as exc:  # handed to the awaiting lane as it is
            outcome = (None, exc)
        finally:
            _GATE.release(self)
        with self.lock:
            self.ended = True
            after, self.after = self.after, []
            abandoned = self.abandoned
        if abandoned:
            _release()
        for step in after:  # the watch it was using, closed now it is done with it
            with contextlib.suppress(Exception):
                step()
        if not abandoned:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                self.loop.call_soon_threadsafe(_settle, self.future, outcome)

    def abandon(self) -> bool:
        """Mark the call abandoned (counted until it returns); False if it has returned meanwhile."""
        global _abandoned
        with self.lock:
            if self.ended:
                return False
            self.abandoned = True
        with _LOCK:
            _abandoned += 1
        return True


def _count_running(step: int) -> None:
    global _running
    with _LOCK:
        _running += step


def _release() -> None:
    global _abandoned
    with _LOCK:
        _abandoned -= 1


def _settle(future: asyncio.Future[Any], outcome: tuple[Any, BaseException | None]) -> None:
    if future.done():
        return
    result, exc = outcome
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


class BrokerCalls:
    """
    One lane's blocking broker calls (a watcher of one tier has one lane).

    :param where: the lane, as its errors name it.
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self._stuck: _Call | None = None  # its abandoned call, until it returns

    @property
    def stuck(self) -> bool:
        """Whether the lane's abandoned call still runs."""
        stuck = self._stuck
        return stuck is not None and not stuck.ended

    async def run(
        self, what: str, fn: Callable[[], T], deadline_s: float | None = None, *, capped: bool = True
    ) -> T:
        """
        ``fn()`` in a thread of its own; its result, or what it raised.

        Raises :class:`CallStuck` when it does not return within ``deadline_s`` (default
        :data:`CALL_DEADLINE_S`; it is abandoned), and at
        once while the lane's abandoned call still runs or (``capped``) the process holds
        :data:`MAX_ABANDONED`.
        """
        self._refuse_if_stuck(capped=capped)
        if deadline_s is None:
            deadline_s = CALL_DEADLINE_S
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        call = _Call(what, fn, loop, future)
        _count_running(1)
        _GATE.submit(call)
        try:
            await asyncio.wait({future}, timeout=deadline_s)
        except asyncio.CancelledError:  # the trigger stops: a started call's thread goes on, counted
            future.cancel()
            if _GATE.withdraw(call):
                _count_running(-1)
            elif call.abandon():
                self._stuck = call  # closing the watch it uses waits for it (after)
            raise
        if not future.done() and _GATE.withdraw(call):
            _count_running(-1)
            raise CallStuck(
                f"{self.where}: {what} did not start within {deadline_s:.0f} s: the triggerer's other broker "
                f"calls held every one of its {SLOTS} slots"
            )
        if not future.done() and call.abandon():
            future.cancel()
            self._stuck = call
            raise CallStuck(
                f"{self.where}: {what} did not return within {deadline_s:.0f} s; abandoned (its thread ends "
                "when the Kafka client's call does), the lane makes no broker call until it has"
            )
        return await future  # done, or it returned right at the deadline: its outcome is on its way

    async def after(self, what: str, fn: Callable[[], object], deadline_s: float | None = None) -> None:
        """
        ``fn()`` once the lane's abandoned call returns (in its thread), or now (as :meth:`run`).

        For closing a watch: the abandoned call may still be using it. Not refused past
        :data:`MAX_ABANDONED` (what it releases must be released); raises :class:`CallStuck` at its deadline.
        """
        stuck = self._stuck
        if stuck is not None:
            with stuck.lock:
                if not stuck.ended:
                    stuck.after.append(fn)
                    return
        await self.run(what, fn, deadline_s, capped=False)

    def _refuse_if_stuck(self, *, capped: bool) -> None:
        stuck = self._stuck
        if stuck is not None:
            if not stuck.ended:
                raise CallStuck(
                    f"{self.where}: its {stuck.what} has not returned "
                    f"{time.monotonic() - stuck.started:.0f} s after it started (abandoned at its deadline); "
                    "no new broker call until it does"
                )
            self._stuck = None
        held = abandoned_calls()
        if capped and held >= MAX_ABANDONED:
            raise CallStuck(
                f"{self.where}: {held} broker calls of this triggerer are still blocked past their deadline "
                f"(at most {MAX_ABANDONED}); no new call until some return"
            )
