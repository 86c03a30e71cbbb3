"""Fixtures of the Spring interop tests: the real Apache Kafka broker and the service's jars."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_kafka_retry.sandbox.kafka import QUICK_JIT, ApacheKafka

from tests.conftest import test_broker_kind
from tests.interop.spring_app import FLAVOURS, spring_jar


@pytest.fixture(scope="session")
def interop_bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """The suite's broker when it is real Kafka; under ``--embedded`` (Tansu) an Apache Kafka of its own:
    the interop tests are about Spring's clients on the real broker."""
    if test_broker_kind() != "tansu":
        yield request.getfixturevalue("kafka_bootstrap")
        return
    with ApacheKafka(jvm_options=QUICK_JIT) as kafka:
        yield kafka.bootstrap


@pytest.fixture(scope="session", params=list(FLAVOURS))
def flavour(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="session")
def jar(flavour: str) -> Path:
    """The service built for ``flavour``, once per session (not rebuilt when the jar is newer)."""
    return spring_jar(flavour)
