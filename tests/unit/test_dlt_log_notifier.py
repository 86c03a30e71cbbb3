"""``DltLogNotifier``: its templated message, level, and use through ``notify_dlt``."""

from __future__ import annotations

import pytest
from airflow.sdk import BaseNotifier
from structlog.testing import capture_logs

from airflow_kafka_retry.notifications.dispatch import notify_dlt
from airflow_kafka_retry.notifications.dlt_log import DltLogNotifier


class TI:
    dag_id, task_id = "kafka_retry__orders-retry-1", "reprocess"


def run_summary(dlt: int, dropped: int = 0) -> dict:
    return {
        "topic": "orders-retry-1",
        "totals": {
            "dlt_topics": {"orders-dlt": dlt} if dlt else {},
            "dead_lettered": {"myapp.Invalid": dlt + dropped},
            "dropped": dropped,
        },
    }


def logged(notifier, summary: dict) -> list[dict]:
    with capture_logs() as logs:
        assert notify_dlt([notifier], {"ti": TI(), "run_id": "scheduled__1"}, summary) == 1
    return logs


def test_default_message_names_counts_per_dlt_and_exception_and_the_run():
    [entry] = logged(DltLogNotifier(), run_summary(3, dropped=1))
    assert entry["log_level"] == "warning"
    assert entry["event"] == (
        'Kafka retry: 3 record(s) reached a DLT {"orders-dlt": 3} from orders-retry-1, '
        '1 dropped; by exception: {"myapp.Invalid": 4} (DAG kafka_retry__orders-retry-1, '
        "task reprocess, run scheduled__1)"
    )


def test_default_message_reads_a_dlt_watch_summary_too():
    watch = {
        "kind": "dlt_watch",
        "totals": {
            "new_records": 3,
            "dead_lettered": {"myapp.Invalid": 3},
            "causes": {},
            "dlt_topics": {"orders-dlt": 2, "orders-validation-dlt": 1},
        },
    }
    [entry] = logged(DltLogNotifier(), watch)
    assert entry["event"] == (
        'Kafka retry: 3 record(s) reached a DLT {"orders-dlt": 2, "orders-validation-dlt": 1}; '
        'by exception: {"myapp.Invalid": 3} (DAG kafka_retry__orders-retry-1, task reprocess, '
        "run scheduled__1)"
    )


def test_custom_message_and_level():
    notifier = DltLogNotifier(
        message="{{ kafka_retry_summary.totals.dlt_topics['orders-dlt'] }} in {{ ti.dag_id }}", level="ERROR"
    )
    [entry] = logged(notifier, run_summary(2))
    assert (entry["log_level"], entry["event"]) == ("error", "2 in kafka_retry__orders-retry-1")


def test_every_call_renders_from_the_template_again():
    notifier = DltLogNotifier(message="{{ kafka_retry_summary.totals.dlt_topics['orders-dlt'] }}")
    assert logged(notifier, run_summary(2))[0]["event"] == "2"
    assert logged(notifier, run_summary(5))[0]["event"] == "5"


def test_is_a_templated_base_notifier():
    assert issubclass(DltLogNotifier, BaseNotifier)
    assert DltLogNotifier.template_fields == ("message",)


@pytest.mark.parametrize("level", ["loud", 3, None])
def test_unknown_level_is_refused(level):
    with pytest.raises(ValueError, match="level must be one of debug, info, warning, error, critical"):
        DltLogNotifier(level=level)
