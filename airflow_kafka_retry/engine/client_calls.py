"""
A watch consumer is closed only when no call of another thread is inside it.

confluent-kafka's ``Consumer.close()`` destroys the librdkafka handle at once. A call another thread is
making on it meanwhile (an assignment, a watermark read, a ``consume``: each runs with the GIL released)
then reads freed memory, and the process dies of SIGSEGV. The triggers make such calls from worker threads
(``asyncio.to_thread``), and a trigger cancelled while it awaits one closes its watch from another thread
while the first still runs: the thread outlives the ``await`` it was started by. Measured: the triggerer's
trigger runner died of SIGSEGV in the rolling restart of a 3-node cluster (fault case 19), where broker
errors close and reopen watches while their calls wait on the brokers.

:class:`ClientCalls` counts the calls in flight on one client. :meth:`ClientCalls.close` refuses new
calls, waits for those in flight (each bounded by its own client timeout) up to ``wait_s``, then closes;
if they still run then, the close is left to the last of them, so it never happens under a call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from confluent_kafka import KafkaException

log = logging.getLogger(__name__)

#: how long a close waits for the calls in flight before leaving the close to the last of them
CLOSE_WAIT_S = 30.0


class ClientClosed(KafkaException):
    """The client is closed or closing: no new call is made on it."""


class ClientCalls:
    """The calls in flight on one client, and its close once none is."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._cond = threading.Condition()
        self._calls = 0
        self._close: Callable[[], None] | None = None  # set once closing
        self._deferred = False  # the close waited in vain: the last call runs it
        self.closed = False

    @contextmanager
    def call(self) -> Iterator[None]:
        """Around a call on the client; raises :class:`ClientClosed` once it is closing."""
        with self._cond:
            if self._close is not None:
                raise ClientClosed(f"{self.what} is closed")
            self._calls += 1
        try:
            yield
        finally:
            with self._cond:
                self._calls -= 1
                last = self._calls == 0 and self._deferred and not self.closed
                if last:
                    self.closed = True
                self._cond.notify_all()
            if last:  # the close left to the last call (see close)
                self._run(self._close)

    def close(self, close: Callable[[], None], wait_s: float = CLOSE_WAIT_S) -> bool:
        """
        Run ``close`` once no call is in flight; True if it ran here.

        Waits up to ``wait_s`` for the calls in flight; if some still run then, the last of them runs
        ``close`` when it returns (False here).
        """
        with self._cond:
            if self._close is not None:
                return False
            self._close = close
            idle = self._cond.wait_for(lambda: self._calls == 0, wait_s)
            if idle:
                self.closed = True
            else:
                self._deferred = True
        if idle:
            self._run(close)
        else:
            log.warning("%s: a call still runs after %.0f s; the last call closes it", self.what, wait_s)
        return idle

    def _run(self, close: Callable[[], None] | None) -> None:
        if close is None:
            return
        try:
            close()
        except (KafkaException, RuntimeError) as exc:  # closing a client that already failed
            log.debug("%s: close: %s", self.what, exc)
