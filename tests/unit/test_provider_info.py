"""The provider registers through the ``apache_airflow_provider`` entry point, and every module it lists
imports."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from airflow_kafka_retry import __version__


def test_entry_point_returns_the_provider_info():
    [entry] = [
        e for e in entry_points(group="apache_airflow_provider") if e.value.startswith("airflow_kafka_retry")
    ]
    info = entry.load()()
    assert info["package-name"] == "airflow-kafka-retry"
    assert info["versions"] == [__version__]
    kinds = [kind for kind in ("hooks", "operators", "sensors", "triggers") if kind in info]
    modules = [m for kind in kinds for item in info[kind] for m in item["python-modules"]]
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


def test_sensor_trigger_and_dlt_watch_are_registered():
    info = entry_points(group="apache_airflow_provider")
    [entry] = [e for e in info if e.value.startswith("airflow_kafka_retry")]
    listed = {
        kind: [m for item in entry.load()().get(kind, []) for m in item["python-modules"]]
        for kind in ("operators", "sensors", "triggers")
    }
    assert "airflow_kafka_retry.sensors.tier_due" in listed["sensors"]
    assert "airflow_kafka_retry.triggers.tier_due" in listed["triggers"]
    assert "airflow_kafka_retry.operators.dlt_watch" in listed["operators"]
