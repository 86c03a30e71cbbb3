"""A real 3-node Apache Kafka KRaft cluster (``sandbox/kafka_cluster.py``): naming, a killed leader, restarts.

The tests use the 3-node cluster the run's cluster files share (``tests/support/cluster_fixtures.py``: kills
and restarts would disturb the suite's broker): started once, and before each test healed, every node
running and in sync, so the order does not matter. The CLI test starts a cluster of two nodes of its own in
a subprocess (``--nodes 2``: the command's cluster path, whatever the number of nodes).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from airflow_kafka_retry.sandbox.kafka_roles import coordinator_partition
from airflow_kafka_retry.sandbox.processes import port_open
from airflow_kafka_retry.sandbox.scratch_topics import (
    CLIENT_LOGGER,
    admin_client,
    create_topics,
    unique_topic,
)

from tests.support.broker_cli import broker_cli, cli_env

if TYPE_CHECKING:
    from airflow_kafka_retry.sandbox.kafka_cluster import ApacheKafkaCluster

    from tests.support.cluster_fixtures import ClusterKeeper

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T = TypeVar("T")


@pytest.fixture
def cluster(shared_kafka_cluster: ClusterKeeper) -> ApacheKafkaCluster:
    """The run's 3-node cluster, every node running and in sync."""
    return shared_kafka_cluster.whole()


def _until(what: str, probe: Callable[[], T | None], timeout: float = 45.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def _rf3_topic(cluster: ApacheKafkaCluster, partitions: int = 1) -> str:
    topic = unique_topic("cluster")
    create_topics(cluster.bootstrap, [topic], partitions)  # the cluster's default replication factor
    return topic


def _produce(bootstrap: str, topic: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "logger": CLIENT_LOGGER})
    errors: list[object] = []
    producer.produce(topic, value, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0, "not delivered within 30 s"
    assert errors == [None]


def test_three_brokers_and_an_rf3_topic_in_sync(cluster: ApacheKafkaCluster) -> None:
    assert cluster.ready_seconds is not None
    assert cluster.node_ids == cluster.running_nodes == [1, 2, 3]
    assert cluster.bootstrap.split(",") == [cluster.bootstrap_of(i) for i in (1, 2, 3)]
    for i in cluster.node_ids:
        pid = cluster.pid_of(i)
        assert pid is not None
        assert os.getpgid(pid) == pid, "every JVM leads its own process group"
        metadata = admin_client(cluster.bootstrap_of(i)).list_topics(timeout=10)
        assert sorted(metadata.brokers) == [1, 2, 3]
        assert metadata.cluster_id == cluster.cluster_id
    topic = _rf3_topic(cluster, partitions=3)
    metadata = admin_client(cluster.bootstrap).list_topics(topic, timeout=10)
    for partition in metadata.topics[topic].partitions.values():
        assert sorted(partition.replicas) == [1, 2, 3]
        assert sorted(partition.isrs) == [1, 2, 3]
    everything = admin_client(cluster.bootstrap).list_topics(timeout=10)
    for internal in ("__consumer_offsets", "__transaction_state"):  # created by the warm-up, at RF 3
        for partition in everything.topics[internal].partitions.values():
            assert len(partition.replicas) == 3
    _produce(cluster.bootstrap, topic, b"x")


def test_naming_agrees_with_metadata_the_brokers_and_their_logs(cluster: ApacheKafkaCluster) -> None:
    topic = _rf3_topic(cluster, partitions=3)
    metadata = admin_client(cluster.bootstrap).list_topics(topic, timeout=10)
    for pid, partition in metadata.topics[topic].partitions.items():
        assert cluster.leader_of(topic, pid) == partition.leader
    controller = cluster.active_controller()
    assert controller in cluster.node_ids
    assert cluster.active_controller() == controller

    group = f"naming-{uuid.uuid4()}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "logger": CLIENT_LOGGER})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    admin = admin_client(cluster.bootstrap)  # held: a dropped client never completes its futures
    described = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
    assert cluster.group_coordinator(group) == described.coordinator.id

    txn = f"naming-{uuid.uuid4()}"
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "transactional.id": txn, "logger": CLIENT_LOGGER}
    )
    producer.init_transactions(30)
    expected = cluster.transaction_coordinator(txn)
    state = admin_client(cluster.bootstrap).list_topics("__transaction_state", timeout=10)
    partitions = len(state.topics["__transaction_state"].partitions)
    line = re.compile(
        rf"Initialized transactionalId {re.escape(txn)} .* on partition __transaction_state-(\d+)"
    )

    def logged() -> dict[int, str] | None:
        found = {
            i: m.group(1) for i in cluster.node_ids if (m := line.search(cluster.log_path(i).read_text()))
        }
        return found or None

    assert _until("the coordinator's log line", logged, 10) == {
        expected: str(coordinator_partition(txn, partitions))
    }


