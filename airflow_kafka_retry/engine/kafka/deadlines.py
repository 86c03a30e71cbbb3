"""
Deadlines the engine enforces itself on the Kafka client calls of a partition run.

librdkafka bounds most calls by the timeout they are given, but not every one: when the broker that
coordinates a group or a transaction dies, ``send_offsets_to_transaction``, ``commit_transaction`` and
``committed`` have been seen waiting far past it (confluentinc/librdkafka #5456 and #5511; on a 3-node
cluster here, a partition whose leader and coordinators were SIGKILLed stopped for good in 3 runs of 6).
A timeout handed to the client is therefore a wish; the deadline that counts is this module's.

Every call of a partition run that can block goes through :meth:`CallDeadlines.call`, which notes what is
waited for (the call, the broker role it needs) and until when: the call's own timeout plus a grace
period, and never past the attempt's ``give_up_at``. A supervisor (``engine/drain/supervisor.py``) asks
:meth:`CallDeadlines.overdue` while the partition runs; a call past its deadline is *abandoned*: the
partition's thread cannot be stopped inside librdkafka, so it is left there, and whenever the call
returns its thread raises :class:`AttemptAbandoned` at once instead of going on. The supervisor then
retries the partition with fresh clients, whose ``init_transactions`` fences whatever the abandoned
attempt left open, or fails it with a :class:`CallStuckError` naming the partition, the call and the
broker it waited for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

#: Seconds a call may run past the timeout it was given before the engine abandons it.
CALL_GRACE_S = 5.0


class CallStuckError(RuntimeError):
    """A client call did not return by the engine's deadline; its attempt of the partition was abandoned."""


class AbortNow(str):
    """
    A stop reason that ends a partition's attempt at once, not at its next chunk boundary.

    Its open chunk is aborted (for a task that outlived its Airflow supervisor: the next try is coming).
    A ``str``, so that it reads and compares as its reason wherever a stop reason goes.
    """

    __slots__ = ()


class AttemptStopped(CallStuckError):
    """
    An attempt ended at once by an :class:`AbortNow` stop (its open chunk aborted, nothing committed).

    ``may_have_committed``: the stop came while the chunk's commit was in progress, which may still have
    gone through (the next run resumes at the committed offset either way).
    """

    may_have_committed = False


#: Calls that commit a chunk: a stop during one cannot say whether the chunk committed.
_COMMITS = frozenset({"commit_transaction", "commit"})


class AttemptAbandoned(BaseException):
    """
    Raised in an abandoned attempt's thread when its call returns at last.

    A ``BaseException``, so that neither the batch runner nor the partition's error handling takes it for
    a failure to report: the attempt's result was already replaced by the supervisor's.
    """


@dataclass(frozen=True)
class Waiting:
    """One call in progress: what it is, which broker role it waits for, and its deadline (monotonic)."""

    call: str
    waits_for: str
    started: float
    deadline: float
    timeout_s: float

    def describe(self, now: float) -> str:
        return (
            f"{self.call} waited {now - self.started:.0f}s for {self.waits_for} "
            f"(timeout {self.timeout_s:g}s, abandoned by the engine's deadline)"
        )


