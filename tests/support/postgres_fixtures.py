"""PostgreSQL fixtures (a pytest plugin, loaded by tests/conftest.py).

* ``postgres`` -- one private PostgreSQL server per test session (Debian's ``postgresql`` package,
  ``airflow_kafka_retry/sandbox/postgres.py``), stopped at the end of the session.
* ``airflow_databases`` -- Airflow metadata databases on it; ``airflow db migrate`` runs once, into a
  template, on first use.
* ``airflow_database_url`` -- a fresh migrated metadata DB for one test (pass it to ``airflow_env(...,
  database_url=...)`` and ``AirflowCluster(..., migrated=True)``), dropped after the test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_kafka_retry.sandbox.postgres import PostgresCluster
from testkit.airflow_postgres import AirflowDatabases


def pytest_report_header(config: pytest.Config) -> str:
    return "postgresql: a private server for Airflow's metadata DB (started by the first test that needs it)"


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    with PostgresCluster() as pg:
        yield pg


@pytest.fixture(scope="session")
def airflow_databases(postgres: PostgresCluster) -> AirflowDatabases:
    return AirflowDatabases(postgres)


@pytest.fixture
def airflow_database_url(airflow_databases: AirflowDatabases) -> Iterator[str]:
    url = airflow_databases.new()
    yield url
    airflow_databases.pg.drop_database(url.rsplit("/", 1)[1])
