"""Head watches of one process sharing one consumer (``engine/heads/shared_consumer.py``) on the real broker.

Each test opens watches as the event triggers do with ``[kafka_retry] shared_watch_consumers`` on
(``HeadWatch(config, topics, group, shared=True)``), polls them and looks at what each sees and at the
process's registry of shared consumers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_kafka_retry.engine.heads.head_watch import HeadWatch, HeadWatchError
from airflow_kafka_retry.engine.heads.shared_consumer import SharedConsumer, share_key, shared_consumers
from airflow_kafka_retry.sandbox.broker import EmbeddedBroker
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, unique_topic

from tests.support.fork_check import assert_children_exit_cleanly
from tests.support.tier_records import commit, produce

pytestmark = pytest.mark.integration

SETTLE_S = 60.0  # the longest a watch may take to learn what it is waiting for (a bound, not a check)


def _poll_until(watches: Iterable[HeadWatch], done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + SETTLE_S
    while not done():
        assert time.monotonic() < deadline, "the watches never learnt what was expected"
        for watch in watches:
            watch.poll()
        time.sleep(0.05)


def _sharing(config: dict) -> list[SharedConsumer]:
    return [s for s in shared_consumers() if s.key == share_key(config)]


@pytest.fixture
def config(kafka_bootstrap: str) -> dict:
    # a client id of its own: the watches of this test share a consumer with no other test's
    return {"bootstrap.servers": kafka_bootstrap, "client.id": unique_topic("shared-watch")}


@pytest.fixture
def opened() -> Iterator[list[HeadWatch]]:
    watches: list[HeadWatch] = []
    yield watches
    for watch in watches:
        watch.close()


def test_watches_share_one_consumer_each_sees_its_own_heads_and_a_commit_moves_only_its_group(
    kafka_bootstrap, new_topic, config, opened
):
    a, b = new_topic("shared-a", partitions=2), new_topic("shared-b", partitions=2)
    produce(kafka_bootstrap, a, [(0, 1_000), (0, 2_000)])
    produce(kafka_bootstrap, b, [(1, 3_000)])
    wa = HeadWatch(config, [a], unique_topic("ga"), shared=True)
    opened.append(wa)
    wb = HeadWatch(config, [b], unique_topic("gb"), shared=True)
    opened.append(wb)

    assert wa.shared
    assert wb.shared
    (sharing,) = _sharing(config)
    assert sharing.leases == 2
    _poll_until(opened, lambda: wa.complete and wb.complete)
    assert {k: h.offset for k, h in wa.heads.items()} == {(a, 0): 0}
    assert wa.ended == {(a, 1)}
    assert wa.heads[(a, 0)].due_ms == 1_000
    assert {k: h.offset for k, h in wb.heads.items()} == {(b, 1): 0}
    assert wb.ended == {(b, 0)}
    assert wb.heads[(b, 1)].due_ms == 3_000
    assert wa.peek_of(a).partitions == (0, 1)
    assert wb.peek_of(b).partitions == (0, 1)

    # group a's commit past its head: a's partition is read again, b's watch is left as it was
    b_head = wb.heads[(b, 1)]
    commit(kafka_bootstrap, wa.group, a, {0: 1})
    assert wa.sync_committed() == {(a, 0): 1, (a, 1): -1}
    assert wb.sync_committed() == {(b, 0): -1, (b, 1): -1}
    assert (a, 0) not in wa.heads
    _poll_until(opened, lambda: (a, 0) in wa.heads)
    assert wa.heads[(a, 0)].offset == 1
    assert wa.heads[(a, 0)].due_ms == 2_000
    assert wa.ended == {(a, 1)}
    assert wb.heads == {(b, 1): b_head}
    assert wb.ended == {(b, 0)}

    # closing one watch leaves the other working on the same consumer
    wa.close()
    assert sharing.leases == 1
    assert _sharing(config) == [sharing]
    produce(kafka_bootstrap, b, [(0, 4_000)])
    _poll_until([wb], lambda: (b, 0) in wb.heads)
    assert wb.heads[(b, 0)].due_ms == 4_000
    assert wb.ended == set()
    wb.close()
    assert _sharing(config) == [], "the last watch closes the shared consumer"


def test_a_partition_another_watch_holds_falls_back_to_a_private_consumer(
    kafka_bootstrap, new_topic, config, opened
):
    topic = new_topic("shared-dup", partitions=2)
    produce(kafka_bootstrap, topic, [(1, 5_000)])
    first = HeadWatch(config, [topic], unique_topic("g1"), shared=True)
    opened.append(first)
    second = HeadWatch(config, [topic], unique_topic("g2"), shared=True)
    opened.append(second)

    assert first.shared
    assert not second.shared
    assert [s.leases for s in _sharing(config)] == [1]
    _poll_until(opened, lambda: first.complete and second.complete)
    for watch in (first, second):
        assert {k: h.offset for k, h in watch.heads.items()} == {(topic, 1): 0}
        assert watch.ended == {(topic, 0)}

    # each group's commit moves only its own watch
    commit(kafka_bootstrap, second.group, topic, {1: 1})
    first.sync_committed()
    second.sync_committed()
    _poll_until(opened, lambda: second.complete)
    assert second.heads == {}
    assert second.ended == {(topic, 0), (topic, 1)}
    assert set(first.heads) == {(topic, 1)}


def test_an_unreachable_broker_reaches_every_watch_naming_its_partitions(tmp_path):
    with EmbeddedBroker(log_dir=tmp_path) as broker:
        config = {"bootstrap.servers": broker.bootstrap, "client.id": unique_topic("shared-down")}
        topics = [unique_topic("shared-x"), unique_topic("shared-y")]
        create_topics(broker.bootstrap, topics, partitions=1)
        watches = [HeadWatch(config, [t], unique_topic("g"), shared=True) for t in topics]
        try:
            _poll_until(watches, lambda: all(w.complete for w in watches))
            assert len(_sharing(config)) == 1
            broker.stop()
            with ThreadPoolExecutor(len(watches)) as pool:
                outcomes = list(pool.map(_sync_error, watches))
            for topic, other, message in zip(topics, topics[::-1], outcomes, strict=True):
                assert topic in message  # each watch names its own topic, not the other's
                assert other not in message
        finally:
            for watch in watches:
                watch.close()


def _sync_error(watch: HeadWatch) -> str:
    with pytest.raises(HeadWatchError) as caught:
        watch.sync_committed()
    return str(caught.value)


def test_a_shared_consumer_failing_as_a_whole_fails_every_watch_and_is_replaced(
    kafka_bootstrap, new_topic, config, opened
):
    topics = [new_topic("shared-x"), new_topic("shared-y")]
    opened.extend(HeadWatch(config, [t], unique_topic("g"), shared=True) for t in topics)
    _poll_until(opened, lambda: all(w.complete for w in opened))
    (sharing,) = _sharing(config)
    sharing.consumer.close()  # the client fails as a whole: consuming from it raises from now on
    for topic, watch in zip(topics, opened, strict=True):
        with pytest.raises(HeadWatchError, match=rf"^{topic}\[0\]: watching for records failed: "):
            watch.poll()
    assert sharing.broken is not None
    assert _sharing(config) == []
    fresh = HeadWatch(
        config, [topics[0]], unique_topic("g"), shared=True
    )  # a watch opened again gets a new consumer
    opened.append(fresh)
    assert fresh.shared
    assert _sharing(config) != [sharing]
    assert len(_sharing(config)) == 1
    produce(kafka_bootstrap, topics[0], [(0, 7_000)])
    _poll_until([fresh], lambda: (topics[0], 0) in fresh.heads)


FORK_SCRIPT = """
import os, subprocess, sys
from airflow_kafka_retry.engine.heads.head_watch import HeadWatch
watch = HeadWatch({"bootstrap.servers": sys.argv[1]}, [sys.argv[2]], "fork-check", shared=True)
assert watch.shared
# a preexec_fn runs the at-fork hooks in the child before its exec (as sandbox/postgres.py does)
done = subprocess.run([sys.executable, "-c", "pass"], preexec_fn=lambda: None, check=False)
print("preexec child:", done.returncode)
pid = os.fork()
if pid == 0:  # a forked child that ends normally: the interpreter shuts down with the copies
    sys.exit(0)
