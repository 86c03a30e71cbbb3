"""
One Apache Kafka KRaft node (broker and controller in one JVM) from its Maven jars.

The piece that ``ApacheKafka`` (one node) and ``ApacheKafkaCluster`` (several) share. A
:class:`KafkaNode` owns a run directory (``server.properties``, ``log4j2.properties``, ``data/``,
``server.log``), formats its storage under a cluster id, spawns ``kafka.Kafka`` leading its own process
group through ``processes.ManagedProcess`` (killed with the process that started it, stopped at interpreter
exit), answers metadata requests while it starts, and is stopped (SIGTERM, then SIGKILL) and reaped. Its
owner registers too (``processes.register``), so the owner's own ``stop`` (removing its data) runs at exit.
"""

from __future__ import annotations

import base64
import signal
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_kafka_retry.sandbox.processes import (
    ManagedProcess,
    ProcessExited,
    free_port,
    log_tail,
    port_open,
    stop_all,
)

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient, ClusterMetadata

#: JVM options for a broker that lives minutes (the test suite's, the demo's): the JIT stops at its first
#: tier (C1), so no CPU goes to C2's optimising compiles. Over the test suite those were about half of
#: the broker's CPU, and C1's code serves a test's requests as cheaply. The default (``()``) is the
#: JVM's full JIT, as users' brokers run, for the benchmarks.
QUICK_JIT = ("-XX:TieredStopAtLevel=1",)

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.org.name = org.apache.kafka
logger.org.level = INFO
"""


def server_properties(
    *,
    port: int,
    controller_port: int,
    log_dirs: Path,
    overrides: Mapping[str, str] | None = None,
    node_id: int = 1,
    voters: str | None = None,
) -> dict[str, str]:
    """
    The ``server.properties`` of a KRaft test node on loopback.

    Without ``voters`` (``1@127.0.0.1:C,2@…``) the node is a cluster of one: it is its own only voter.
    """
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters or f"{node_id}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dirs),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "5",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "4",
    }
    props.update(overrides or {})
    return props


def new_cluster_id() -> str:
    """
    16 random bytes, URL-safe base64 without padding, never starting with ``-``.

    The storage tool's argument parser would take a leading ``-`` for an option; Kafka's own
    ``Uuid.randomUuid`` draws again for the same reason.
    """
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        ports += [] if port in ports else [port]
    return ports


class KafkaStartError(RuntimeError):
    """The broker did not become ready; the message carries the last lines of its log."""


class NodeExited(ProcessExited):
    """The JVM ended while we waited for it, or another Kafka (another cluster id) answers on its port."""


def megabytes(heap: str) -> int:
    units = {"k": 1 / 1024, "m": 1, "g": 1024}
    unit = heap[-1].lower()
    return int(float(heap[:-1]) * units[unit]) if unit in units else int(heap) // (1024 * 1024)


class KafkaNode:
    """
    One ``kafka.Kafka`` JVM in ``run_dir`` on loopback ports ``port`` (clients) and ``controller_port``.

    :meth:`write_config` and :meth:`format` prepare it once; :meth:`spawn` starts it (again, on the same
    storage and ports, after a :meth:`stop` or a kill). ``label`` names it in errors.
    """

    def __init__(
        self,
        *,
        java: str,
        classpath: str,
        run_dir: Path,
        port: int,
        controller_port: int,
        node_id: int = 1,
        voters: str | None = None,
        heap: str,
        jvm_options: Sequence[str] = (),
        overrides: Mapping[str, str] | None = None,
        label: str = "Apache Kafka",
    ) -> None:
        self.label = label
        self.java, self.classpath, self.run_dir = java, classpath, run_dir
        self.port, self.controller_port, self.node_id = port, controller_port, node_id
        self.voters, self.heap, self.jvm_options = voters, heap, tuple(jvm_options)
        self.overrides = dict(overrides or {})
        self.config = run_dir / "server.properties"
        self.log_path = run_dir / "server.log"
        self.process: ManagedProcess | None = None
        self._admin: AdminClient | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.process.proc if self.process is not None else None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.running

    def write_config(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        props = server_properties(
            port=self.port,
            controller_port=self.controller_port,
            log_dirs=self.run_dir / "data",
            overrides=self.overrides,
            node_id=self.node_id,
            voters=self.voters,
        )
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.run_dir / "log4j2.properties").write_text(_LOG4J2)

    def _jvm(self, *, heap: str, options: Sequence[str]) -> list[str]:
        return [
            self.java,
            *options,
            f"-Xmx{heap}",
            f"-Xms{min(256, megabytes(heap))}m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.run_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.run_dir}",
            "-cp",
            self.classpath,
        ]

    def spawn(self) -> None:
        if self.running:
            raise RuntimeError(f"Kafka node {self.node_id} is already running (pid {self.pid})")
        cmd = [*self._jvm(heap=self.heap, options=self.jvm_options), "kafka.Kafka", str(self.config)]
        self.process = ManagedProcess(cmd, log_path=self.log_path, name=self.label).start()

    def metadata(self, timeout: float = 2.0, *, cluster_id: str | None = None) -> ClusterMetadata | None:
        """
        This node's answer to a metadata request, ``None`` while it does not answer yet.

        Raises :class:`NodeExited` (with the log's tail) when the JVM has ended, or when the answer carries
        another cluster id than ``cluster_id`` (when given): another Kafka holds the port, never ours.
        """
        from confluent_kafka import KafkaException

        from airflow_kafka_retry.sandbox.scratch_topics import admin_client

        if self.process is None or not self.process.running:
            code = self.process.returncode if self.process is not None else None
            raise NodeExited(
                f"{self.label} exited (code {code}) during start-up on "
                f"{self.bootstrap}; log {self.log_path}:\n{self.log_tail()}"
            )
        if not port_open(self.port):
            return None
        self._admin = self._admin or admin_client(self.bootstrap)
        try:
            metadata = self._admin.list_topics(timeout=timeout)
        except KafkaException:
            return None
        if cluster_id is not None and metadata.cluster_id != cluster_id:
            raise NodeExited(
                f"{self.bootstrap} answers with cluster id {metadata.cluster_id}, not ours "
                f"({cluster_id}): another Kafka holds the port"
            )
        return metadata

    def signal(self, sig: signal.Signals) -> None:
        """``sig`` to the node's process group (nothing when it is not running)."""
        if self.process is not None:
            self.process.signal(sig)

    def stop(self, timeout: float = 20.0, *, resume: bool = False) -> bool:
        """SIGTERM the process group, SIGKILL after ``timeout``; whether it ended on the SIGTERM."""
        return not stop_nodes([self], timeout, resume=resume)

    def reap(self) -> None:
        """SIGKILL the process group if it still runs, and wait for the JVM."""
        if self.process is not None:
            self.process.kill()
        self.process = None
        self._admin = None

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)


