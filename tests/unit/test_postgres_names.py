"""The PostgreSQL launcher puts no unchecked name into SQL (issue 38 item 7)."""

from __future__ import annotations

import pytest

from airflow_kafka_retry.sandbox.postgres import PostgresCluster


@pytest.mark.parametrize("name", ['x" WITH (FORCE); DROP DATABASE "postgres', "Bad-Name", "", "a" * 64])
def test_drop_database_rejects_a_name_it_would_have_to_quote(name):
    pg = PostgresCluster()  # not started: a name that passed would fail later, with another error
    with pytest.raises(ValueError, match="database name"):
        pg.drop_database(name)
    with pytest.raises(ValueError, match="database name"):
        pg.create_database(name)
