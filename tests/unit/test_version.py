"""The version is written once, in pyproject.toml: ``__version__`` and the provider info read it installed."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import airflow_kafka_retry
from airflow_kafka_retry.get_provider_info import get_provider_info

REPO = Path(__file__).parents[2]


def test_version_is_the_installed_distributions(monkeypatch):
    asked = []

    def version(name: str) -> str:
        asked.append(name)
        return "9.8.7"

    monkeypatch.setattr(metadata, "version", version)
    assert airflow_kafka_retry.__version__ == "9.8.7"
    assert get_provider_info()["versions"] == ["9.8.7"]
    assert set(asked) == {"airflow-kafka-retry"}


def test_version_without_distribution_metadata(monkeypatch):
    def version(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", version)
    assert airflow_kafka_retry.__version__ == airflow_kafka_retry.UNKNOWN_VERSION


def test_the_installed_version_is_pyprojects():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "version" not in project.get("dynamic", [])
    assert airflow_kafka_retry.__version__ == metadata.version("airflow-kafka-retry") == project["version"]
