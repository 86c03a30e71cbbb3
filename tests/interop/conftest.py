"""Fixtures of the Spring interop tests: the real Apache Kafka broker and the service's jars."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_kafka_retry.testing.kafka import ApacheKafka
from tests.interop.spring_app import FLAVOURS, spring_jar


@pytest.fixture(scope="session")
def interop_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Apache Kafka broker: Spring's clients need the real group and admin protocols."""
    with ApacheKafka() as kafka:
        yield kafka.bootstrap


@pytest.fixture(scope="session", params=list(FLAVOURS))
def flavour(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="session")
def jars() -> dict[str, Path]:
    """Both builds, made once per session (skipped when a jar is newer than the sources)."""
    return {name: spring_jar(name) for name in FLAVOURS}


@pytest.fixture(scope="session")
def airflow_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated Airflow metadata database, copied by each scenario (migrating takes minutes when loaded)."""
    from tests.interop.scenario import AirflowDags

    return AirflowDags.migrated_db(tmp_path_factory.mktemp("airflow-template"))
