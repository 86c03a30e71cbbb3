"""
A real Apache Kafka KRaft cluster of several nodes on loopback, from the same Maven jars as ``ApacheKafka``.

Every node is one JVM (``kafka_node``) with ``process.roles=broker,controller``, its own ``node.id``
(1..N), the same static ``controller.quorum.voters``, storage formatted under one shared cluster id, and
production's shape: replication factor 3, ``min.insync.replicas=2`` (capped by the number of nodes).
Ready: every node answers a metadata request listing all N brokers under the cluster id we formatted
with (another Kafka on a port never counts as ours), then the coordinators are warmed up. Tests kill,
stop, freeze, thaw and restart nodes, and ask who leads what (``kafka_roles.ClusterRoles``).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from airflow_kafka_retry.sandbox.kafka import warm_up
from airflow_kafka_retry.sandbox.kafka_jars import ensure_kafka_jars, find_java, pinned_version
from airflow_kafka_retry.sandbox.kafka_node import (
    QUICK_JIT,
    KafkaNode,
    KafkaStartError,
    NodeExited,
    format_nodes,
    free_ports,
    new_cluster_id,
    stop_nodes,
)
from airflow_kafka_retry.sandbox.kafka_roles import ClusterRoles, out_of_isr
from airflow_kafka_retry.sandbox.processes import register, unregister

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)


def cluster_properties(nodes: int) -> dict[str, str]:
    """Production's replication settings, capped by the number of ``nodes``."""
    rf, isr = str(min(3, nodes)), str(min(2, nodes))
    return {
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": isr,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": isr,
        "default.replication.factor": rf,
        "min.insync.replicas": isr,
    }


