"""The triggerer's event loop never waits on a shared consumer's lock held across a blocking call (issue 38,
item 11).

``Lease.take()`` and ``Lease.pause()`` run on the event loop (``HeadWatch.poll``); worker threads assign
partitions. librdkafka's ``incremental_assign`` waits for the client's main thread to answer, so it can
block; it used to run holding the lock ``take()`` needs, and every watcher of the triggerer stalled behind
it. Here the client is replaced by one whose assign blocks until released.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import TopicPartition

from airflow_kafka_retry.engine.heads import shared_consumer

KEY = ("orders-retry-1", 0)


class _BlockingClient:
    """A consumer whose assignment calls block until ``release`` is set; nothing is ever fetched."""

    def __init__(self) -> None:
        self.assigning = threading.Event()
        self.release = threading.Event()

    def _block(self, tps) -> None:
        self.assigning.set()
        self.release.wait(20)

    incremental_assign = incremental_unassign = _block

    def pause(self, tps) -> None:
        pass

    def resume(self, tps) -> None:
        pass

    def consume(self, num_messages, timeout):
        return []

    def close(self) -> None:
        pass


def _within(seconds: float, call) -> bool:
    """Whether ``call()`` returns within ``seconds`` (it runs in a daemon thread)."""
    done = threading.Event()
    thread = threading.Thread(target=lambda: (call(), done.set()), daemon=True)
    thread.start()
    return done.wait(seconds)


def test_take_and_pause_do_not_wait_for_a_blocked_assignment():
    lease = shared_consumer.lease({"bootstrap.servers": "127.0.0.1:9"})
    real = lease.sharing.consumer
    client = _BlockingClient()
    lease.sharing.consumer = lease.consumer = client
    try:
        assert lease.claim([KEY])
        for change in (lease.assign, lease.reassign):
            client.assigning.clear()
            worker = threading.Thread(target=change, args=([TopicPartition(*KEY, 5)],), daemon=True)
            worker.start()
            assert client.assigning.wait(5), "the assignment never reached the client"
            started = time.monotonic()
            assert _within(2.0, lease.take), f"take() waited on {change.__name__}'s lock"
            assert _within(2.0, lambda: lease.pause([TopicPartition(*KEY)])), (
                f"pause() waited on {change.__name__}"
            )
            assert time.monotonic() - started < 4.5
            client.release.set()
            worker.join(5)
            assert not worker.is_alive()
            client.release.clear()
    finally:
        client.release.set()
        lease.sharing.consumer = lease.consumer = real
        lease.close()
