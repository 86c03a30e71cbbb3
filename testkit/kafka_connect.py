"""
A real Kafka Connect standalone worker (``ConnectStandalone``) from its Maven jars, for dead-letter tests.

``ConnectWorker(bootstrap=…)`` is a context manager. It resolves ``testkit/connect-pom.xml`` once into the
jar cache (``kafka_jars.ensure_jars``; ``connect-runtime``, ``connect-json`` and ``connect-file``, all
:data:`CONNECT_VERSION`), writes ``worker.properties`` in a temporary directory (the offsets storage file
there too), and runs ``org.apache.kafka.connect.cli.ConnectStandalone`` under
``processes.ManagedProcess`` (own process group, killed with its parent, stopped at interpreter exit) with
its REST API on a free loopback port. It is ready when that port is held by the worker's own process
group and ``GET /`` names the Kafka cluster id of ``bootstrap``: another worker, or one of another
cluster, never counts. Connectors are added through the REST API (:meth:`ConnectWorker.put_connector`),
which waits, within a deadline, until the connector and every task are ``RUNNING``. On exit: SIGTERM (a
clean shutdown in about a second), then SIGKILL.

:func:`file_sink_with_dlq` is the connector the tests run: a ``FileStreamSink`` with ``JsonConverter``
values, so a value that is not JSON fails at the value converter stage and, with ``errors.tolerance=all``,
goes to Connect's dead-letter queue (``DeadLetterQueueReporter``).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from airflow_kafka_retry.sandbox.kafka_jars import ensure_jars, find_java
from airflow_kafka_retry.sandbox.kafka_node import QUICK_JIT
from airflow_kafka_retry.sandbox.processes import ManagedProcess, NotReady, free_port, register, unregister
from airflow_kafka_retry.sandbox.scratch_topics import admin_client

log = logging.getLogger(__name__)

#: The worker's version: ``connect-file`` 4.4.0 is not served, and a 4.3.1 ``connect-file`` fails on a
#: 4.4.0 runtime (``AppInfoParser`` moved), so all three jars are 4.3.1 (kept in step with the pom).
CONNECT_VERSION = "4.3.1"

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
"""


class ConnectError(RuntimeError):
    """The worker did not start, or a connector did not reach RUNNING; with the worker's log tail."""


def connect_pom() -> str:
    """The worker's pom (beside this file; not shipped)."""
    text = Path(__file__).with_name("connect-pom.xml").read_text()
    if f"<connect.version>{CONNECT_VERSION}</connect.version>" not in text:
        raise ConnectError(f"connect-pom.xml does not pin connect.version {CONNECT_VERSION}")
    return text


def ensure_connect_jars(*, timeout: float = 600.0) -> Path:
    """The directory of the worker's jars, resolved from Maven Central once (cached outside git)."""
    return ensure_jars(
        connect_pom(),
        f"connect-{CONNECT_VERSION}",
        what=f"org.apache.kafka:connect-runtime/connect-json/connect-file:{CONNECT_VERSION}",
        expect="connect-runtime-*.jar",
        timeout=timeout,
    )


def file_sink_with_dlq(
    *, topic: str, file: Path, dlq_topic: str, context_headers: bool = True
) -> dict[str, str]:
    """A FileStreamSink of ``topic`` whose bad records (values that are not JSON) go to ``dlq_topic``."""
    return {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1",
        "topics": topic,
        "file": str(file),
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "errors.tolerance": "all",
        "errors.deadletterqueue.topic.name": dlq_topic,
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": str(context_headers).lower(),
    }