class CallDeadlines:
    """
    The deadlines of one attempt of one partition run (see the module's docstring).

    :param where: ``topic[partition]``, for messages.
    :param grace_s: seconds past a call's timeout before it is overdue.
    :param give_up_at: a monotonic time no call's deadline may pass (the end of the partition's retries).
    :param clock: monotonic seconds (a test's clock).
    """

    def __init__(
        self,
        where: str,
        *,
        grace_s: float = CALL_GRACE_S,
        give_up_at: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.where = where
        self.grace_s = grace_s
        self.give_up_at = give_up_at
        self.clock = clock
        self._lock = threading.Lock()
        self._current: Waiting | None = None
        self.abandoned: CallStuckError | None = None

    def timeout(self, timeout_s: float) -> float:
        """The timeout to hand a client call: ``timeout_s``, cut to what is left before ``give_up_at``."""
        if self.give_up_at is None:
            return timeout_s
        return max(0.1, min(timeout_s, self.give_up_at - self.clock()))

    @contextmanager
    def call(self, name: str, timeout_s: float, waits_for: str) -> Iterator[None]:
        """
        Run a blocking client call under the engine's deadline: ``timeout_s`` plus the grace period.

        Raises :class:`AttemptAbandoned` before the call if the attempt was abandoned, and after it if it
        was abandoned meanwhile (whatever the call returned or raised).
        """
        now = self.clock()
        deadline = now + timeout_s + self.grace_s
        if self.give_up_at is not None:
            deadline = min(deadline, self.give_up_at + self.grace_s)
        with self._lock:
            if self.abandoned is not None:
                raise AttemptAbandoned(str(self.abandoned))
            self._current = Waiting(name, waits_for, now, deadline, timeout_s)
        try:
            yield
        finally:
            with self._lock:
                self._current = None
                abandoned = self.abandoned
            if abandoned is not None:
                raise AttemptAbandoned(str(abandoned))

    def overdue(self) -> CallStuckError | None:
        """
        Abandon the attempt if its call is past its deadline, and say why (None: nothing overdue).

        Atomic with the end of the call: a call that returns in time is never abandoned afterwards.
        """
        with self._lock:
            if self.abandoned is not None:
                return self.abandoned
            current, now = self._current, self.clock()
            if current is None or now < current.deadline:
                return None
            self.abandoned = CallStuckError(f"{self.where}: {current.describe(now)}")
            return self.abandoned

    def stop_now(self, reason: str) -> AttemptStopped:
        """Abandon the attempt at once, whatever it is doing: its thread stops at its next call or check."""
        with self._lock:
            if self.abandoned is None:
                current = self._current
                if current is not None and current.call in _COMMITS:
                    stopped = AttemptStopped(
                        f"{self.where}: stopped at once ({reason}) while {current.call} was in progress: "
                        "the chunk may have committed"
                    )
                    stopped.may_have_committed = True
                else:
                    stopped = AttemptStopped(f"{self.where}: stopped at once ({reason})")
                self.abandoned = stopped
            return self.abandoned if isinstance(self.abandoned, AttemptStopped) else AttemptStopped(reason)

    def check(self) -> None:
        """Raise :class:`AttemptAbandoned` if the attempt was abandoned (between two calls)."""
        if self.abandoned is not None:
            raise AttemptAbandoned(str(self.abandoned))

    @property
    def waiting(self) -> Waiting | None:
        """The call in progress, if any."""
        return self._current


#: Seconds between two looks at a watched attempt's deadlines.
POLL_S = 0.2


class _Outcome:
    """``work()`` started in a daemon thread: whether it has ended, and its result or exception."""

    def __init__(self, work: Callable[[], object], name: str) -> None:
        self._result: tuple[bool, object] | None = None
        self.finished = threading.Event()

        def run() -> None:
            try:
                self._result = (True, work())
            except BaseException as exc:  # handed to the waiting thread
                self._result = (False, exc)
            finally:
                self.finished.set()

        threading.Thread(target=run, name=name, daemon=True).start()

    def value(self) -> object:
        """The result, or the exception raised here (once :attr:`finished` is set)."""
        if self._result is None:
            raise RuntimeError("the work has not ended")
        ok, value = self._result
        if not ok:
            raise value  # type: ignore[misc]
        return value


def run_watched(
    work: Callable[[], T],
    deadlines: CallDeadlines,
    *,
    settled: Callable[[], bool] = lambda: False,
    stop_now: Callable[[], str | None] = lambda: None,
    poll_s: float = POLL_S,
) -> T | None:
    """
    ``work()`` in a daemon thread of its own, under ``deadlines``: its result, or its exception raised here.

    A call under ``deadlines`` past its deadline abandons the attempt: :class:`CallStuckError` is raised
    here and the thread is left to stop when its call returns. Once ``settled()`` says the work's outcome
    is final (only closing clients may be left), None is returned without waiting for the thread. A reason
    from ``stop_now()`` abandons the attempt at once (:class:`AttemptStopped`).
    """
    outcome = _Outcome(work, f"attempt-{deadlines.where}")
    while not outcome.finished.wait(poll_s):
        if settled():
            return None
        reason = stop_now()
        if reason is not None:
            raise deadlines.stop_now(reason)
        stuck = deadlines.overdue()
        if stuck is not None:
            raise stuck
    return outcome.value()  # type: ignore[return-value]


def bounded(work: Callable[[], T], *, seconds: float, what: str) -> T:
    """
    ``work()``'s result (or its exception) if it ends within ``seconds``; else a :class:`CallStuckError`.

    For a unit of Kafka work with several client calls and no attempt of its own to retry (a DLT watch's
    scan, its commit): ``work`` runs in a daemon thread, which is abandoned if it overruns; ``what`` says
    what it waited for.
    """
    outcome = _Outcome(work, f"bounded-{what[:40]}")
    if not outcome.finished.wait(seconds):
        raise CallStuckError(f"{what} did not end within {seconds:g}s (abandoned by the engine's deadline)")
    return outcome.value()  # type: ignore[return-value]
