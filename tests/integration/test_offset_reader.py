"""Committed offsets of any group read in a child process (``heads/offset_reader.py``), on the real broker.

The child runs the admin request that can crash librdkafka; these tests check that it reads what a
consumer of the group reads, that its crash or hang fails only the requests in flight (naming the process
and how it ended) and the next request gets a new child, that it dies with its parent, and that the Kafka
configuration never travels on its command line or in its environment. The crash it guards against, on a
3-node cluster whose coordinators move, is in ``tests/integration/test_kafka_cluster.py``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from airflow_kafka_retry.engine.heads import offset_reader as reader_module
from airflow_kafka_retry.engine.heads.offset_reader import OffsetReader, OffsetReaderDied, OffsetReaderStuck
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.support.tier_records import commit

pytestmark = pytest.mark.integration

GONE_S = 15.0  # how long a child may take to go once it should (a bound, not a check)


@pytest.fixture
def config(kafka_bootstrap: str) -> dict:
    return {"bootstrap.servers": kafka_bootstrap, "client.id": unique_topic("offset-reader-marker")}


@pytest.fixture
def reader(config: dict) -> Iterator[OffsetReader]:
    opened = OffsetReader(config)
    yield opened
    opened.close()


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + GONE_S
    while os.path.exists(f"/proc/{pid}") and _state(pid) != "Z":
        assert time.monotonic() < deadline, f"process {pid} is still there {GONE_S:.0f} s later"
        time.sleep(0.1)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_reads_what_a_consumer_of_the_group_reads(kafka_bootstrap, new_topic, reader):
    topic = new_topic("reader", partitions=3)
    group = unique_topic("reader-group")
    commit(kafka_bootstrap, group, topic, {0: 5, 2: 9})  # partition 1: nothing committed
    keys = [(topic, 0), (topic, 1), (topic, 2)]

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        expected = {
            (tp.topic, tp.partition): tp.offset if tp.offset >= 0 else -1
            for tp in consumer.committed([TopicPartition(t, p) for t, p in keys], timeout=30)
        }
    finally:
        consumer.close()

    assert expected == {(topic, 0): 5, (topic, 1): -1, (topic, 2): 9}
    assert reader.committed(group, keys, 30.0) == expected
    assert reader.pid is not None
    assert reader.pid != os.getpid()


def test_a_crashed_child_fails_the_requests_in_flight_naming_it_and_the_next_request_starts_another(
    kafka_bootstrap, new_topic, reader
):
    topic = new_topic("reader-crash")
    group = unique_topic("reader-group")
    commit(kafka_bootstrap, group, topic, {0: 3})
    assert reader.committed(group, [(topic, 0)], 30.0) == {(topic, 0): 3}
    first = reader.pid
    assert first is not None

    os.kill(first, signal.SIGSTOP)  # holds the next request unanswered
    failures: list[BaseException] = []
    asking = threading.Thread(
        target=lambda: _record(failures, lambda: reader.committed(group, [(topic, 0)], 30.0)), daemon=True
    )
    asking.start()
    time.sleep(0.5)
    os.kill(first, signal.SIGSEGV)  # what librdkafka's admin thread does when a coordinator moves
    os.kill(first, signal.SIGCONT)
    asking.join(GONE_S)

    assert not asking.is_alive(), "the request in flight never ended"
    assert len(failures) == 1, failures
    assert isinstance(failures[0], OffsetReaderDied), failures
    assert f"process {first} was killed by signal 11 (SIGSEGV)" in str(failures[0])
    assert reader.committed(group, [(topic, 0)], 30.0) == {(topic, 0): 3}
    assert reader.pid not in (None, first)


def test_a_child_that_does_not_answer_is_killed_at_the_deadline(kafka_bootstrap, new_topic, reader):
    topic = new_topic("reader-stuck")
    group = unique_topic("reader-group")
    commit(kafka_bootstrap, group, topic, {0: 7})
    assert reader.committed(group, [(topic, 0)], 30.0) == {(topic, 0): 7}
    stuck = reader.pid
    assert stuck is not None
    os.kill(stuck, signal.SIGSTOP)

    with pytest.raises(OffsetReaderStuck, match=rf"group '{group}': no answer .* process {stuck} \(killed"):
        reader.committed(group, [(topic, 0)], 1.0)

    _wait_gone(stuck)
    assert reader.committed(group, [(topic, 0)], 30.0) == {(topic, 0): 7}


def test_a_request_that_times_out_retires_its_child_and_the_next_goes_to_a_new_one() -> None:
    """After a rolling restart a long-lived admin client timed out every request until it was replaced.

    Here the "broker" takes connections and never answers, so each request times out."""
    silent = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.extend(iter(lambda: silent.accept()[0], None)), daemon=True).start()
    reader = OffsetReader({"bootstrap.servers": f"127.0.0.1:{silent.getsockname()[1]}"})
    try:
        pids = []
        for _ in range(2):
            with pytest.raises(KafkaException, match="_TIMED_OUT"):
                reader.committed("g", [("t", 0)], 1.0)
            pids.append(reader._child.pid if reader._child is not None else None)
        assert None not in pids, pids
        assert pids[0] != pids[1], pids
        _wait_gone(pids[0])  # the retired child ended once it had answered
    finally:
        reader.close()
        silent.close()
        for connection in held:
            connection.close()


def test_the_child_dies_with_its_parent_and_gets_its_configuration_through_the_pipe(config, new_topic):
    """A parent SIGKILLed leaves no child; the child's command line and environment never hold the config."""
    topic = new_topic("reader-parent")
    marker = config["client.id"]
    script = (
        "import sys, time\n"
        "from airflow_kafka_retry.engine.heads.offset_reader import OffsetReader\n"
        "r = OffsetReader({'bootstrap.servers': sys.argv[1], 'client.id': sys.argv[2]})\n"
        "print(r.committed('g', [(sys.argv[3], 0)], 30.0), r.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    # the marker reaches the parent on its command line only; the child must not have it in either
    parent = subprocess.Popen(
        [sys.executable, "-c", script, config["bootstrap.servers"], marker, topic],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline().split()
        assert line[:2] == ["{('" + topic + "',", "0):"], line
        child = int(line[-1])
        with open(f"/proc/{child}/cmdline", "rb") as cmdline, open(f"/proc/{child}/environ", "rb") as environ:
            assert marker.encode() not in cmdline.read() + environ.read()
        parent.kill()
        parent.wait(GONE_S)
        _wait_gone(child)
    finally:
        parent.kill()
        parent.wait(GONE_S)


def test_one_reader_per_kafka_configuration(config):
    assert reader_module.offset_reader(config) is reader_module.offset_reader(dict(config))
    other = {**config, "client.id": config["client.id"] + "-other"}
    assert reader_module.offset_reader(other) is not reader_module.offset_reader(config)


def _record(failures: list[BaseException], call) -> None:
    try:
        call()
    except BaseException as exc:  # the test looks at it
        failures.append(exc)