print("forked child:", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
watch.close()
"""


def test_a_forked_child_leaves_the_inherited_consumer_alone(kafka_bootstrap, new_topic):
    """A child of a process holding a shared consumer neither uses nor destroys it (destroying aborts)."""
    topic = new_topic("shared-fork", partitions=1)
    assert_children_exit_cleanly(FORK_SCRIPT, kafka_bootstrap, topic)


def test_a_watch_reopened_on_the_shared_consumer_sees_records_of_partitions_its_predecessor_paused(
    kafka_bootstrap, new_topic, config, opened
):
    """
    librdkafka keeps a partition's pause across un-assignment: a watch that closed after pausing at its
    head (a broker error: the trigger opens its watch again) must not leave the next one a partition that
    never fetches. Found by the scheduler demo: the main topic's watcher never saw the replayed orders.
    """
    topic, other = new_topic("shared-reopen"), new_topic("shared-keep")
    produce(kafka_bootstrap, topic, [(0, 1_000)])
    group = unique_topic("g-reopen")
    keeper = HeadWatch(config, [other], unique_topic("g-keep"), shared=True)  # keeps the consumer open
    opened.append(keeper)
    first = HeadWatch(config, [topic], group, shared=True)
    _poll_until([first], lambda: first.complete)
    assert (topic, 0) in first.heads  # paused at its head
    first.close()
    commit(kafka_bootstrap, group, topic, {0: 1})  # its run drained the head meanwhile
    again = HeadWatch(config, [topic], group, shared=True)
    opened.append(again)
    assert [s.leases for s in _sharing(config)] == [2], "the same shared consumer"
    _poll_until([again], lambda: again.complete)
    assert again.heads == {}
    produce(kafka_bootstrap, topic, [(0, 2_000)])  # e.g. a DLT replay writes back onto the topic
    _poll_until([again], lambda: (topic, 0) in again.heads)
    assert again.heads[(topic, 0)].offset == 1