def format_nodes(
    nodes: Sequence[KafkaNode],
    cluster_id: str,
    *,
    features: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> None:
    """
    The storage tool's ``format`` of every node's ``log.dirs`` under ``cluster_id``, all at once.

    ``features``: ``NAME=LEVEL`` entries for ``--feature`` (``share.version=2``), finalized at format time.
    ``extra_args``: more of the tool's arguments (``--add-scram ...``); the tool lives only while it formats.
    """
    feature_args = [arg for feature in features for arg in ("--feature", feature)]
    runs = [
        subprocess.Popen(
            # a one-shot tool: compiling beyond C1 would only cost CPU
            [*node._jvm(heap="256m", options=QUICK_JIT), "kafka.tools.StorageTool", "format"]
            + ["--config", str(node.config), "--cluster-id", cluster_id, "--ignore-formatted", *feature_args]
            + list(extra_args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in nodes
    ]
    for node, run in zip(nodes, runs, strict=True):
        try:
            output, _ = run.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            run.kill()
            output, _ = run.communicate()
        if run.returncode != 0:
            out = "\n".join(output.strip().splitlines()[-20:])
            raise KafkaStartError(
                f"formatting Kafka storage in {node.run_dir} failed (exit {run.returncode}):\n{out}"
            )


def stop_nodes(nodes: Sequence[KafkaNode], timeout: float, *, resume: bool = False) -> list[KafkaNode]:
    """
    SIGTERM every running node at once, SIGKILL those still running after ``timeout``; those, in a list.

    At once: one after another, each node of a cluster would wait for a quorum that is going away. With
    ``resume`` a frozen (SIGSTOPped) node gets a SIGCONT first, so it acts on the SIGTERM at once.
    """
    processes = {node.process: node for node in nodes if node.process is not None}
    unclean = stop_all(list(processes), timeout, resume=resume)
    for node in nodes:
        node.reap()
    return [processes[process] for process in unclean]
