"""
``handler_timeout``: a handler call that does not return in time fails, and the run goes on.

A Python thread cannot be killed, so each handler call runs in a fresh daemon thread and the
partition waits for it at most ``timeout_s``. A call that overruns fails its batch with
:class:`~airflow_kafka_retry.errors.HandlerTimeoutError`; the batch runner then bisects the
batch as for any failure, isolates the record that hangs, and it is routed like any other
failed record. The thread of an overrun call is *abandoned*, not stopped: it keeps running
(and keeps whatever it holds) until it returns or the process exits, and whatever it does when
it returns happens after its records were already routed or redelivered -- handling is at least
once, as always. So that abandoned threads cannot pile up without bound, a partition run stops
(fails, at the chunk being handled, which is not committed) once ``max_abandoned`` calls have
been abandoned; the next run, in a fresh process, goes on from the committed offset.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from airflow_kafka_retry.errors import HandlerTimeoutError

#: Abandoned (hung) handler calls a partition run tolerates before it stops.
MAX_ABANDONED_CALLS = 32


class HandlerStuckError(BaseException):
    """
    Too many handler calls were abandoned; the partition run stops (not a record failure).

    A ``BaseException`` so the batch runner does not take it for a handler failure to route.
    """


class TimedHandler:
    """
    Wraps a handler so that each call returns, or raises, within ``timeout_s`` seconds.

    :param handler: the user's handler.
    :param timeout_s: seconds a call may take.
    :param name: how messages name the handler (its import path).
    :param max_abandoned: calls that may overrun before :class:`HandlerStuckError` stops the run.
    """

    def __init__(
        self,
        handler: Callable[[list[Any]], object],
        timeout_s: float,
        *,
        name: str,
        max_abandoned: int = MAX_ABANDONED_CALLS,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"handler timeout must be > 0 seconds, got {timeout_s!r}")
        self.handler = handler
        self.timeout_s = timeout_s
        self.name = name
        self.max_abandoned = max_abandoned
        self.abandoned = 0

    def __call__(self, records: Sequence[Any]) -> None:
        if self.abandoned >= self.max_abandoned:
            raise HandlerStuckError(
                f"handler {self.name!r} overran handler_timeout ({self.timeout_s:g}s) {self.abandoned} times "
                "in "
                "this run; stopping the partition so that hung handler threads do not pile up (the chunk "
                "being "
                f"handled is not committed; the next run goes on from the committed offset)"
            )
        outcome: list[BaseException | None] = []
        finished = threading.Event()
        batch = list(records)

        def call() -> None:
            try:
                self.handler(batch)
                outcome.append(None)
            except BaseException as exc:  # handed to the waiting thread
                outcome.append(exc)
            finally:
                finished.set()

        worker = threading.Thread(target=call, name=f"handler-{self.name}", daemon=True)
        worker.start()
        if not finished.wait(self.timeout_s):
            self.abandoned += 1
            first = getattr(batch[0], "coordinates", "?") if batch else "?"
            raise HandlerTimeoutError(
                f"handler {self.name!r} did not return within {self.timeout_s:g}s for a batch of "
                f"{len(batch)} "
                f"record(s) starting at {first}; its thread was abandoned"
            )
        error = outcome[0]
        if error is not None:
            raise error
