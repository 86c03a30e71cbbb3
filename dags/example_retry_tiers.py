"""
The retry path of ``topologies/orders.yaml`` as one event-driven DAG, built by ``build_retry_dags``.

This file defines the DAG ``kafka_retry__orders``: a task per retry tier (``retry_1``, ``retry_2``,
``retry_3``; ``retry_3`` only in a night window), ``watch_dlt``, which reports new dead-lettered
records as they arrive, and ``ensure_topics``, which creates the missing topics. One watcher in the
triggerer watches every tier: a run drains the tiers whose records are due and skips the others
(and the DAG runs weekly as a safety sweep). Copy it next to your DAGs with the topology and the
handler package; set the ``kafka_default`` connection (type ``kafka``, extra = librdkafka
configuration); run a triggerer. ``trigger="schedule"`` (a DAG per tier, ``layout="tiers"``) polls instead.
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
            # the last tier is drained at night only, in a window: the watcher holds its due records until
            # the window opens, a run stops when it closes
            "orders-retry-3": {
                "window": "01:00-05:00",
                "timezone": "Europe/Berlin",
                "max_run": "2h",
            },
        },
        default_args={"owner": "orders-team", "retries": 1, "retry_delay": timedelta(seconds=30)},
        tags=["orders"],
    )
)
