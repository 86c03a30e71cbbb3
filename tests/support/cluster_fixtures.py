"""One 3-node Apache Kafka cluster per run for the files that kill, freeze and restart its brokers.

A pytest plugin (loaded by tests/conftest.py). ``shared_kafka_cluster`` is a :class:`ClusterKeeper`
(session scope); a test asks it for the cluster with :meth:`ClusterKeeper.whole`: started on first use
(three JVMs, about 35 s), and before each test healed (``ApacheKafkaCluster.heal``: every frozen node thawed,
every stopped or killed one started again, all of them back in sync), or, if it cannot be healed, stopped
and started anew. So a test gets the cluster whole whatever the test before it did, or how it failed.

The files that name ``shared_kafka_cluster`` run on one parallel worker, one after another
(``file_groups.py``); once the last test that uses it has run (the next test does not, or none follows)
its JVMs are killed (their data goes with them: no clean shutdown to wait for), within that test, so their
CPU counts on its file (``cpu_record.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from airflow_kafka_retry.sandbox.kafka_cluster import ApacheKafkaCluster

log = logging.getLogger(__name__)

FIXTURE = "shared_kafka_cluster"
HEAL_S = 120.0  # the nodes started again (in parallel) until all of them are back in sync
START_S = 180.0  # three JVMs started until they answer as one cluster, in sync (twice the default: loaded CI)


class ClusterKeeper:
    """The one cluster of a worker: started on demand, whole for every test, killed after the last."""

    def __init__(self) -> None:
        self._cluster: ApacheKafkaCluster | None = None
        self.starts = 0

    def whole(self) -> ApacheKafkaCluster:
        """The cluster, every node running (none frozen) and in sync: healed, or started anew."""
        cluster = self._cluster
        if cluster is not None:
            try:
                touched = cluster.heal(HEAL_S)
                if touched:
                    log.info("shared Kafka cluster healed: nodes %s thawed or started again", touched)
                return cluster
            except Exception:  # a node that cannot come back: a fresh cluster
                log.exception("the shared Kafka cluster could not be healed; starting a new one")
                self.stop()
        cluster = ApacheKafkaCluster(nodes=3, startup_timeout=START_S)
        self._cluster = cluster.start()
        self.starts += 1
        return cluster

    def stop(self) -> None:
        """Kill every node (nothing to keep) and forget the cluster; idempotent."""
        cluster, self._cluster = self._cluster, None
        if cluster is None:
            return
        try:
            for node in cluster.running_nodes:
                cluster.kill(node)
        finally:
            cluster.stop()


_KEEPER_KEY = pytest.StashKey[ClusterKeeper]()


@pytest.fixture(scope="session")
def shared_kafka_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterKeeper]:
    keeper = request.config.stash.setdefault(_KEEPER_KEY, ClusterKeeper())
    yield keeper
    keeper.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    keeper = item.config.stash.get(_KEEPER_KEY, None)
    if keeper is None or FIXTURE not in getattr(item, "fixturenames", ()):
        return
    if nextitem is None or FIXTURE not in getattr(nextitem, "fixturenames", ()):
        keeper.stop()
