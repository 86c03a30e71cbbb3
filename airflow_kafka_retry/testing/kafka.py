"""
A real single-node Apache Kafka broker (KRaft, broker and controller in one JVM) from its Maven jars.

``ApacheKafka()`` is a context manager with ``.bootstrap``, like the Tansu ``EmbeddedBroker`` beside
it. It resolves the pinned jars once (``kafka_jars``), formats storage in a temporary directory,
starts ``kafka.Kafka`` on free loopback ports with a heap of at most 1 GB, and counts the broker as
ready when a metadata request lists it. The JVM leads its own process group, dies with the process
that started it (PR_SET_PDEATHSIG, from the main thread), and is stopped at interpreter exit; on exit
of the ``with`` block it gets SIGTERM (a clean shutdown in seconds), then SIGKILL.

Settings are those of a test cluster of one: replication factor 1 for the offsets and transaction
logs, ``group.initial.rebalance.delay.ms=0``, few internal partitions (quick first group and
transaction use), and a one-second sweep of timed-out transactions. Everything else is Kafka's
default, so the broker behaves as users' brokers do.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from airflow_kafka_retry.testing.kafka_jars import ensure_kafka_jars, find_java, pinned_version
from airflow_kafka_retry.testing.processes import (
    free_port,
    parent_death_hook,
    port_open,
    register,
    signal_group,
    unregister,
)

log = logging.getLogger(__name__)

#: JVM heap; with metaspace, code cache and threads the broker's RSS stays well under 1.2 GB.
DEFAULT_HEAP = "768m"

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
    *, port: int, controller_port: int, log_dirs: Path, overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The ``server.properties`` of a one-node KRaft test cluster on loopback."""
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
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


def _cluster_id() -> str:
    """
    16 random bytes, URL-safe base64 without padding, never starting with ``-``.

    The storage tool's argument parser would take a leading ``-`` for an option; Kafka's own
    ``Uuid.randomUuid`` draws again for the same reason.
    """
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value


