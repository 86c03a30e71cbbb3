"""A watch's admin request the broker does not answer is a broker error of its lane, never a TimeoutError.

``Lease.log_end`` (now ``log_ends``) and the log-start lookup of an assignment waited for their admin
future with the same timeout as librdkafka's request, so Python's builtin ``TimeoutError`` came first; no
caller expected it, and one lane's gauges ended the topology's whole watcher (issue 48, item 5). Here the
brokers are real: a server that accepts connections and never answers, and an Apache Kafka of the test's
own, frozen (SIGSTOP) while a watcher refreshes its gauges.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from airflow_kafka_retry.engine.heads.shared_consumer import Lease, lease
from airflow_kafka_retry.sandbox.kafka import QUICK_JIT, ApacheKafka
from airflow_kafka_retry.sandbox.scratch_topics import create_topics, unique_topic

from tests.conftest import test_broker_kind
from tests.integration.test_tier_event_trigger import WAIT_S, _Running
from tests.integration.test_topology_event_trigger import HOUR_MS, _now, _tier, _trigger
from tests.support.tier_records import produce

pytestmark = pytest.mark.integration

FREEZE_S = 13.0  # past the log-end request's 10 s timeout (and the second librdkafka takes to report it)


@pytest.fixture
def silent_bootstrap() -> Iterator[str]:
    """A "broker" that accepts connections and never answers."""
    silent = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):  # closed at the test's end
            while True:
                held.append(silent.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"127.0.0.1:{silent.getsockname()[1]}"
    finally:
        silent.close()
        for connection in held:
            connection.close()


@pytest.fixture
def silent_lease(silent_bootstrap: str) -> Iterator[Lease]:
    held = lease({"bootstrap.servers": silent_bootstrap})
    assert held.claim([("t", 0)])
    try:
        yield held
    finally:
        held.close()


def test_a_log_end_the_broker_does_not_answer_is_a_kafka_error(silent_lease: Lease) -> None:
    with pytest.raises(KafkaException, match="_TIMED_OUT"):
        silent_lease.log_ends([("t", 0)], 1.0)


def test_a_log_start_the_broker_does_not_answer_is_a_kafka_error(silent_lease: Lease) -> None:
    with pytest.raises(KafkaException, match="_TIMED_OUT"):
        silent_lease._from_start([TopicPartition("t", 0, OFFSET_BEGINNING)], 1.0)


@pytest.fixture
def frozen_broker(tmp_path: Path) -> Iterator[ApacheKafka]:
    """An Apache Kafka of this test alone, to freeze without disturbing other tests."""
    if test_broker_kind() != "kafka":
        pytest.skip("needs an Apache Kafka process of its own to freeze (the suite runs another broker)")
    with ApacheKafka(data_dir=tmp_path / "kafka", keep_data=True, jvm_options=QUICK_JIT) as kafka:
        yield kafka


def test_a_lane_whose_log_end_times_out_backs_off_and_the_watcher_goes_on(frozen_broker, monkeypatch):
    """A tier lane refreshes its backlog gauges (log ends) continuously; the broker freezes longer than
    the request's timeout, then resumes: another lane's record due after that still fires."""
    bootstrap = frozen_broker.bootstrap
    monkeypatch.setenv("AIRFLOW__KAFKA_RETRY__SHARED_WATCH_CONSUMERS", "True")
    monkeypatch.setenv(
        "AIRFLOW_CONN_AKR_FROZEN_KAFKA",
        f'{{"conn_type": "kafka", "extra": {{"bootstrap.servers": "{bootstrap}"}}}}',
    )
    gauged, other = unique_topic("gauged"), unique_topic("other")
    create_topics(bootstrap, [gauged, other], 1)
    produce(bootstrap, gauged, [(0, _now() + HOUR_MS)])  # a head paused: its log end is asked for
    lanes = [_tier("retry_1", gauged, 1), _tier("retry_2", other, 2)]
    # gauges every 0.2 s; the committed offsets are read only at the opening (the lanes fire from fetches)
    trigger = _trigger("akr_frozen_kafka", lanes, gauge_interval=0.2, commit_check=600, idle_check=600)
    resumed: list[int] = []

    def freeze_then_produce(_events) -> None:
        time.sleep(3)  # the lanes are open and the gauges refreshed
        os.killpg(frozen_broker.pid, signal.SIGSTOP)
        try:
            time.sleep(FREEZE_S)
        finally:
            os.killpg(frozen_broker.pid, signal.SIGCONT)
        resumed.append(_now())
        produce(bootstrap, other, [(0, _now())])

    try:
        events = _Running(trigger).for_seconds(
            WAIT_S,
            until=lambda ev: True,
            then=freeze_then_produce,
            done=lambda ev: any("retry_2" in e["due"] for _, e in ev),
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(frozen_broker.pid, signal.SIGCONT)
    assert resumed, "the broker was never frozen"
    assert [e["due"] for _, e in events] == [["retry_2"]], events