class ApacheKafkaCluster(ClusterRoles):
    """
    ``nodes`` Apache Kafka KRaft nodes (broker and controller each) on loopback; a context manager.

    :param overrides: extra or changed ``server.properties`` entries, for every node.
    :param startup_timeout: seconds for the cluster (and for a :meth:`restart`) to become ready.
    :param data_dir: where the nodes' storage and logs go; default a temporary directory removed on
        :meth:`stop` (unless ``keep_data``).
    """

    def __init__(
        self,
        nodes: int = 3,
        *,
        version: str | None = None,
        heap: str = "512m",
        jvm_options: Sequence[str] = QUICK_JIT,
        overrides: Mapping[str, str] | None = None,
        startup_timeout: float = 90.0,
        stop_timeout: float = 20.0,
        request_timeout: float = 10.0,
        data_dir: str | os.PathLike[str] | None = None,
        keep_data: bool = False,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, not {nodes}")
        self.version = version or pinned_version()
        self.size, self._heap, self._jvm_options = nodes, heap, tuple(jvm_options)
        self._overrides = {**cluster_properties(nodes), **(overrides or {})}
        self._startup_timeout, self._stop_timeout = startup_timeout, stop_timeout
        self.request_timeout = request_timeout
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self._keep_data = keep_data
        self._owned_dir: Path | None = None
        self._nodes: dict[int, KafkaNode] = {}
        self._frozen: set[int] = set()
        self._admins: dict[str, AdminClient] = {}
        self.cluster_id: str | None = None
        self.ready_seconds: float | None = None

    # ------------------------------------------------------------------ who and where
    @property
    def bootstrap(self) -> str:
        """Every node's ``127.0.0.1:PORT``, comma-separated (the stopped ones too)."""
        if not self._nodes:
            raise RuntimeError("cluster is not started")
        return ",".join(node.bootstrap for node in self._nodes.values())

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._nodes)

    @property
    def running_nodes(self) -> list[int]:
        """The nodes whose JVM is alive (a frozen one included)."""
        return [i for i, node in sorted(self._nodes.items()) if node.running]

    @property
    def frozen_nodes(self) -> list[int]:
        """The nodes :meth:`freeze` stopped and :meth:`thaw` did not resume yet."""
        return sorted(self._frozen)

    def bootstrap_of(self, node_id: int) -> str:
        return self._node(node_id).bootstrap

    def pid_of(self, node_id: int) -> int | None:
        return self._node(node_id).pid

    @property
    def running(self) -> bool:
        """Whether every node's JVM is alive."""
        return bool(self._nodes) and all(node.running for node in self._nodes.values())

    def log_tail(self, node_id: int | None = None, lines: int = 30) -> str:
        """The last ``lines`` of a node's log; without ``node_id`` every node's, each under its name."""
        return self._node(node_id).log_tail(lines) if node_id is not None else self._tails(lines)

    def log_path(self, node_id: int) -> Path:
        return self._node(node_id).log_path

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> ApacheKafkaCluster:
        if self._nodes:
            raise RuntimeError("cluster already started")
        started = time.monotonic()
        try:
            java, lib = find_java(), ensure_kafka_jars(self.version)
            if self._data_dir is None:
                self._owned_dir = Path(tempfile.mkdtemp(prefix="airflow-kafka-retry-cluster-"))
            base = self._owned_dir or self._data_dir or Path()
            for attempt in range(1, 4):
                self._prepare(java, f"{lib}/*", base)
                for node in self._nodes.values():
                    node.spawn()
                register(self)
                try:
                    self._wait(started + self._startup_timeout, self.node_ids, "the cluster's start")
                    break
                except NodeExited as exc:
                    if attempt == 3:
                        raise KafkaStartError(f"{exc}\n{self._tails()}") from None
                    log.warning(
                        "a Kafka node exited during start-up (attempt %s), retrying: %s", attempt, exc
                    )
                    self._stop_nodes()
            warm_up(self.bootstrap, max(1.0, started + self._startup_timeout - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = time.monotonic() - started
        log.info(
            "Apache Kafka %s cluster of %s (%s), id %s, ready in %.1fs",
            self.version,
            self.size,
            self.bootstrap,
            self.cluster_id,
            self.ready_seconds,
        )
        return self

    def stop(self) -> None:
        """SIGTERM every node (SIGKILL after ``stop_timeout``), remove owned data; idempotent."""
        try:
            self._stop_nodes()
        finally:
            unregister(self)
            self._nodes, self._admins = {}, {}
            if self._owned_dir is not None and not self._keep_data:
                shutil.rmtree(self._owned_dir, ignore_errors=True)
                self._owned_dir = None

    def kill(self, node_id: int) -> None:
        """SIGKILL the node's process group."""
        self._node(node_id).reap()
        self._frozen.discard(node_id)

    def stop_node(self, node_id: int, timeout: float | None = None) -> bool:
        """SIGTERM the node (clean), SIGKILL after ``timeout`` (``stop_timeout``); whether it was clean."""
        self._frozen.discard(node_id)
        return self._node(node_id).stop(self._stop_timeout if timeout is None else timeout, resume=True)

    def freeze(self, node_id: int) -> None:
        """SIGSTOP the node's process group: alive, silent."""
        self._node(node_id).signal(signal.SIGSTOP)
        self._frozen.add(node_id)

    def thaw(self, node_id: int) -> None:
        self._node(node_id).signal(signal.SIGCONT)
        self._frozen.discard(node_id)

    def restart(self, node_id: int, timeout: float | None = None) -> float:
        """
        Start a stopped or killed node again on its own storage and ports; the seconds until it is back.

        Back: it answers metadata listing every live broker (itself included), and it is in the ISR of
        every internal topic partition it replicates that has a leader (see :meth:`_wait`).
        """
        node, started = self._node(node_id), time.monotonic()
        if node.running:
            raise RuntimeError(f"node {node_id} is running (pid {node.pid}); kill or stop it first")
        node.spawn()
        try:
            self._wait(started + (timeout or self._startup_timeout), [node_id], f"node {node_id}'s restart")
        except NodeExited as exc:
            raise KafkaStartError(f"{exc}\n{self._tails()}") from None
        return time.monotonic() - started

    def heal(self, timeout: float | None = None) -> list[int]:
        """
        Every node back, whatever a test did to it; the nodes it thawed or started.

        The frozen are thawed, the stopped or killed started again (at once, on their storage); then it waits
        until every node is back as :meth:`restart` waits for one.
        """
        touched = []
        for node_id, node in sorted(self._nodes.items()):
            if node_id in self._frozen:
                self.thaw(node_id)
                touched.append(node_id)
            if not node.running:
                node.spawn()
                touched.append(node_id)
        deadline = time.monotonic() + (timeout or self._startup_timeout)
        try:
            self._wait(deadline, self.node_ids, f"the cluster's healing (nodes {touched} thawed or started)")
        except NodeExited as exc:
            raise KafkaStartError(f"{exc}\n{self._tails()}") from None
        return touched

    def __enter__(self) -> ApacheKafkaCluster:
        return self.start() if not self._nodes else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ApacheKafkaCluster(nodes={self.size}, running={self.running_nodes}, id={self.cluster_id})"

    # ------------------------------------------------------------------ who does what (ClusterRoles)
    def admin(self) -> AdminClient:
        """An admin client bootstrapped from the running nodes (one per set of them)."""
        from airflow_kafka_retry.sandbox.scratch_topics import admin_client

        bootstrap = ",".join(self.bootstrap_of(i) for i in self.running_nodes if i not in self._frozen)
        if not bootstrap:
            raise RuntimeError("no node of the cluster is running")
        if bootstrap not in self._admins:
            self._admins[bootstrap] = admin_client(bootstrap)
        return self._admins[bootstrap]

    def controller_ports(self) -> dict[int, int]:
        """The controller port of every running node that is not frozen."""
        live = (i for i in self.running_nodes if i not in self._frozen)
        return {i: self._node(i).controller_port for i in live}

    # ------------------------------------------------------------------ internals
    def _node(self, node_id: int) -> KafkaNode:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise KeyError(f"no node {node_id} in {self!r}") from None

    def _prepare(self, java: str, classpath: str, base: Path) -> None:
        """New ports, a new cluster id, and every node's config and formatted storage (in parallel)."""
        ports = free_ports(2 * self.size)
        voters = ",".join(f"{i + 1}@127.0.0.1:{ports[2 * i + 1]}" for i in range(self.size))
        self.cluster_id = new_cluster_id()
        self._nodes = {
            i + 1: KafkaNode(
                java=java,
                classpath=classpath,
                run_dir=base / f"node-{i + 1}-{ports[2 * i]}",
                port=ports[2 * i],
                controller_port=ports[2 * i + 1],
                node_id=i + 1,
                voters=voters,
                heap=self._heap,
                jvm_options=self._jvm_options,
                overrides=self._overrides,
                label=f"Apache Kafka node {i + 1}",
            )
            for i in range(self.size)
        }
        for node in self._nodes.values():
            node.write_config()
        format_nodes(list(self._nodes.values()), self.cluster_id)

    def _wait(self, deadline: float, node_ids: list[int], what: str) -> None:
        """
        Until each of ``node_ids`` answers as ours, lists every live broker, is in its internal topics' ISR.

        Live: running and not frozen (a frozen node is fenced once its session times out). In the ISR of
        every partition it replicates that has a leader (one whose last in-sync replica is dead has none).
        """
        pending, last = list(node_ids), "no answer yet"
        while pending:
            node, live = self._nodes[pending[0]], [i for i in self.running_nodes if i not in self._frozen]
            metadata = node.metadata(timeout=2, cluster_id=self.cluster_id)  # another Kafka: NodeExited
            if metadata is not None:
                brokers = sorted(metadata.brokers)
                lagging = out_of_isr(metadata, node.node_id)
                last = f"brokers {brokers}, out of the ISR of {lagging[:5] or 'nothing'}"
                if set(live) <= set(brokers) and not lagging:
                    pending.pop(0)
                    continue
            if time.monotonic() >= deadline:
                raise KafkaStartError(
                    f"{what}: node {node.node_id} ({node.bootstrap}) did not answer a metadata request "
                    f"listing brokers {live} of cluster {self.cluster_id}, in sync, in time "
                    f"(last: {last});\n"
                    f"{self._tails()}"
                )
            time.sleep(0.1)

    def _tails(self, lines: int = 15) -> str:
        return "\n".join(
            f"--- node {i} ({node.bootstrap}, log {node.log_path}):\n{node.log_tail(lines)}"
            for i, node in sorted(self._nodes.items())
        )

    def _stop_nodes(self) -> None:
        for node in stop_nodes(list(self._nodes.values()), self._stop_timeout, resume=True):
            log.warning("Kafka node %s ignored SIGTERM for %.0fs; killed", node.node_id, self._stop_timeout)
        self._frozen.clear()
