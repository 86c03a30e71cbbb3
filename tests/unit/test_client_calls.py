"""A watch consumer is closed only when no other thread's call is inside it (engine/client_calls.py)."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_kafka_retry.engine.client_calls import ClientCalls, ClientClosed


def _call_in_thread(
    calls: ClientCalls, release: threading.Event, entered: threading.Event
) -> threading.Thread:
    def run() -> None:
        with calls.call():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=run)
    thread.start()
    assert entered.wait(10)
    return thread


def test_close_waits_for_the_call_in_flight_then_closes_once():
    calls, release, entered, closed = ClientCalls("test"), threading.Event(), threading.Event(), []
    thread = _call_in_thread(calls, release, entered)
    threading.Timer(0.3, release.set).start()
    started = time.monotonic()
    assert calls.close(lambda: closed.append(time.monotonic()), wait_s=10) is True
    thread.join(10)
    assert len(closed) == 1
    assert closed[0] - started >= 0.25  # not before the call returned
    with pytest.raises(ClientClosed), calls.call():
        pass  # pragma: no cover - never entered
    assert calls.close(lambda: closed.append(0.0)) is False  # a second close does nothing
    assert len(closed) == 1


def test_a_call_outliving_the_wait_closes_the_client_when_it_returns():
    calls, release, entered, closed = ClientCalls("test"), threading.Event(), threading.Event(), []
    thread = _call_in_thread(calls, release, entered)
    assert calls.close(lambda: closed.append(threading.current_thread().name), wait_s=0.1) is False
    assert closed == []  # never under the call
    release.set()
    thread.join(10)
    assert closed == [thread.name]  # the last call closed it, once


def test_an_idle_client_closes_at_once():
    calls, closed = ClientCalls("test"), []
    assert calls.close(lambda: closed.append(1)) is True
    assert closed == [1]
