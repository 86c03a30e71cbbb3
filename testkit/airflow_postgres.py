"""
Airflow metadata databases on a :class:`~airflow_kafka_retry.sandbox.postgres.PostgresCluster`.

``airflow db migrate`` takes tens of seconds, so it runs once per server, into a template database;
each Airflow deployment then gets a fresh copy of it (``CREATE DATABASE ... TEMPLATE``, a file copy
that takes a fraction of a second)::

    with PostgresCluster() as pg:
        dbs = AirflowDatabases(pg)
        env = airflow_env(home, database_url=dbs.new())
        with AirflowCluster(home, env, migrated=True) as cluster:
            ...
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_kafka_retry.sandbox.postgres import PostgresCluster

TEMPLATE = "airflow_template"


class AirflowDatabases:
    """Fresh, migrated Airflow metadata databases on ``pg``; the template is migrated on first use."""

    def __init__(self, pg: PostgresCluster) -> None:
        self.pg = pg
        self._migrated = False
        self._lock = threading.Lock()

    def new(self, name: str | None = None) -> str:
        """SQLAlchemy URL of a new database holding Airflow's migrated schema."""
        with self._lock:
            if not self._migrated:
                self._migrate_template()
                self._migrated = True
            return self.pg.create_database(name or f"airflow_{uuid.uuid4().hex[:12]}", template=TEMPLATE)

    def _migrate_template(self) -> None:
        from airflow_kafka_retry.sandbox.airflow_stack import airflow_env

        url = self.pg.create_database(TEMPLATE)
        with tempfile.TemporaryDirectory(prefix="airflow-kafka-retry-migrate-") as home:
            env = airflow_env(Path(home), database_url=url)
            done = subprocess.run(
                [str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
                check=False,
                env=env,
                cwd=home,
                capture_output=True,
                text=True,
                timeout=600,
            )
        if done.returncode != 0:
            raise RuntimeError(f"airflow db migrate on {url} failed:\n{done.stderr[-3000:]}")
