"""A watch's partition metadata through the process's admin client (``engine/kafka/metadata_client.py``).

A watch consumer long-polls at its partitions' end, and the broker answers its connection's requests in
order: metadata asked on it waited for the poll (0.9 s per check; 400 watches filled the triggerer's thread
pool). The watches of a process read partition counts through one admin client per Kafka configuration
instead. These tests run on the real broker.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from airflow_kafka_retry.engine.heads.head_watch import HeadWatch
from airflow_kafka_retry.engine.kafka import metadata_client as metadata_registry
from airflow_kafka_retry.engine.kafka.metadata_client import metadata_client
from airflow_kafka_retry.sandbox.scratch_topics import unique_topic

from tests.support.fork_check import assert_children_exit_cleanly
from tests.support.tier_records import produce

pytestmark = pytest.mark.integration

SETTLE_S = 60.0  # the longest a watch may take to learn what it is waiting for (a bound, not a check)


def _poll_until(watch: HeadWatch, done) -> None:
    deadline = time.monotonic() + SETTLE_S
    while not done():
        assert time.monotonic() < deadline, "the watch never learnt what was expected"
        watch.poll()
        time.sleep(0.05)


def test_private_watches_share_one_admin_client_and_learn_new_partitions_through_it(
    kafka_bootstrap, new_topic
):
    config = {"bootstrap.servers": kafka_bootstrap, "client.id": unique_topic("watch-metadata")}
    a, b = new_topic("meta-a", partitions=1), new_topic("meta-b", partitions=1)
    before = set(metadata_registry._CLIENTS)
    watches = [HeadWatch(config, [t], unique_topic("g"), shared=False) for t in (a, b)]
    try:
        assert not any(w.shared for w in watches)
        assert len(set(metadata_registry._CLIENTS) - before) == 1, "both watches read through one client"
        admin = metadata_client(config)
        assert set(metadata_registry._CLIENTS) - before == {
            k for k, v in metadata_registry._CLIENTS.items() if v is admin
        }
        assert metadata_client(dict(config)) is admin, "one admin client per process and configuration"
        assert metadata_client({**config, "client.id": unique_topic("other")}) is not admin
        first = watches[0]
        _poll_until(first, lambda: first.complete)
        assert first.keys == [(a, 0)]

        # a partition added while the watch long-polls at its end: the next check finds it
        creator = AdminClient({"bootstrap.servers": kafka_bootstrap})
        [future] = creator.create_partitions([NewPartitions(a, 2)]).values()
        future.result(30)
        produce(kafka_bootstrap, a, [(1, 7_000)])
        deadline = time.monotonic() + SETTLE_S
        while (a, 1) not in first.committed:
            assert time.monotonic() < deadline, "the new partition was never found"
            first.sync_committed()
            time.sleep(0.2)
        _poll_until(first, lambda: (a, 1) in first.heads)
        assert first.heads[(a, 1)].due_ms == 7_000
    finally:
        for watch in watches:
            watch.close()


FORK_SCRIPT = """
import os, subprocess, sys
from airflow_kafka_retry.engine.kafka.clients import partition_counts
from airflow_kafka_retry.engine.kafka.metadata_client import metadata_client
config = {"bootstrap.servers": sys.argv[1]}
assert partition_counts(metadata_client(config), [sys.argv[2]]) == {sys.argv[2]: 1}
# a preexec_fn runs the at-fork hooks in the child before its exec (as sandbox/postgres.py does)
done = subprocess.run([sys.executable, "-c", "pass"], preexec_fn=lambda: None, check=False)
print("preexec child:", done.returncode)
pid = os.fork()
if pid == 0:  # a forked child: a client of its own (the inherited copy lost its threads), then it ends
    ok = partition_counts(metadata_client(config), [sys.argv[2]]) == {sys.argv[2]: 1}
    sys.exit(0 if ok else 3)
print("forked child:", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
assert partition_counts(metadata_client(config), [sys.argv[2]]) == {sys.argv[2]: 1}  # still serves
"""


def test_a_forked_child_leaves_the_inherited_admin_client_alone(kafka_bootstrap, new_topic):
    """A forked child gets an admin client of its own; the inherited copy is never used nor destroyed."""
    topic = new_topic("meta-fork", partitions=1)
    assert_children_exit_cleanly(FORK_SCRIPT, kafka_bootstrap, topic)
