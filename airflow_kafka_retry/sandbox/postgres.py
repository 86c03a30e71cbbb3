"""
A private PostgreSQL server for tests, benches and the demo, from Debian's ``postgresql`` package.

``PostgresCluster()`` is a context manager: ``initdb`` in a temporary directory, then ``postgres`` on a
free loopback port, its unix socket in that directory too. ``create_database(name, template=...)``
returns the SQLAlchemy URL of a new database (``postgresql+psycopg2://``: the driver Airflow's
PostgreSQL backend uses; Airflow's async engine derives ``postgresql+asyncpg://`` from it, so both
``psycopg2-binary`` and ``asyncpg`` must be installed).

Every connection, over loopback TCP and over the unix socket, needs a password (``scram-sha-256``):
a random secret drawn per cluster (:attr:`PostgresCluster.password`), which the URLs carry. Without
it, any local user could open a superuser session (and run ``COPY ... TO PROGRAM`` as the server's
account). The cluster's folder, the socket's too, is ``0700``.

``initdb`` and ``postgres`` refuse to run as root: as root, both run as the ``postgres`` user that the
Debian package creates (the temporary directory is handed to it). Durability is switched off
(``fsync``, ``synchronous_commit``, ``full_page_writes``): a test server's data is thrown away, and a
crash of the machine is not a case it must survive. The postmaster runs under
``processes.ManagedProcess``: it leads its own process group, dies with the process that started it
(PR_SET_PDEATHSIG, set after the switch of user), and is stopped at interpreter exit. It is ready when a
session opens with the cluster's own random password (so another server on the port never counts);
:meth:`PostgresCluster.stop` asks for a fast shutdown, then ``pg_ctl stop -m immediate``, then SIGKILLs the
group.
"""

from __future__ import annotations

import glob
import logging
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Self

from airflow_kafka_retry.sandbox.loopback_server import LoopbackServer
from airflow_kafka_retry.sandbox.processes import ManagedProcess, NotReady, ProcessExited, free_port, register

log = logging.getLogger(__name__)

SUPERUSER = "airflow"
DRIVER = "postgresql+psycopg2"
#: Server settings of a throw-away test server (durability off) with room for several Airflow clusters.
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "400",
    "log_min_messages": "warning",
}
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class PostgresError(RuntimeError):
    """PostgreSQL is missing, or did not start; the message says what to do or carries its log."""


def find_bindir() -> Path:
    """
    Find the directory holding ``initdb``, ``postgres`` and ``pg_ctl``.

    ``PG_BINDIR``, else the newest ``/usr/lib/postgresql/<version>/bin`` (Debian), else the one of
    ``initdb`` on ``PATH``.
    """
    candidates = [os.environ["PG_BINDIR"]] if os.environ.get("PG_BINDIR") else []
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    for bindir in candidates:
        if all((Path(bindir) / tool).exists() for tool in ("initdb", "postgres", "pg_ctl")):
            return Path(bindir)
    raise PostgresError(
        "PostgreSQL server binaries (initdb, postgres, pg_ctl) not found: install Debian's `postgresql` "
        "package (scripts/test does it as root), or set PG_BINDIR to their directory"
    )


