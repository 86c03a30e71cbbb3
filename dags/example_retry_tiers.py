"""Every retry tier of ``topologies/orders.yaml`` as a scheduled DAG, built by ``build_retry_dags``.

This file defines one DAG per retry topic (``kafka_retry__orders-retry-1`` every 30 s, ``-retry-2``
every 60 s, ``-retry-3`` nightly in a window) and ``kafka_retry__orders-dlt``, which reports new
dead-lettered records. Copy it next to your DAGs with the topology and the handler package; set the
``kafka_default`` connection (type ``kafka``, extra = librdkafka configuration).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow_kafka_retry import build_retry_dags
from airflow_kafka_retry.notifications.dlt_log import DltLogNotifier

TOPOLOGY = Path(__file__).parent / "topologies" / "orders.yaml"

globals().update(build_retry_dags(
    TOPOLOGY,
    handler="handlers.orders:handle",
    value_deserializer="handlers.orders:decode",
    on_dlt=[DltLogNotifier()],  # or SlackNotifier(...), SmtpNotifier(...), any callable f(context)
    asset_server="kafka:9092",  # every topic is an asset kafka://kafka:9092/<topic>; runs emit record counts
    tier_overrides={
        # the last tier is drained at night only, in a window; a run stops when the window closes
        "orders-retry-3": {"schedule": "0 1 * * *", "window": "01:00-05:00", "timezone": "Europe/Berlin",
                           "max_run": "2h"},
    },
    default_args={"owner": "orders-team", "retries": 1, "retry_delay": timedelta(seconds=30)},
    tags=["orders"],
))
