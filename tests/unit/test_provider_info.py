"""The provider registers through the ``apache_airflow_provider`` entry point, and every module it lists imports."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from airflow_kafka_retry import __version__


def test_entry_point_returns_the_provider_info():
    [entry] = [e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("airflow_kafka_retry")]
    info = entry.load()()
    assert info["package-name"] == "airflow-kafka-retry"
    assert info["versions"] == [__version__]
    modules = [m for kind in ("hooks", "operators") for item in info[kind] for m in item["python-modules"]]
    assert modules
    for module in modules:
        importlib.import_module(module)


def test_notifications_are_registered_by_class_path_and_import():
    from airflow.sdk import BaseNotifier

    from airflow_kafka_retry.get_provider_info import get_provider_info

    paths = get_provider_info()["notifications"]
    assert "airflow_kafka_retry.notifications.dlt_log.DltLogNotifier" in paths
    for path in paths:
        module, _, name = path.rpartition(".")
        assert issubclass(getattr(importlib.import_module(module), name), BaseNotifier)
