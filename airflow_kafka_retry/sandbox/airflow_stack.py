"""
A real local Airflow 3 deployment (tests and the demo): api-server, scheduler, dag-processor, triggerer.

What ``airflow standalone`` starts, started one by one so each one's log is kept and each is
stopped by its own process group (``processes.ManagedProcess``: killed with the process that started
it, stopped at interpreter exit): the LocalExecutor on a SQLite metadata DB (Airflow 3.3 accepts
that pair; tasks reach the DB through the api-server's execution API), one own ``AIRFLOW_HOME``.
The CeleryExecutor instead (``airflow_env(..., executor="CeleryExecutor")``, PostgreSQL only): its
settings and its ``airflow celery worker`` processes are in ``testkit/airflow_celery.py``.
A start that fails stops what it had started; a component whose group cannot be signalled is
signalled itself, and the others are stopped all the same.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

from airflow_kafka_retry.sandbox.processes import ManagedProcess, NotReady, free_port, port_open, stop_all

__all__ = ["COMPONENTS", "AirflowCluster", "airflow_env", "free_port", "query_metadata", "seed_metadata_db"]

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


def airflow_env(
    home: Path,
    *,
    connections: dict[str, dict] | None = None,
    extra: dict[str, str] | None = None,
    api_port: int | None = None,
    pythonpath: Sequence[str | Path] = (),
    database_url: str | None = None,
    executor: str = "LocalExecutor",
) -> dict[str, str]:
    """
    The environment of every Airflow process of the deployment (no variable of the caller's Airflow).

    :param pythonpath: directories put in front of ``PYTHONPATH`` (where DAG files import handlers from).
    :param database_url: the metadata DB's SQLAlchemy URL (e.g. from ``testkit/airflow_postgres.py``);
        default a SQLite file in ``home``.
    :param executor: ``LocalExecutor``, or ``CeleryExecutor`` with the broker, result backend and workers of
        ``testkit/airflow_celery.py`` (``celery_env``, ``CeleryWorkers``; PostgreSQL metadata DB only).
    """
    port = api_port or free_port()
    (home / "dags").mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "AIRFLOW__"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": executor,
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url or f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": uuid.uuid4().hex,
            "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex,
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "2",
            "AIRFLOW__SCHEDULER__STANDALONE_DAG_PROCESSOR": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            # a file is parsed when it appears and again when its mtime changes (modified_time order), not
            # every 30 s: each parse imports the provider and builds every DAG of the file (CPU a test pays)
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
            "AIRFLOW__DAG_PROCESSOR__FILE_PARSING_SORT_MODE": "modified_time",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
            # a task waits this long for the api-server's answer (default 5 s) before it retries: on a loaded
            # machine the first answers took up to 31 s, and a retried "task started" call fails the task
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            # a skipped (or failed) try is reported once its process is reaped; when its sockets close just
            # before that, the task supervisor waits this long (default 5 s) and the try holds its lane's
            # one slot meanwhile (docs/operations.md, "Workers: report a skip within a second")
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            # the scheduler's and the triggerer's log servers (serve-logs children): ports of this deployment,
            # not Airflow's fixed 8793 and 8794, which another deployment on the machine may hold
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "PYTHONPATH": os.pathsep.join(str(p) for p in (*pythonpath, os.environ.get("PYTHONPATH")) if p),
        }
    )
    for conn_id, conn in (connections or {}).items():
        env[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(conn)
    env.update(extra or {})
    return env


#: migrated SQLite metadata DBs of this process, by the auth manager they were migrated for
_TEMPLATES: dict[str, Path] = {}


def seed_metadata_db(env: dict[str, str], *, cwd: Path | None = None) -> None:
    """
    Give the deployment of ``env`` a migrated metadata DB.

    A new SQLite DB is a copy of one that ``airflow db migrate`` made once in this process (a migration
    costs about 7 s of CPU; a copy, a millisecond); an existing one, or any other database, is migrated
    in place.
    """
    conn = env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "")
    target = Path(conn.removeprefix("sqlite:///"))
    if not conn.startswith("sqlite:///") or target.exists():
        _migrate(env, cwd)
        return
    key = env.get("AIRFLOW__CORE__AUTH_MANAGER", "")
    if key not in _TEMPLATES:
        home = Path(tempfile.mkdtemp(prefix="akr-airflow-template-"))
        atexit.register(shutil.rmtree, home, ignore_errors=True)
        template_env = {**airflow_env(home), "PYTHONPATH": env.get("PYTHONPATH", "")}
        if key:
            template_env["AIRFLOW__CORE__AUTH_MANAGER"] = key
        _migrate(template_env, cwd)
        _TEMPLATES[key] = home / "airflow.db"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_TEMPLATES[key], target)


def _migrate(env: dict[str, str], cwd: Path | None) -> None:
    airflow = str(Path(sys.executable).with_name("airflow"))
    done = subprocess.run(
        [airflow, "db", "migrate"], check=False, env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed: {done.stderr[-3000:]}")


def query_metadata(url: str, sql: str, *params: object) -> list[tuple]:
    """Rows of ``sql`` (``?`` placeholders) on the metadata DB at SQLAlchemy ``url``: SQLite or PostgreSQL."""
    if url.startswith("postgresql"):
        from airflow_kafka_retry.sandbox.postgres import query

        return query(url, sql, *params)
    with closing(sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30)) as con:
        return con.execute(sql, params).fetchall()


class AirflowCluster:
    """
    Start the deployment's four processes.

    ``stop()`` (or leaving the ``with`` block) ends each by its pid. A component named ``scheduler#2`` is
    a second ``airflow scheduler`` (high availability needs a PostgreSQL metadata DB); ``component_env``
    adds variables to one component's environment; ``components`` are those the ``with`` block starts.

    :param migrated: the metadata DB already holds Airflow's schema (a copy of a migrated template):
        :meth:`start` skips ``airflow db migrate``.
    :param api_apps: the api-server's ``--apps``: ``all`` (the UI and REST API too, as the demo needs), or
        ``execution``, the one the tasks and the triggerer talk to (a start costs a third less CPU).
    """

    def __init__(
        self,
        home: Path,
        env: dict[str, str],
        *,
        cwd: Path | None = None,
        migrated: bool = False,
        component_env: dict[str, dict[str, str]] | None = None,
        components: Sequence[str] = COMPONENTS,
        api_apps: str = "all",
    ) -> None:
        self.home = home
        self.api_apps = api_apps
        self.migrated = migrated
        self.component_env = component_env or {}
        self.components = tuple(components)
        self.env = env
        self.cwd = cwd or home
        self.airflow = str(Path(sys.executable).with_name("airflow"))
        #: each started component's process (a test may drop one it killed for good: check_alive skips it)
        self.processes: dict[str, subprocess.Popen] = {}
        self._managed: dict[str, ManagedProcess] = {}

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.airflow, *args],
            check=False,
            env=self.env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def migrate(self) -> None:
        seed_metadata_db(self.env, cwd=self.cwd)

    def start(self, components: Sequence[str] = COMPONENTS) -> AirflowCluster:
        """
        Migrate the metadata DB (unless ``migrated``) and start ``components``, the api-server first.

        Tasks reach the DB through it: a task the scheduler started before it listened would fail.
        """
        if not self.migrated:
            self.migrate()
        try:
            for name in sorted(components, key=lambda c: c != "api-server"):
                self._spawn(name, append=False)
                if name == "api-server":
                    self._wait_for_api()
        except BaseException:
            self.stop()  # nothing started stays behind
            raise
        return self

    def _spawn(self, name: str, *, append: bool) -> None:
        command = name.partition("#")[0]
        process = ManagedProcess(
            [self.airflow, command, *(["--apps", self.api_apps] if command == "api-server" else [])],
            log_path=self.home / f"{name}.log",
            name=f"airflow {name}",
            env={**self.env, **self.component_env.get(name, {})},
            cwd=self.cwd,
            grace=30,
            append=append,
        )
        self._managed[name] = process  # before it starts: stop() covers it from here on
        process.start()
        self.processes[name] = process.proc  # type: ignore[assignment]

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to one component's process group (a crash, with SIGKILL) and wait for it to end."""
        process = self._managed[name]
        process.signal(signal.Signals(sig))
        process.wait(30)

    def pause(self, name: str) -> None:
        """Freeze one component's process group (SIGSTOP) until :meth:`resume`; :meth:`stop` still ends it."""
        self._managed[name].signal(signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """Let a component :meth:`pause` froze go on (SIGCONT)."""
        self._managed[name].signal(signal.SIGCONT)

    def restart(self, name: str) -> None:
        """Start a component again (after :meth:`kill`), appending to its log."""
        self._managed[name].kill()
        self._spawn(name, append=True)

    def _wait_for_api(self, timeout: float = 300) -> None:
        port = int(self.env["AIRFLOW__API__PORT"])
        api = self._managed["api-server"]
        try:
            # its own: the api-server's process group holds the port (another deployment's never counts)
            api.wait_ready(
                lambda: self._api_listens(port),
                timeout=timeout,
                what=f"listen on {port}",
                interval=0.5,
            )
        except NotReady:
            raise RuntimeError(
                f"the api-server did not listen on {port} within {timeout}s:\n{self.log_tail('api-server')}"
            ) from None
        # one answer from the execution API before any task asks it something (its first one is the slowest)
        with contextlib.suppress(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/execution/health", timeout=timeout).close()

    def _api_listens(self, port: int) -> bool:
        self.check_alive()
        return port_open(port) and self._managed["api-server"].listens_on(port)

    def check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise RuntimeError(f"airflow {name} exited with {proc.returncode}:\n{self.log_tail(name)}")

    def log_tail(self, name: str, chars: int = 4000) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def stop(self) -> None:
        """SIGTERM every component's group at once, SIGKILL those still running 30 s later; idempotent."""
        stop_all(list(self._managed.values()), 30)

    def __enter__(self) -> AirflowCluster:
        return self.start(self.components)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ reading the metadata DB
    @property
    def database_url(self) -> str:
        return self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]

    def query(self, sql: str, *params: object) -> list[tuple]:
        """Rows of ``sql`` (``?`` placeholders) on the metadata DB, SQLite or PostgreSQL."""
        return query_metadata(self.database_url, sql, *params)

    def task_states(self, dag_id: str) -> list[tuple]:
        """``(run_id, task_id, state)`` of every task instance of ``dag_id``."""
        return self.query(
            "SELECT run_id, task_id, state FROM task_instance WHERE dag_id = ? ORDER BY run_id", dag_id
        )

    def task_log_tail(self, dag_id: str, chars: int = 3000) -> str:
        """The end of each task log of ``dag_id`` (every run, task and try; Airflow's default log folder)."""
        paths = sorted((self.home / "logs" / f"dag_id={dag_id}").rglob("*.log"))
        return "\n".join(
            f"--- {p.relative_to(self.home)}\n{p.read_text(errors='replace')[-chars:]}" for p in paths
        )

    def wait_for_success(self, dag_id: str, timeout: float, task_id: str | None = None) -> None:
        """
        Wait until every task of ``dag_id``'s run succeeded; fail at once, with the log, if one failed.

        ``task_id``: wait only until that task succeeded in some run (the others may be skipped).
        """
        deadline = time.monotonic() + timeout
        while True:
            states = [state for _, task, state in self.task_states(dag_id) if task_id in (None, task)]
            done = "success" in states if task_id else states and all(state == "success" for state in states)
            if done:
                return
            if {"failed", "upstream_failed"} & set(states) or time.monotonic() > deadline:
                what = "failed" if time.monotonic() <= deadline else f"did not succeed within {timeout:.0f}s"
                raise AssertionError(
                    f"{dag_id}{'.' + task_id if task_id else ''} {what}: task states {states}\n"
                    f"{self.task_log_tail(dag_id)}\nscheduler log:\n{self.log_tail('scheduler')}"
                )
            self.check_alive()
            time.sleep(0.5)