def test_killed_leader_is_replaced_and_restarts_into_the_isr(cluster: ApacheKafkaCluster) -> None:
    topic = _rf3_topic(cluster)
    leader = cluster.leader_of(topic, 0)
    survivors = [i for i in cluster.node_ids if i != leader]
    try:
        cluster.kill(leader)
        assert cluster.running_nodes == survivors
        assert cluster.pid_of(leader) is None
        started = time.monotonic()
        new = _until("a new leader", lambda: (n := cluster.leader_of(topic, 0)) in survivors and n)
        print(
            f"\nnode {leader} killed, node {new} leads after {time.monotonic() - started:.1f}s",
            file=sys.stderr,
        )
        _produce(cluster.bootstrap, topic, b"after-kill")  # acks=all, ISR 2 = min.insync.replicas

        dead_first = ",".join([cluster.bootstrap_of(leader), *map(cluster.bootstrap_of, survivors)])
        _produce(dead_first, topic, b"dead-first")
        consumer = Consumer(
            {
                "bootstrap.servers": dead_first,
                "group.id": f"dead-first-{uuid.uuid4()}",
                "logger": CLIENT_LOGGER,
            }
        )
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            values: list[bytes | None] = []

            def read() -> bool:
                values.extend(m.value() for m in consumer.consume(10, 1.0) if m.error() is None)
                return len(values) >= 2

            _until("both records through a dead-first bootstrap list", read, 30)
            assert values == [b"after-kill", b"dead-first"]
        finally:
            consumer.close()

        seconds = cluster.restart(leader)
        print(f"node {leader} back in the internal topics' ISR in {seconds:.1f}s", file=sys.stderr)
        assert cluster.running_nodes == [1, 2, 3]

        def in_isr() -> bool:
            partition = (
                admin_client(cluster.bootstrap).list_topics(topic, timeout=10).topics[topic].partitions[0]
            )
            return leader in partition.isrs

        _until(f"node {leader} back in the ISR of {topic}", in_isr, 30)
    finally:
        if leader not in cluster.running_nodes:
            cluster.restart(leader)


def test_freezing_the_active_controller_moves_the_quorum(cluster: ApacheKafkaCluster) -> None:
    frozen = cluster.active_controller()
    pid = cluster.pid_of(frozen)
    assert pid is not None

    def state() -> str:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    cluster.freeze(frozen)
    try:
        assert _until("a stopped JVM", lambda: state() == "T", 5)
        assert cluster.running_nodes == [1, 2, 3]  # frozen is alive
        started = time.monotonic()
        elected = cluster.active_controller()  # asked of the others until one of them leads
        print(f"\ncontroller {frozen} frozen, {elected} leads after {time.monotonic() - started:.1f}s")
        assert elected in cluster.node_ids
        assert elected != frozen
    finally:
        cluster.thaw(frozen)
    assert _until("a running JVM", lambda: state() != "T", 5)
    assert sorted(admin_client(cluster.bootstrap_of(frozen)).list_topics(timeout=10).brokers) == [1, 2, 3]