def _server_user() -> pwd.struct_passwd | None:
    """The account the server runs as when we are root (``postgres``); ``None``: run as ourselves."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresError(
            "running as root, but there is no `postgres` user to run initdb and postgres as (they refuse "
            "root): install Debian's `postgresql` package, which creates it"
        ) from None


class PostgresCluster(LoopbackServer):
    """
    A PostgreSQL server subprocess on loopback, password authentication only; a context manager.

    :param settings: server settings added to or replacing :data:`SETTINGS`.
    :param startup_timeout: seconds to wait for the server to accept a connection.
    """

    kind = "PostgreSQL"

    def __init__(self, *, settings: dict[str, str] | None = None, startup_timeout: float = 60.0) -> None:
        super().__init__()
        self._settings = {**SETTINGS, **(settings or {})}
        self._startup_timeout = startup_timeout
        self._bindir: Path | None = None
        self._user: pwd.struct_passwd | None = None
        #: The superuser's password: random per cluster, in every URL; no connection gets in without it.
        self.password = secrets.token_hex(24)

    # ------------------------------------------------------------------ properties
    @property
    def log_path(self) -> Path | None:
        return self._dir / "postgres.log" if self._dir is not None else None

    def url(self, database: str = "postgres") -> str:
        """SQLAlchemy URL of ``database`` on this server."""
        return f"{DRIVER}://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{database}"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        if self._process is not None:
            raise RuntimeError("PostgreSQL already started")
        self._bindir = find_bindir()
        self._user = _server_user()
        self._dir = Path(tempfile.mkdtemp(prefix="airflow-kafka-retry-pg-"))
        if self._user is not None:
            os.chown(self._dir, self._user.pw_uid, self._user.pw_gid)
        data = self._dir / "data"
        pwfile = self._dir / "pwfile"
        pwfile.touch(mode=0o600)
        pwfile.write_text(self.password + "\n")
        if self._user is not None:
            os.chown(pwfile, self._user.pw_uid, self._user.pw_gid)
        try:
            done = self._run(
                "initdb",
                "-D",
                str(data),
                "-U",
                SUPERUSER,
                "--auth=scram-sha-256",  # local (unix socket) and host lines alike
                f"--pwfile={pwfile}",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if done.returncode != 0:
            self.stop()
            raise PostgresError(f"initdb failed (exit {done.returncode}):\n{done.stdout[-3000:]}")
        self._port = free_port()
        options = [arg for k, v in self._settings.items() for arg in ("-c", f"{k}={v}")]
        if self.log_path is None:
            raise RuntimeError("the cluster's directory is made first")
        self._process = ManagedProcess(
            [str(self._bindir / "postgres"), "-D", str(data), "-p", str(self._port), "-k", str(self._dir)]
            + options,
            log_path=self.log_path,
            name="postgres",
            env=self._env(),
            cwd=self._dir,
            stop_signal=signal.SIGINT,  # a fast shutdown
            grace=15,
            preexec=self._become_server_user(),
        ).start()
        register(self)
        self._wait_ready()
        log.info("PostgreSQL pid %s on 127.0.0.1:%s (data %s)", self.pid, self._port, data)
        return self

    def _stop_process(self, process: ManagedProcess) -> None:
        """A fast shutdown (SIGINT), else ``pg_ctl stop -m immediate``, else SIGKILL (and the backends)."""
        data = self._dir / "data" if self._dir is not None else None

        def immediate() -> None:
            log.warning("PostgreSQL pid %s ignored a fast shutdown; stopping it immediately", self.pid)
            self._run("pg_ctl", "stop", "-D", str(data), "-m", "immediate", "-w")

        process.stop(escalate=immediate)

    # ------------------------------------------------------------------ databases
    def create_database(self, name: str, *, template: str | None = None) -> str:
        """
        ``CREATE DATABASE name [TEMPLATE template]``; returns its SQLAlchemy URL.

        A template must have no open connection while it is copied.
        """
        _check_name(name)
        if template is not None:
            _check_name(template)
        self.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """``DROP DATABASE IF EXISTS name WITH (FORCE)``; the name checked as in :meth:`create_database`."""
        _check_name(name)
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def execute(self, sql: str) -> None:
        """Run one statement outside a transaction (CREATE/DROP DATABASE) on the ``postgres`` database."""
        import psycopg2

        con = psycopg2.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, password=self.password, dbname="postgres"
        )
        try:
            con.autocommit = True
            with con.cursor() as cur:
                cur.execute(sql)
        finally:
            con.close()

    # ------------------------------------------------------------------ internals
    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update({"LC_ALL": "C", "LANG": "C", "HOME": str(self._dir)})
        return env

    def _become_server_user(self) -> Callable[[], None] | None:
        """
        The ``preexec_fn`` that switches to the server's user (``None`` when we are not root).

        Popen's own ``user=`` cannot be used: ``ManagedProcess`` sets PR_SET_PDEATHSIG after this runs,
        because a change of user clears it.
        """
        user = self._user
        if user is None:
            return None

        def preexec() -> None:  # pragma: no cover - runs in the forked child
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)

        return preexec

    def _run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(find_bindir() if self._bindir is None else self._bindir) + f"/{tool}", *args],
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=self._dir,
            env=self._env(),
            timeout=120,
            preexec_fn=self._become_server_user(),
        )

    def _log_tail(self, chars: int = 3000) -> str:
        path = self.log_path
        return path.read_text(errors="replace")[-chars:] if path is not None and path.exists() else ""

    def _wait_ready(self) -> None:
        """Until a session opens with this cluster's own password: only our server knows it."""
        import psycopg2

        if self._process is None:
            raise RuntimeError("PostgreSQL is not started")

        def accepts() -> bool:
            try:
                psycopg2.connect(
                    host="127.0.0.1",
                    port=self._port,
                    user=SUPERUSER,
                    password=self.password,
                    dbname="postgres",
                    connect_timeout=2,
                ).close()
                return True
            except psycopg2.OperationalError:
                return False

        try:
            self._process.wait_ready(accepts, timeout=self._startup_timeout, what="accept connections")
        except ProcessExited:
            tail = self._log_tail()
            self.stop()
            raise PostgresError(f"postgres exited during start-up; its log:\n{tail}") from None
        except NotReady:
            tail = self._log_tail()
            self.stop()
            raise PostgresError(
                f"postgres did not accept connections within {self._startup_timeout:.0f}s:\n{tail}"
            ) from None


def _check_name(name: str) -> None:
    """A database name goes into SQL between double quotes: only names that never need escaping pass."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"database name {name!r}: use lower-case letters, digits and _ (at most 63)")


def query(url: str, sql: str, *params: object) -> list[tuple]:
    """Rows of ``sql`` on the database at SQLAlchemy ``url``, with sqlite-style ``?`` placeholders."""
    import psycopg2

    dsn = re.sub(r"^postgresql\+\w+://", "postgresql://", url)
    con = psycopg2.connect(dsn)
    try:
        with con.cursor() as cur:
            cur.execute(sql.replace("%", "%%").replace("?", "%s"), params)
            rows = cur.fetchall() if cur.description is not None else []
        con.commit()
        return rows
    finally:
        con.close()
