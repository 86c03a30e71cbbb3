"""
A real single-node Apache Kafka broker (KRaft, broker and controller in one JVM) from its Maven jars.

``ApacheKafka()`` is a context manager with ``.bootstrap``, like the Tansu ``EmbeddedBroker`` beside
it. It resolves the pinned jars once (``kafka_jars``), formats storage in a temporary directory,
starts ``kafka.Kafka`` on free loopback ports with a heap of at most 1 GB, and counts the broker as
ready when a metadata request lists it under the cluster id its storage was formatted with (another
Kafka answering on the port never counts). The JVM runs under ``processes.ManagedProcess``: it leads its
own process group, dies with the process that started it (PR_SET_PDEATHSIG, from the main thread), and is
stopped at interpreter exit; on exit of the ``with`` block it gets SIGTERM (a clean shutdown in seconds),
then SIGKILL. A start that fails anywhere, the coordinators' warm-up included, stops the JVM.

Settings are those of a test cluster of one: replication factor 1 for the offsets and transaction
logs, ``group.initial.rebalance.delay.ms=0``, few internal partitions (quick first group and
transaction use), and a one-second sweep of timed-out transactions. Everything else is Kafka's
default, so the broker behaves as users' brokers do.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from airflow_kafka_retry.sandbox.kafka_jars import ensure_kafka_jars, find_java, pinned_version
from airflow_kafka_retry.sandbox.kafka_node import (
    QUICK_JIT,
    KafkaNode,
    KafkaStartError,
    format_nodes,
    new_cluster_id,
    server_properties,
)
from airflow_kafka_retry.sandbox.processes import NotReady, ProcessExited, free_port, register, unregister

__all__ = [
    "DEFAULT_HEAP",
    "QUICK_JIT",
    "ApacheKafka",
    "KafkaStartError",
    "server_properties",
    "warm_up",
]

log = logging.getLogger(__name__)

#: JVM heap; with metaspace, code cache and threads the broker's RSS stays well under 1.2 GB.
DEFAULT_HEAP = "768m"


class ApacheKafka:
    """
    A single-node Apache Kafka broker subprocess on loopback; a context manager.

    :param version: Kafka version; default the one pinned in ``kafka_jars/pom.xml``.
    :param port: client port; ``None`` picks a free one (and retries on a clash).
    :param heap: JVM ``-Xmx`` (at most 1 GB by default policy).
    :param overrides: extra or changed ``server.properties`` entries.
    :param startup_timeout: seconds to wait for a metadata answer.
    :param stop_timeout: seconds between SIGTERM and SIGKILL in :meth:`stop`.
    :param data_dir: where storage and the log go; default a temporary directory removed on stop
        (unless ``keep_data``).
    :param jvm_options: extra options for the broker's JVM (:data:`QUICK_JIT` for a short-lived broker).
    :param features: ``NAME=LEVEL`` features finalized when the storage is formatted (``share.version=2``).
    """

    def __init__(
        self,
        *,
        version: str | None = None,
        port: int | None = None,
        heap: str = DEFAULT_HEAP,
        overrides: Mapping[str, str] | None = None,
        startup_timeout: float = 90.0,
        stop_timeout: float = 20.0,
        data_dir: str | os.PathLike[str] | None = None,
        keep_data: bool = False,
        jvm_options: Sequence[str] = (),
        features: Sequence[str] = (),
    ) -> None:
        self.version = version or pinned_version()
        self._features = tuple(features)
        self._jvm_options = tuple(jvm_options)
        self._requested_port = port
        self._heap = heap
        self._overrides = dict(overrides or {})
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self._keep_data = keep_data
        self._owned_dir: Path | None = None
        self._node: KafkaNode | None = None
        self._port: int | None = None
        self.ready_seconds: float | None = None
        #: seconds until the first metadata answer (``ready_seconds`` adds the coordinators' warm-up)
        self.metadata_seconds: float | None = None

    # ------------------------------------------------------------------ properties
    @property
    def bootstrap(self) -> str:
        if self._port is None:
            raise RuntimeError("broker is not started")
        return f"127.0.0.1:{self._port}"

    @property
    def port(self) -> int | None:
        return self._port

    @property
    def pid(self) -> int | None:
        return self._node.pid if self._node is not None else None

    @property
    def log_path(self) -> Path | None:
        return self._node.log_path if self._node is not None else None

    @property
    def running(self) -> bool:
        return self._node is not None and self._node.running

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> ApacheKafka:
        if self._node is not None and self._node.proc is not None:
            raise RuntimeError("broker already started")
        started = time.monotonic()
        register(self)
        try:
            self._start(started)
        except BaseException:
            self.stop()  # a failure anywhere (the warm-up included) leaves no JVM and no data behind
            raise
        self.ready_seconds = time.monotonic() - started
        log.info(
            "Apache Kafka %s pid %s on 127.0.0.1:%s, ready in %.1fs (log %s)",
            self.version,
            self.pid,
            self._port,
            self.ready_seconds,
            self.log_path,
        )
        return self

    def _start(self, started: float) -> None:
        java = find_java()
        lib = ensure_kafka_jars(self.version)
        if self._data_dir is None:
            self._owned_dir = Path(tempfile.mkdtemp(prefix="airflow-kafka-retry-kafka-"))
            base = self._owned_dir
        else:
            base = self._data_dir
        attempts = 1 if self._requested_port is not None else 3
        for attempt in range(1, attempts + 1):
            port = self._requested_port or free_port()
            controller_port = free_port()
            node = self._node = KafkaNode(
                java=java,
                classpath=f"{lib}/*",
                run_dir=base / f"kafka-{port}",
                port=port,
                controller_port=controller_port,
                heap=self._heap,
                jvm_options=self._jvm_options,
                overrides={**self._overrides, **self._listener_overrides(port, controller_port)},
            )
            node.write_config()
            cluster_id = new_cluster_id()
            format_nodes([node], cluster_id, features=self._features, extra_args=self._format_args(node))
            node.spawn()
            try:
                self._wait_ready(node, cluster_id)
            except ProcessExited as exc:  # the JVM ended, or another Kafka answers on the port
                self._reap()
                if attempt == attempts:
                    raise KafkaStartError(str(exc)) from None
                log.warning(
                    "Kafka exited during start-up (attempt %s), retrying on other ports: %s", attempt, exc
                )
                continue
            self._port = port
            self.metadata_seconds = time.monotonic() - started
            warm_up(f"127.0.0.1:{port}", self._startup_timeout)
            return
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """SIGTERM the broker's process group, SIGKILL after ``stop_timeout``; idempotent."""
        node = self._node
        try:
            if node is not None and node.proc is not None and not node.stop(self._stop_timeout):
                log.warning("Kafka pid %s ignored SIGTERM for %.0fs; killing", node.pid, self._stop_timeout)
        finally:
            self._reap()
            self._port = None
            if self._owned_dir is not None and not self._keep_data:
                shutil.rmtree(self._owned_dir, ignore_errors=True)
                self._owned_dir = None
                self._node = None

    def log_tail(self, lines: int = 30) -> str:
        return self._node.log_tail(lines) if self._node is not None else ""

    def __enter__(self) -> ApacheKafka:
        return self.start() if self._node is None or self._node.proc is None else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (
            f"ApacheKafka(version={self.version!r}, pid={self.pid}, port={self._port}, "
            f"running={self.running})"
        )

    # ------------------------------------------------------------------ internals
    def _listener_overrides(self, port: int, controller_port: int) -> dict[str, str]:
        """``server.properties`` entries that depend on the ports (a secured node's listeners); none here."""
        return {}

    def _format_args(self, node: KafkaNode) -> list[str]:
        """Extra arguments of the storage tool's ``format`` (a secured node's first SCRAM user); none here."""
        return []

    def _wait_ready(self, node: KafkaNode, cluster_id: str) -> None:
        """Until the node answers a metadata request listing a broker, under the cluster id we formatted."""
        if node.process is None:
            raise RuntimeError("the node is not started")
        try:
            node.process.wait_ready(
                lambda: bool((md := node.metadata(timeout=2, cluster_id=cluster_id)) and md.brokers),
                timeout=self._startup_timeout,
                what=f"answer a metadata request on {node.bootstrap}",
                during=f"during start-up on {node.bootstrap}",
            )
        except NotReady as exc:
            raise KafkaStartError(str(exc)) from None  # "Apache Kafka did not answer ... within Ns; log"

    def _reap(self) -> None:
        if self._node is not None:
            self._node.reap()
        unregister(self)


def warm_up(bootstrap: str, timeout: float) -> None:
    """
    Load the group and transaction coordinators, so the first test finds them ready.

    A fresh broker creates ``__consumer_offsets`` and ``__transaction_state`` on first use and answers
    ``COORDINATOR_LOAD_IN_PROGRESS`` / ``NOT_COORDINATOR`` until they are loaded; clients retry,
    but a capability check or a test with a short deadline would see the delay.
    """
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    from airflow_kafka_retry.engine.kafka.clients import coordinator_busy, init_transactions
    from airflow_kafka_retry.sandbox.scratch_topics import CLIENT_LOGGER

    common = {"bootstrap.servers": bootstrap, "logger": CLIENT_LOGGER}
    deadline = time.monotonic() + timeout
    init_transactions(Producer({**common, "transactional.id": f"warm-up-{uuid.uuid4()}"}), timeout)
    consumer = Consumer({**common, "group.id": f"warm-up-{uuid.uuid4()}"})
    try:
        while True:
            try:
                consumer.committed([TopicPartition("__warm_up", 0)], timeout=timeout)
                return
            except KafkaException as exc:
                if not coordinator_busy(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()