class KafkaStartError(RuntimeError):
    """The broker did not become ready; the message carries the last lines of its log."""


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
    ) -> None:
        self.version = version or pinned_version()
        self._jvm_options = tuple(jvm_options)
        self._requested_port = port
        self._heap = heap
        self._overrides = dict(overrides or {})
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self._keep_data = keep_data
        self._owned_dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._log_path: Path | None = None
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
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> ApacheKafka:
        if self._proc is not None:
            raise RuntimeError("broker already started")
        started = time.monotonic()
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
            controller = free_port()
            run_dir = base / f"kafka-{port}"
            run_dir.mkdir(parents=True, exist_ok=True)
            self._log_path = run_dir / "server.log"
            config = self._write_config(run_dir, port, controller)
            classpath = f"{lib}/*"
            self._format(java, classpath, config, run_dir)
            self._spawn(java, classpath, config, run_dir)
            try:
                self._wait_ready(port)
            except _Exited as exc:
                self._reap()
                if attempt == attempts:
                    self.stop()
                    raise KafkaStartError(str(exc)) from None
                log.warning(
                    "Kafka exited during start-up (attempt %s), retrying on other ports: %s", attempt, exc
                )
                continue
            self._port = port
            self.metadata_seconds = time.monotonic() - started
            self._warm_up()
            self.ready_seconds = time.monotonic() - started
            log.info(
                "Apache Kafka %s pid %s on 127.0.0.1:%s, ready in %.1fs (log %s)",
                self.version,
                self.pid,
                port,
                self.ready_seconds,
                self._log_path,
            )
            return self
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """SIGTERM the broker's process group, SIGKILL after ``stop_timeout``; idempotent."""
        proc = self._proc
        try:
            if proc is not None and proc.poll() is None:
                signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(self._stop_timeout)
                except subprocess.TimeoutExpired:
                    log.warning(
                        "Kafka pid %s ignored SIGTERM for %.0fs; killing", proc.pid, self._stop_timeout
                    )
        finally:
            self._reap()
            self._port = None
            if self._owned_dir is not None and not self._keep_data:
                shutil.rmtree(self._owned_dir, ignore_errors=True)
                self._owned_dir = None
                self._log_path = None

    def log_tail(self, lines: int = 30) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-lines:])

    def __enter__(self) -> ApacheKafka:
        return self.start() if self._proc is None else self

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
    def _write_config(self, run_dir: Path, port: int, controller: int) -> Path:
        props = server_properties(
            port=port, controller_port=controller, log_dirs=run_dir / "data", overrides=self._overrides
        )
        config = run_dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (run_dir / "log4j2.properties").write_text(_LOG4J2)
        return config

    def _jvm(
        self, java: str, classpath: str, run_dir: Path, *, heap: str, options: Sequence[str]
    ) -> list[str]:
        return [
            java,
            *options,
            f"-Xmx{heap}",
            f"-Xms{min(256, _megabytes(heap))}m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={run_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={run_dir}",
            "-cp",
            classpath,
        ]

    def _format(self, java: str, classpath: str, config: Path, run_dir: Path) -> None:
        cmd = [
            # a one-shot tool: compiling beyond C1 would only cost CPU
            *self._jvm(java, classpath, run_dir, heap="256m", options=QUICK_JIT),
            "kafka.tools.StorageTool",
            "format",
            "--config",
            str(config),
            "--cluster-id",
            _cluster_id(),
            "--ignore-formatted",
        ]
        done = subprocess.run(
            cmd, check=False, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            out = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
            raise KafkaStartError(
                f"formatting Kafka storage in {run_dir} failed (exit {done.returncode}):\n{out}"
            )

    def _spawn(self, java: str, classpath: str, config: Path, run_dir: Path) -> None:
        cmd = [
            *self._jvm(java, classpath, run_dir, heap=self._heap, options=self._jvm_options),
            "kafka.Kafka",
            str(config),
        ]
        if self._log_path is None:
            raise RuntimeError("the log path is chosen before the process starts")
        with open(self._log_path, "ab") as logf:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=parent_death_hook(),  # noqa: PLW1509 - None off the main thread
            )
        register(self)

    def _wait_ready(self, port: int) -> None:
        from confluent_kafka import KafkaException

        from airflow_kafka_retry.testing.topics import admin_client

        if self._proc is None:
            raise RuntimeError("the process is not started")
        deadline = time.monotonic() + self._startup_timeout
        admin = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise _Exited(
                    f"Apache Kafka exited (code {self._proc.returncode}) during start-up on "
                    f"127.0.0.1:{port}; log {self._log_path}:\n{self.log_tail()}"
                )
            if port_open(port):
                admin = admin or admin_client(f"127.0.0.1:{port}")
                try:
                    if admin.list_topics(timeout=2).brokers:
                        return
                except KafkaException:
                    pass
            time.sleep(0.1)
        tail = self.log_tail()
        self.stop()
        raise KafkaStartError(
            f"Apache Kafka did not answer a metadata request on 127.0.0.1:{port} within "
            f"{self._startup_timeout:.0f}s; log {self._log_path}:\n{tail}"
        )

    def _warm_up(self) -> None:
        """
        Load the group and transaction coordinators, so the first test finds them ready.

        A fresh broker creates ``__consumer_offsets`` and ``__transaction_state`` on first use and answers
        ``COORDINATOR_LOAD_IN_PROGRESS`` / ``NOT_COORDINATOR`` until they are loaded; clients retry,
        but a capability check or a test with a short deadline would see the delay.
        """
        from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

        from airflow_kafka_retry.engine.clients import coordinator_busy, init_transactions
        from airflow_kafka_retry.testing.topics import CLIENT_LOGGER

        common = {"bootstrap.servers": self.bootstrap, "logger": CLIENT_LOGGER}
        deadline = time.monotonic() + self._startup_timeout
        init_transactions(
            Producer({**common, "transactional.id": f"warm-up-{uuid.uuid4()}"}), self._startup_timeout
        )
        consumer = Consumer({**common, "group.id": f"warm-up-{uuid.uuid4()}"})
        try:
            while True:
                try:
                    consumer.committed([TopicPartition("__warm_up", 0)], timeout=self._startup_timeout)
                    return
                except KafkaException as exc:
                    if not coordinator_busy(exc) or time.monotonic() >= deadline:
                        raise
                    time.sleep(0.2)
        finally:
            consumer.close()

    def _reap(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            signal_group(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)
        self._proc = None
        unregister(self)


class _Exited(Exception):
    """The JVM ended while we waited for it."""


def _megabytes(heap: str) -> int:
    units = {"k": 1 / 1024, "m": 1, "g": 1024}
    unit = heap[-1].lower()
    return int(float(heap[:-1]) * units[unit]) if unit in units else int(heap) // (1024 * 1024)