def test_committed_offsets_of_many_groups_are_read_through_coordinator_moves(
    cluster: ApacheKafkaCluster,
) -> None:
    """
    The shared watch consumer's committed-offset requests survive a rolling restart (issue 39).

    ``AdminClient.list_consumer_group_offsets`` crashed the process that sent it (SIGSEGV in librdkafka's
    admin thread) when a stopped broker's groups moved: three threads reading 30 groups' offsets, the
    second broker stopped, exit 139. Through ``heads/offset_reader.py`` the requests run in a child: this
    process lives on, a request fails only as a broker error would (a ``KafkaException`` naming the group),
    and every group's offsets read right once the cluster is whole again.
    """
    from confluent_kafka import KafkaException

    from airflow_kafka_retry.engine.heads.offset_reader import OffsetReader, OffsetReaderDied

    topic = _rf3_topic(cluster, partitions=3)
    groups = {f"{topic}-g{i}": {p: 10 * i + p + 1 for p in range(3)} for i in range(30)}
    for group, offsets in groups.items():
        consumer = Consumer(
            {"bootstrap.servers": cluster.bootstrap, "group.id": group, "logger": CLIENT_LOGGER}
        )
        try:
            consumer.commit(
                offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
            )
        finally:
            consumer.close()
    keys = [(topic, p) for p in range(3)]
    expected = {g: {(topic, p): o for p, o in offsets.items()} for g, offsets in groups.items()}
    reader = OffsetReader({"bootstrap.servers": cluster.bootstrap, "logger": CLIENT_LOGGER})
    stop = threading.Event()
    read, wrong, failed, crashes = [0], [], [], []

    def ask_all() -> None:
        while not stop.is_set():
            for group in groups:
                try:
                    found = reader.committed(group, keys, 10.0)
                except KafkaException as exc:  # what a broker error looks like to a watch
                    failed.append(exc)
                    if isinstance(exc, OffsetReaderDied):
                        crashes.append(str(exc))
                    continue
                read[0] += 1
                if found != expected[group]:
                    wrong.append((group, found))

    threads = [threading.Thread(target=ask_all, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for node in (1, 2):  # the second stop is where the process used to die
            time.sleep(2)
            cluster.stop_node(node)
            time.sleep(3)
            cluster.restart(node)
        time.sleep(2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    print(
        f"\n{read[0]} group reads, {len(failed)} failed during the restarts, "
        f"{len(crashes)} reader child(ren) lost: {crashes[:3]}",
        file=sys.stderr,
    )
    try:
        assert not any(t.is_alive() for t in threads), "a committed-offset request never ended"
        assert wrong == []
        assert read[0] > 0
        for group, offsets in expected.items():  # the cluster whole again: every group reads right
            assert _until(f"{group}'s offsets", lambda g=group: _read_or_none(reader, g, keys)) == offsets
    finally:
        reader.close()


def _read_or_none(reader, group: str, keys: list[tuple[str, int]]) -> dict | None:
    from confluent_kafka import KafkaException

    try:
        return reader.committed(group, keys, 10.0)
    except KafkaException:
        return None


def test_nodes_without_kafka_is_an_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "airflow_kafka_retry.cli", "broker", "--nodes", "3"],
        check=False,
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
    )
    assert done.returncode == 2
    assert "--nodes needs --kafka" in done.stderr
    assert done.stdout == ""


def test_broker_cli_serves_a_cluster_and_stops_it_on_sigterm() -> None:
    # two nodes: the smallest cluster the command starts (--nodes 1 is the single broker), one JVM less than
    # three; the 3-node cluster itself is the other tests' (the command builds it alike, ApacheKafkaCluster)
    with broker_cli("--nodes", "2") as (proc, first):
        assert proc.stderr is not None
        addresses = first.split(",")
        assert len(addresses) == 2, first + proc.stderr.read()
        assert all(re.fullmatch(r"127\.0\.0\.1:\d+", a) for a in addresses), first
        line = proc.stderr.readline()
        assert line.startswith("Apache Kafka cluster of 2 nodes: node 1 pid "), line
        jvms = [int(pid) for pid in re.findall(r"pid (\d+)", line)]
        assert len(jvms) == 2
        assert sorted(admin_client(first).list_topics(timeout=10).brokers) == [1, 2]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        for jvm in jvms:
            assert (
                not Path(f"/proc/{jvm}").exists() or Path(f"/proc/{jvm}/stat").read_text().split()[2] == "Z"
            )
        assert not any(port_open(int(a.rsplit(":", 1)[1])) for a in addresses)
