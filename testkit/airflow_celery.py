"""
Airflow's CeleryExecutor for a deployment of ``sandbox/airflow_stack.py``: its settings and its workers.

:func:`celery_env` is what every process of the deployment adds to its environment (with
``airflow_env(..., executor="CeleryExecutor")``): the broker (a :class:`~.redis_server.RedisServer`'s
``redis://`` URL) and Celery's result backend on the PostgreSQL metadata DB (``db+postgresql://``). Both
carry passwords: they travel in the environment, never on a command line.

:class:`CeleryWorkers` starts ``airflow celery worker`` processes, each a
:class:`~.processes.ManagedProcess` (its own process group, killed with the process that started it) with a
distinct Celery node name (``-H``: ``celery@<name>``), its own log in the deployment's home and no log
server (they would share a port; task logs are files in the shared ``AIRFLOW_HOME``). A worker is ready
when its node answers a ``ping`` on the broker: only this deployment's workers know the broker's password
and only this one has the name. :meth:`CeleryWorkers.kill` SIGKILLs a worker as a lost machine would be:
its process group and every process it forked, the task processes too (the task supervisor puts each in
a process group of its own), and waits until none is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from airflow_kafka_retry.sandbox.processes import ManagedProcess, NotReady, stop_all

__all__ = ["CeleryWorkers", "celery_env", "descendants", "result_backend"]


def result_backend(database_url: str) -> str:
    """Celery's ``db+`` result backend URL of a PostgreSQL metadata DB's SQLAlchemy URL."""
    if not database_url.startswith("postgresql"):
        raise ValueError("the CeleryExecutor's result backend needs a PostgreSQL metadata DB")
    return "db+" + database_url  # the driver kept: SQLAlchemy's default for postgresql:// may be missing


def celery_env(broker_url: str, database_url: str, *, concurrency: int = 2) -> dict[str, str]:
    """
    The CeleryExecutor's settings for every process of the deployment.

    :param broker_url: ``redis://:password@127.0.0.1:port/0`` (``RedisServer.url()``).
    :param database_url: the PostgreSQL metadata DB (the result backend's tables go there too).
    :param concurrency: task slots of each worker (``worker_concurrency``).
    """
    return {
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__CELERY__BROKER_URL": broker_url,
        "AIRFLOW__CELERY__RESULT_BACKEND": result_backend(database_url),
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(concurrency),
        "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",  # a worker takes no task it has no slot for
        "AIRFLOW__CELERY__SYNC_PARALLELISM": "1",  # the scheduler's state-fetching processes
        "AIRFLOW__CELERY__OPERATION_TIMEOUT": "10",  # sending a task to the broker (1 s) on a loaded machine
    }


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` forked, and theirs, from ``/proc`` (re-parented orphans are not found)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int(Path(entry.path, "stat").read_text().rpartition(")")[2].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (a killed process its parent has not reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class CeleryWorkers:
    """
    ``airflow celery worker`` processes of one deployment; a context manager (start it after the api-server).

    :param home: the deployment's ``AIRFLOW_HOME`` (the workers' logs go there: ``celery-<name>.log``).
    :param env: the deployment's environment, with :func:`celery_env` in it.
    :param names: one worker each; its Celery node is ``celery@<name>``.
    :param worker_env: variables added to one worker's environment, by name.
    """

    def __init__(
        self,
        home: Path,
        env: Mapping[str, str],
        names: Sequence[str] = ("worker-1", "worker-2"),
        *,
        cwd: Path | None = None,
        worker_env: Mapping[str, Mapping[str, str]] | None = None,
        startup_timeout: float = 180.0,
    ) -> None:
        if env.get("AIRFLOW__CORE__EXECUTOR") != "CeleryExecutor" or "AIRFLOW__CELERY__BROKER_URL" not in env:
            raise ValueError("the deployment's environment has no CeleryExecutor settings (celery_env)")
        self.home, self.env, self.names = home, dict(env), tuple(names)
        self.cwd = cwd or home
        self.worker_env = {name: dict(v) for name, v in (worker_env or {}).items()}
        self.startup_timeout = startup_timeout
        self.airflow = str(Path(sys.executable).with_name("airflow"))
        self.processes: dict[str, ManagedProcess] = {}
        #: seconds each worker took to answer its first ping, by name
        self.ready_s: dict[str, float] = {}

    @staticmethod
    def node(name: str) -> str:
        return f"celery@{name}"

    def log_path(self, name: str) -> Path:
        return self.home / f"celery-{name}.log"

    def start(self) -> CeleryWorkers:
        """Start every worker at once, then wait until each answers a ping (stopping all if one fails)."""
        concurrency = self.env.get("AIRFLOW__CELERY__WORKER_CONCURRENCY", "2")
        try:
            for name in self.names:
                self.processes[name] = ManagedProcess(
                    [self.airflow, "celery", "worker", "-H", name, "-c", concurrency, "--skip-serve-logs"]
                    + ["--without-mingle", "--without-gossip"],
                    log_path=self.log_path(name),
                    name=f"airflow celery worker {name}",
                    env={**self.env, **self.worker_env.get(name, {})},
                    cwd=self.cwd,
                    grace=30,
                    append=False,
                ).start()
            started = time.monotonic()
            for name, process in self.processes.items():
                left = max(1.0, self.startup_timeout - (time.monotonic() - started))
                process.wait_ready(
                    lambda name=name: self.node(name) in self.ping([name]),  # type: ignore[misc]
                    timeout=left,
                    what=f"answer a ping as {self.node(name)}",
                    interval=0.5,
                )
                self.ready_s[name] = time.monotonic() - started
        except BaseException:
            self.stop()
            raise
        return self

    def ping(self, names: Sequence[str] | None = None, timeout: float = 1.0) -> set[str]:
        """The nodes (``celery@<name>``) of ``names`` (default all) that answer a ping within ``timeout``."""
        from celery import Celery  # type: ignore[import-untyped]

        app = Celery(broker=self.env["AIRFLOW__CELERY__BROKER_URL"])
        try:
            answers = app.control.ping(
                destination=[self.node(n) for n in (names or self.names)], timeout=timeout
            )
        except Exception:  # the broker does not answer (yet): nobody answers
            return set()
        finally:
            app.close()
        return {node for answer in answers for node in answer}

    def kill(self, name: str, timeout: float = 30.0) -> list[int]:
        """
        SIGKILL worker ``name`` with every process it forked (task processes too); the pids killed.

        Each process's group gets the signal, then the process itself; this returns once none of them is
        left (zombies count as gone), or raises :class:`NotReady` after ``timeout``.
        """
        process = self.processes[name]
        if process.pid is None:
            raise RuntimeError(f"celery worker {name} is not started")
        pids = [process.pid, *descendants(process.pid)]
        groups = set()
        for pid in pids:
            with contextlib.suppress(OSError):
                groups.add(os.getpgid(pid))
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        process.kill()  # reaps the leader
        deadline = time.monotonic() + timeout
        while left := [pid for pid in pids if alive(pid)]:
            if time.monotonic() > deadline:
                raise NotReady(f"celery worker {name}: processes {left} outlived SIGKILL for {timeout:.0f}s")
            time.sleep(0.1)
        return pids

    def check_alive(self, skip: Sequence[str] = ()) -> None:
        """Raise (with its log's tail) if a worker not in ``skip`` has exited."""
        for name, process in self.processes.items():
            if name not in skip:
                process.check_alive(f"(celery worker {name})")

    def stop(self) -> None:
        """SIGTERM every worker at once (a warm shutdown), SIGKILL those still running 30 s later."""
        stop_all(list(self.processes.values()), 30)

    def __enter__(self) -> CeleryWorkers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
