"""
What the suite's private servers (PostgreSQL, Redis) share: a loopback port and a directory of their own.

Each is a managed process, stopped and cleaned up the same way.

A subclass makes ``_dir`` (a new ``0700`` temporary directory), picks ``_port`` and starts ``_process``
(a :class:`~airflow_kafka_retry.sandbox.processes.ManagedProcess`, registered to be stopped at interpreter
exit) in its ``start()``; :meth:`LoopbackServer.stop` stops the process (:meth:`_stop_process`, which a
server with its own shutdown overrides), forgets the port and removes the directory, and is idempotent.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import TracebackType
from typing import Self

from airflow_kafka_retry.sandbox.processes import ManagedProcess, unregister


class LoopbackServer:
    """A server subprocess on loopback with a private directory; a context manager (``start`` on entry)."""

    #: What the server is called in messages ("PostgreSQL is not started").
    kind = "the server"

    def __init__(self) -> None:
        self._dir: Path | None = None
        self._process: ManagedProcess | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"{self.kind} is not started")
        return self._port

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> Self:
        raise NotImplementedError

    def _stop_process(self, process: ManagedProcess) -> None:
        """SIGTERM the process group, SIGKILL after the process's grace."""
        process.stop()

    def stop(self) -> None:
        """Stop the server and remove its directory; idempotent."""
        process = self._process
        try:
            if process is not None:
                self._stop_process(process)
        finally:
            self._process = None
            self._port = None
            unregister(self)
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None

    def __enter__(self) -> Self:
        if self._process is None:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(pid={self.pid}, port={self._port})"