class ConnectWorker:
    """
    A Kafka Connect standalone worker subprocess on loopback; a context manager.

    :param bootstrap: the Kafka cluster it works against.
    :param heap: JVM ``-Xmx``.
    :param startup_timeout: seconds to wait for its REST API to answer for our cluster.
    :param stop_timeout: seconds between SIGTERM and SIGKILL.
    """

    def __init__(
        self,
        *,
        bootstrap: str,
        heap: str = "384m",
        startup_timeout: float = 120.0,
        stop_timeout: float = 20.0,
    ) -> None:
        self.bootstrap = bootstrap
        self._heap, self._startup_timeout, self._stop_timeout = heap, startup_timeout, stop_timeout
        self._dir: Path | None = None
        self.process: ManagedProcess | None = None
        self.port: int | None = None
        self.ready_seconds: float | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the Connect worker is not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def run_dir(self) -> Path:
        if self._dir is None:
            raise RuntimeError("the Connect worker is not started")
        return self._dir

    def start(self) -> Self:
        if self.process is not None:
            raise RuntimeError("the Connect worker is already started")
        started = time.monotonic()
        java, lib = find_java(), ensure_connect_jars()
        register(self)  # its run directory goes at interpreter exit too
        cluster_id = admin_client(self.bootstrap).list_topics(timeout=15).cluster_id
        self._dir = Path(tempfile.mkdtemp(prefix="airflow-kafka-retry-connect-"))
        self.port = free_port()
        config = self._dir / "worker.properties"
        config.write_text(
            f"bootstrap.servers={self.bootstrap}\n"
            "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
            "value.converter=org.apache.kafka.connect.json.JsonConverter\n"
            f"offset.storage.file.filename={self._dir / 'connect.offsets'}\n"
            "offset.flush.interval.ms=1000\n"
            f"listeners=http://127.0.0.1:{self.port}\n"
        )
        (self._dir / "log4j2.properties").write_text(_LOG4J2)
        cmd = [
            java,
            *QUICK_JIT,
            f"-Xmx{self._heap}",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self._dir / 'log4j2.properties'}",
            "-cp",
            f"{lib}/*",
            "org.apache.kafka.connect.cli.ConnectStandalone",
            str(config),
        ]
        process = self.process = ManagedProcess(
            cmd, log_path=self._dir / "connect.log", name="Kafka Connect worker", grace=self._stop_timeout
        ).start()
        port = self.port

        def ours() -> bool:
            if not process.listens_on(port):
                return False
            root = self._get("/", timeout=2.0, quiet=True)
            return root is not None and root.get("kafka_cluster_id") == cluster_id

        try:
            process.wait_ready(
                ours,
                timeout=self._startup_timeout,
                what=f"answer on {self.url} for Kafka cluster {cluster_id}",
                during=f"during start-up on {self.url}",
                interval=0.2,
            )
        except (NotReady, RuntimeError) as exc:
            self.stop()
            raise ConnectError(str(exc)) from None
        self.ready_seconds = time.monotonic() - started
        log.info("Kafka Connect %s on %s, ready in %.1fs", CONNECT_VERSION, self.url, self.ready_seconds)
        return self

    def put_connector(self, name: str, config: dict[str, str], *, timeout: float = 60.0) -> dict[str, Any]:
        """Create (or update) connector ``name``; its status once it and every task run."""
        body = json.dumps(config).encode()
        request = urllib.request.Request(
            f"{self.url}/connectors/{name}/config",
            data=body,
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                answer.read()
        except urllib.error.HTTPError as exc:
            raise ConnectError(
                f"the worker refused connector {name!r}: HTTP {exc.code} {exc.read()[:500]!r}"
            ) from None
        return self.wait_running(name, timeout=timeout)

    def wait_running(self, name: str, *, timeout: float = 60.0) -> dict[str, Any]:
        """The status of connector ``name`` once it and at least one task are RUNNING; fails on FAILED."""
        deadline, status = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            if self.process is not None:
                self.process.check_alive(f"while connector {name!r} started")
            status = self._get(f"/connectors/{name}/status", timeout=5.0, quiet=True)
            if status is not None:
                states = [status["connector"]["state"], *(task["state"] for task in status["tasks"])]
                if "FAILED" in states:
                    raise ConnectError(f"connector {name!r} failed: {json.dumps(status)[:2000]}")
                if len(states) > 1 and set(states) == {"RUNNING"}:
                    return status
            time.sleep(0.2)
        raise ConnectError(
            f"connector {name!r} did not run within {timeout:.0f}s (last status {status}); "
            f"log {self.run_dir / 'connect.log'}:\n{self.log_tail()}"
        )

    def delete_connector(self, name: str, *, timeout: float = 30.0) -> None:
        request = urllib.request.Request(f"{self.url}/connectors/{name}", method="DELETE")
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read()

    def log_tail(self, lines: int = 30) -> str:
        return self.process.log_tail(lines) if self.process is not None else ""

    def stop(self) -> None:
        """SIGTERM, SIGKILL after ``stop_timeout``; removes the run directory; idempotent."""
        try:
            if self.process is not None:
                self.process.stop()
        finally:
            self.process, self.port = None, None
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None
            unregister(self)

    def _get(self, path: str, *, timeout: float, quiet: bool = False) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout) as answer:
                found: dict[str, Any] = json.loads(answer.read())
                return found
        except (OSError, ValueError):  # not answering yet (URLError, a reset, a 404 while it starts)
            if not quiet:
                raise
            return None

    def __enter__(self) -> Self:
        return self.start() if self.process is None else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
