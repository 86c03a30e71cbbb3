"""
A private Redis server for tests (the CeleryExecutor's broker), from Debian's ``redis-server`` package.

``RedisServer()`` is a context manager: ``redis-server`` on a free loopback port, its working directory a
new ``0700`` temporary directory, run under :class:`~airflow_kafka_retry.sandbox.processes.ManagedProcess`
(its own process group, killed with the process that started it, stopped at interpreter exit). Every
command needs a password (``requirepass``): a random secret per server (:attr:`RedisServer.password`),
written to the ``0600`` configuration file the server reads, never on a command line (``ps`` shows
those to every local user). Nothing is persisted (no RDB snapshot, no append-only file): a test broker's
queue is thrown away with it. It is ready when an authenticated ``PING`` answers: only our server knows
the password, so another server on the port never counts. :meth:`RedisServer.url` is the ``redis://``
URL with the password in it (for Celery's ``broker_url``: pass it through the environment).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Self

from airflow_kafka_retry.sandbox.loopback_server import LoopbackServer
from airflow_kafka_retry.sandbox.processes import ManagedProcess, NotReady, ProcessExited, free_port, register

if TYPE_CHECKING:
    import redis

log = logging.getLogger(__name__)


class RedisError(RuntimeError):
    """Redis is missing, or did not start; the message says what to do or carries its log."""


def find_redis_server() -> str:
    """The ``redis-server`` binary: ``REDIS_SERVER``, else the one on ``PATH``."""
    found = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    if not found or not Path(found).exists():
        raise RedisError(
            "redis-server not found: install Debian's `redis-server` package (scripts/test does it as "
            "root), or set REDIS_SERVER to the binary"
        )
    return found


class RedisServer(LoopbackServer):
    """
    A ``redis-server`` subprocess on loopback, password required, no persistence; a context manager.

    :param startup_timeout: seconds to wait for an authenticated ``PING`` to answer.
    """

    kind = "Redis"

    def __init__(self, *, startup_timeout: float = 30.0) -> None:
        super().__init__()
        self._startup_timeout = startup_timeout
        #: the server's password: random per server, in :meth:`url`; no command gets in without it
        self.password = secrets.token_hex(24)

    @property
    def log_path(self) -> Path | None:
        return self._dir / "redis.log" if self._dir is not None else None

    def url(self, db: int = 0) -> str:
        """``redis://:password@127.0.0.1:port/db``: a secret, for environments and files only."""
        return f"redis://:{self.password}@127.0.0.1:{self.port}/{db}"

    def client(self, db: int = 0) -> redis.Redis:
        """A ``redis.Redis`` client of this server (authenticated)."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, db=db, password=self.password, socket_timeout=5)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        if self._process is not None:
            raise RuntimeError("Redis already started")
        binary = find_redis_server()
        self._dir = Path(tempfile.mkdtemp(prefix="airflow-kafka-retry-redis-"))  # 0700
        self._port = free_port()
        config = self._dir / "redis.conf"
        config.touch(mode=0o600)
        config.write_text(
            "\n".join(
                [
                    "bind 127.0.0.1",
                    f"port {self._port}",
                    "protected-mode yes",
                    f"requirepass {self.password}",
                    "daemonize no",
                    'logfile ""',  # stdout: the managed process's log
                    f"dir {self._dir}",
                    'save ""',  # no RDB snapshots
                    "appendonly no",
                    "databases 4",
                    "",
                ]
            )
        )
        if self.log_path is None:
            raise RuntimeError("the server's directory is made first")
        self._process = ManagedProcess(
            [binary, str(config)],
            log_path=self.log_path,
            name="redis-server",
            cwd=self._dir,
            grace=10,
        ).start()
        register(self)
        self._wait_ready()
        log.info("Redis pid %s on 127.0.0.1:%s", self.pid, self._port)
        return self

    # ------------------------------------------------------------------ internals
    def _wait_ready(self) -> None:
        """Until ``AUTH`` with this server's own password, then ``PING``, answer (and it holds the port)."""
        import redis

        process = self._process
        if process is None:
            raise RuntimeError("Redis is not started")

        def answers() -> bool:
            client = self.client()
            try:
                return bool(client.ping()) and process.listens_on(self.port)
            except redis.RedisError:
                return False
            finally:
                client.close()

        try:
            process.wait_ready(answers, timeout=self._startup_timeout, what="answer an authenticated PING")
        except (ProcessExited, NotReady) as exc:
            self.stop()
            raise RedisError(str(exc)) from None
