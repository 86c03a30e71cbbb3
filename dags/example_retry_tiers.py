"""
Every retry tier of ``topologies/orders.yaml`` as an event-driven DAG, built by ``build_retry_dags``.

This file defines one DAG per retry topic (``kafka_retry__orders-retry-1``, ``-2``, ``-3``), each run
by the triggerer when its records are due (and hourly as a safety sweep; ``-retry-3`` only in a
night window), ``kafka_retry__orders-dlt``, which reports new dead-lettered records as they arrive,
and ``kafka_retry__orders__ensure_topics``, which creates the missing topics once. Copy it next to
your DAGs with the topology and the handler package; set the ``kafka_default`` connection (type
``kafka``, extra = librdkafka configuration); run a triggerer. ``trigger="schedule"`` polls instead.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow_kafka_retry import build_retry_dags
from airflow_kafka_retry.notifications.dlt_log import DltLogNotifier

TOPOLOGY = Path(__file__).parent / "topologies" / "orders.yaml"

globals().update(
    build_retry_dags(
        TOPOLOGY,
        handler="handlers.orders:handle",
        value_deserializer="handlers.orders:decode",
        on_dlt=[DltLogNotifier()],  # or SlackNotifier(...), SmtpNotifier(...), any callable f(context)
        # every topic is an asset kafka://kafka:9092/<topic>; runs emit record counts
        asset_server="kafka:9092",
        tier_overrides={
            # the last tier is drained at night only, in a window: its trigger holds due records until the
            # window opens, a run stops when it closes; its safety sweep runs at 01:00
            "orders-retry-3": {
                "schedule": "0 1 * * *",
                "window": "01:00-05:00",
                "timezone": "Europe/Berlin",
                "max_run": "2h",
            },
        },
        default_args={"owner": "orders-team", "retries": 1, "retry_delay": timedelta(seconds=30)},
        tags=["orders"],
    )
)
