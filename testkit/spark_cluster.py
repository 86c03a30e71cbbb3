"""
A Spark standalone cluster on loopback for tests and benches: a master and workers from pyspark's own Spark.

``SparkCluster(base_dir)`` is a context manager. It starts ``org.apache.spark.deploy.master.Master``, then
the workers (``org.apache.spark.deploy.worker.Worker``, 1 core and 1 GB each by default), every one with the
distribution's ``bin/spark-class`` under :class:`~airflow_kafka_retry.sandbox.processes.ManagedProcess`,
bound to ``127.0.0.1`` on free ports, each with its own local, work and log folders under ``base_dir``.

RPC is authenticated and encrypted (``spark.authenticate``, ``spark.network.crypto.enabled``) with a secret
drawn per cluster. The secret is never on a command line (``ps`` shows those): the daemons read it from a
``0600`` properties file (``--properties-file``), clients from a ``0600`` ``spark-defaults.conf`` in a
private ``SPARK_CONF_DIR`` (:meth:`SparkCluster.client_env`) or the same file as ``--properties-file``
(:attr:`SparkCluster.client_properties`, what ``SparkSubmitOperator(properties_file=...)`` takes). Workers
hand it to their executors in the environment, as Spark does.

Ready when the master's web UI JSON (``/json/``) names this master's URL and lists every worker of this
cluster, by its web UI port, as ``ALIVE``: an answer from another Spark on the port never counts. The
deadline is enforced here; a failure names what it waited for with the tail of each log.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from airflow_kafka_retry.sandbox.processes import (
    ManagedProcess,
    free_port,
    register,
    stop_all,
    unregister,
)
from airflow_kafka_retry.spark.running import spark_home

log = logging.getLogger(__name__)

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: quick start over peak speed, and a small heap: the daemons only schedule
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
DAEMON_MEMORY = "256m"


class SparkClusterError(RuntimeError):
    """The cluster did not start; the message says what was awaited, with the logs' tails."""


@dataclass(frozen=True)
class WorkerInfo:
    """One worker as the master's JSON lists it."""

    id: str
    web_port: int
    state: str
    cores: int


