"""The PostgreSQL harness: a private server as the ``postgres`` user, databases from a migrated
Airflow template, and no server left behind, not even when the process that started it is killed."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_kafka_retry.sandbox.postgres import PostgresCluster, query

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

_STARTER = """
import sys, time
from airflow_kafka_retry.sandbox.postgres import PostgresCluster
pg = PostgresCluster().start()
print(pg.pid, pg.log_path.parent, flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_server_runs_queries_and_stops_without_a_trace():
    with PostgresCluster() as pg:
        pid, data = pg.pid, pg.log_path.parent
        if os.geteuid() == 0:  # initdb and postgres refuse root: they run as the package's user
            assert Path(f"/proc/{pid}").stat().st_uid != 0
        url = pg.create_database("harness_a")
        assert url.startswith("postgresql+psycopg2://")
        assert url.endswith("/harness_a")
        query(url, "CREATE TABLE t (k text, v int)")
        query(url, "INSERT INTO t VALUES (?, ?), ('100%', 2)", "a", 1)
        copy = pg.create_database("harness_b", template="harness_a")
        assert query(copy, "SELECT k, v FROM t WHERE v >= ? ORDER BY v", 1) == [("a", 1), ("100%", 2)]
        pg.drop_database("harness_b")
        assert query(pg.url(), "SELECT count(*) FROM pg_database WHERE datname = ?", "harness_b") == [(0,)]
        with pytest.raises(ValueError, match="database name 'Bad-Name'"):
            pg.create_database("Bad-Name")
    assert not _alive(pid)
    assert not data.exists()


def test_a_connection_without_the_password_is_refused():
    import psycopg2

    with PostgresCluster() as pg:
        socket_dir = pg.log_path.parent
        if os.geteuid() != 0:  # as root the folder belongs to the server's user, and root reads any folder
            assert stat.S_IMODE(socket_dir.stat().st_mode) == 0o700
        for host in ("127.0.0.1", str(socket_dir)):  # loopback TCP, and the unix socket
            with pytest.raises(psycopg2.OperationalError, match="password"):
                psycopg2.connect(
                    host=host, port=pg.port, user="airflow", dbname="postgres", connect_timeout=5
                )
            with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
                psycopg2.connect(
                    host=host,
                    port=pg.port,
                    user="airflow",
                    password="guess",
                    dbname="postgres",
                    connect_timeout=5,
                )
        # the URL carries the per-cluster secret: every user of it still connects
        assert query(pg.url(), "SELECT current_user") == [("airflow",)]
        other = PostgresCluster()
        assert other.password != pg.password, "a random secret per cluster"
        # a hostile name never reaches SQL
        hostile = 'x" WITH (FORCE); DROP DATABASE "postgres'
        with pytest.raises(ValueError, match="database name"):
            pg.drop_database(hostile)
        assert query(pg.url(), "SELECT count(*) FROM pg_database WHERE datname = ?", "postgres") == [(1,)]


def test_server_dies_with_the_process_that_started_it():
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    data = None
    try:
        pid_text, data = starter.stdout.readline().split()
        pid = int(pid_text)
        assert _alive(pid)
        starter.send_signal(signal.SIGKILL)  # no atexit, no finally: only PR_SET_PDEATHSIG is left
        starter.wait(10)
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(pid), f"postgres pid {pid} outlived the process that started it"
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait(10)
        if data:
            shutil.rmtree(data, ignore_errors=True)  # the killed starter could not remove it


def test_airflow_databases_are_copies_of_one_migrated_template(airflow_databases):
    first, second = airflow_databases.new(), airflow_databases.new()
    assert first != second
    for url in (first, second):
        assert query(url, "SELECT count(*) FROM alembic_version") == [(1,)]
        assert query(url, "SELECT count(*) FROM dag") == [(0,)]
