"""
One retry tier composed by hand from the provider's operators, and a DAG scheduled on the DLT's asset.

What ``build_retry_dags`` does for every tier, written out for ``orders-retry-1``: create missing
topics, wait (deferred, in the triggerer) until a record is due, drain the due records in the
worker. ``orders_dlt_follow_up`` runs whenever a reprocess run dead-letters records: it is
scheduled on the DLT topic's asset, and the asset event's ``extra`` carries the record counts.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_kafka_retry.assets import topic_asset
from airflow_kafka_retry.notifications.dlt_log import DltLogNotifier
from airflow_kafka_retry.operators.ensure_topics import EnsureRetryTopicsOperator
from airflow_kafka_retry.operators.reprocess import ReprocessTierOperator
from airflow_kafka_retry.sensors.tier_due import RetryTierDueSensor

TOPOLOGY = str(Path(__file__).parent / "topologies" / "orders.yaml")
KAFKA_SERVER = "kafka:9092"  # the server part of the topics' asset URIs (kafka://kafka:9092/orders-dlt)
EVERY = timedelta(seconds=30)  # the tier's delay

with DAG(
    dag_id="orders_retry_1_hand_composed",
    schedule=EVERY,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # two runs of one tier would drain the same partitions
    tags=["kafka-retry", "orders"],
):
    ensure = EnsureRetryTopicsOperator(task_id="ensure_topics", topology=TOPOLOGY, on_mismatch="warn")
    wait = RetryTierDueSensor(task_id="wait_for_due", topology=TOPOLOGY, tier=1, max_wait=EVERY)
    reprocess = ReprocessTierOperator(
        task_id="reprocess",
        topology=TOPOLOGY,
        tier=1,
        handler="handlers.orders:handle",
        value_deserializer="handlers.orders:decode",
        options={"batch_size": 100, "chunk_size": 1000},
        cutoff="{{ (macros.time.time() * 1000) | int }}",  # what is due when the task starts
        on_dlt=[DltLogNotifier()],
        asset_server=KAFKA_SERVER,
    )
    ensure >> wait >> reprocess

with DAG(
    dag_id="orders_dlt_follow_up",
    schedule=[topic_asset(KAFKA_SERVER, "orders-dlt")],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["kafka-retry", "orders"],
):

    @task
    def report(triggering_asset_events=None):
        """The counts the reprocess run put on the DLT asset event (never payloads)."""
        for asset, events in (triggering_asset_events or {}).items():
            for event in events:
                print(f"{asset.uri}: {event.extra}")

    report()