def _write_private(path: Path, text: str) -> Path:
    """``text`` into a new ``0600`` file (created with that mode: never readable by others, even briefly)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


class SparkCluster:
    """
    A Spark standalone master and ``workers`` workers on 127.0.0.1; see the module docstring.

    :param base_dir: parent of the cluster's folders (created; left in place for post-mortems).
    :param workers: how many workers.
    :param cores: cores each worker offers.
    :param memory: memory each worker offers to executors (``1g``).
    :param ready_timeout: seconds the whole start may take before it fails.
    """

    def __init__(
        self,
        base_dir: Path,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        ready_timeout: float = 90.0,
    ) -> None:
        home = spark_home()
        if home is None or not os.path.isfile(os.path.join(home, "bin", "spark-class")):
            raise SparkClusterError("cannot find Spark's bin/spark-class: install pyspark or set SPARK_HOME")
        self.spark_home = home
        self.base_dir = Path(base_dir)
        self.worker_count, self.cores, self.memory = workers, cores, memory
        self.ready_timeout = ready_timeout
        self.secret = secrets.token_hex(32)
        self.master_port, self.master_web_port = free_port(), free_port()
        self.worker_web_ports = [free_port() for _ in range(workers)]
        self.master: ManagedProcess | None = None
        self.workers: list[ManagedProcess] = []
        self.start_seconds: float | None = None

    # ------------------------------------------------------------------ addresses and client settings
    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.master_web_port}"

    @property
    def client_conf_dir(self) -> Path:
        """A ``SPARK_CONF_DIR`` whose ``spark-defaults.conf`` (0600) holds the master and auth settings."""
        return self.base_dir / "client-conf"

    @property
    def client_properties(self) -> Path:
        """That ``spark-defaults.conf``, as a ``--properties-file`` (``SparkSubmitOperator``'s too)."""
        return self.client_conf_dir / "spark-defaults.conf"

    def worker_dir(self, index: int) -> Path:
        """Worker ``index``'s work folder: ``app-*/<executor id>/`` with each executor's stdout and stderr."""
        return self.base_dir / f"worker-{index}" / "work"

    def client_conf(self) -> dict[str, str]:
        """The spark-submit settings a client needs, secret included: for a file, never ``--conf``."""
        return {"spark.master": self.master_url, **self._auth_conf()}

    def client_env(self) -> dict[str, str]:
        """Environment for ``spark-submit``: ``SPARK_CONF_DIR`` pointing at the client's private settings."""
        return {"SPARK_CONF_DIR": str(self.client_conf_dir), "SPARK_LOCAL_IP": "127.0.0.1"}

    def _auth_conf(self) -> dict[str, str]:
        return {
            "spark.authenticate": "true",
            "spark.authenticate.secret": self.secret,
            "spark.network.crypto.enabled": "true",
        }

    def log_paths(self) -> list[Path]:
        """The daemons' own logs (the master's first)."""
        return [p.log_path for p in (self.master, *self.workers) if p is not None]

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        started = time.monotonic()
        deadline = started + self.ready_timeout
        self.base_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.base_dir, 0o700)
        daemon_conf = self.base_dir / "daemon-conf"
        daemon_conf.mkdir(mode=0o700, exist_ok=True)
        self.client_conf_dir.mkdir(mode=0o700, exist_ok=True)
        # a port taken meanwhile fails the start at once, naming it, instead of Spark moving to the next one;
        # no REST submission server (nothing here submits in cluster mode): on its fixed port 6066 a second
        # cluster's master failed to start it and never became ALIVE (two xdist workers, CI of 569acbc)
        daemon_settings = {
            **self._auth_conf(),
            "spark.port.maxRetries": "0",
            "spark.master.rest.enabled": "false",
        }
        daemon_props = _write_private(daemon_conf / "spark-daemon.conf", _properties(daemon_settings))
        _write_private(self.client_properties, _properties(self.client_conf()))
        register(self)
        try:
            self.master = self._daemon(
                "master",
                [
                    MASTER_CLASS,
                    *("--host", "127.0.0.1", "--port", str(self.master_port)),
                    *("--webui-port", str(self.master_web_port), "--properties-file", str(daemon_props)),
                ],
            ).start()
            master = self.master
            master.wait_ready(
                lambda: master.listens_on(self.master_port),
                timeout=max(1.0, deadline - time.monotonic()),
                what=f"listen on {self.master_url}",
            )
            for index, web_port in enumerate(self.worker_web_ports):
                work = self.worker_dir(index)
                work.mkdir(parents=True, exist_ok=True)
                args = [WORKER_CLASS, "--host", "127.0.0.1", "--webui-port", str(web_port)]
                args += ["--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work)]
                args += ["--properties-file", str(daemon_props), self.master_url]
                self.workers.append(self._daemon(f"worker-{index}", args).start())
            master.wait_ready(
                self._all_workers_alive,
                timeout=max(1.0, deadline - time.monotonic()),
                what=f"list {self.worker_count} ALIVE workers (web UI ports {self.worker_web_ports}) "
                f"in {self.web_url}/json/",
            )
            for worker in self.workers:
                worker.check_alive("during start-up")
        except Exception as exc:
            tails = "".join(f"\n--- {p.name}: {p.log_path}\n{p.log_tail(15)}" for p in self.workers)
            self.stop()
            raise SparkClusterError(f"Spark standalone cluster did not start: {exc}{tails}") from exc
        self.start_seconds = time.monotonic() - started
        log.info(
            "Spark standalone cluster %s (%d workers x %d core, %s) ready in %.1f s",
            self.master_url,
            self.worker_count,
            self.cores,
            self.memory,
            self.start_seconds,
        )
        return self

    def _daemon(self, name: str, args: list[str]) -> ManagedProcess:
        own = self.base_dir / name
        local = own / "local"
        local.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env.update(
            {
                "SPARK_HOME": self.spark_home,
                "SPARK_CONF_DIR": str(self.base_dir / "daemon-conf"),
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOCAL_DIRS": str(local),
                "SPARK_LOG_DIR": str(own / "logs"),
                "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
                "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS,
                "SPARK_NO_DAEMONIZE": "1",
            }
        )
        cmd = [os.path.join(self.spark_home, "bin", "spark-class"), *args]
        return ManagedProcess(
            cmd, log_path=own / "logs" / f"{name}.log", name=f"Spark {name}", env=env, grace=10.0
        )

    def master_state(self, timeout: float = 2.0) -> dict[str, Any] | None:
        """The master's web UI JSON (workers, active and completed apps); None when it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.web_url}/json/", timeout=timeout) as answer:
                state: dict[str, Any] = json.loads(answer.read())
                return state
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> list[WorkerInfo]:
        """This cluster's workers the master lists as ALIVE (matched by their web UI ports)."""
        state = self.master_state()
        if not state or state.get("url") != self.master_url:
            return []
        found = []
        for worker in state.get("workers", []):
            port = int(str(worker.get("webuiaddress", "")).rpartition(":")[2] or 0)
            if worker.get("state") == "ALIVE" and port in self.worker_web_ports:
                found.append(WorkerInfo(worker["id"], port, worker["state"], int(worker.get("cores", 0))))
        return found

    def _all_workers_alive(self) -> bool:
        for worker in self.workers:
            worker.check_alive("during start-up")
        return len({w.web_port for w in self.alive_workers()}) == self.worker_count

    def stop(self) -> None:
        """Workers and master stopped together (SIGKILL after 10 s); idempotent. The folders stay."""
        try:
            stop_all([*self.workers, *([self.master] if self.master else [])], grace=10.0)
        finally:
            unregister(self)

    def remove(self) -> None:
        """:meth:`stop`, then delete the cluster's folders (the secret's files with them)."""
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _properties(conf: dict[str, str]) -> str:
    return "".join(f"{key} {value}\n" for key, value in conf.items())
