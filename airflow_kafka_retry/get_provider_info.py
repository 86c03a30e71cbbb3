"""Provider metadata, registered through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    from airflow_kafka_retry import __version__
    from airflow_kafka_retry.plugin.settings import provider_config

    return {
        "package-name": "airflow-kafka-retry",
        "name": "Kafka Retry Tiers",
        "description": (
            "Kafka non-blocking retry tiers and dead-letter topics as scheduled Airflow pipelines, "
            "compatible with Spring for Apache Kafka's retry topics."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Kafka Retry Tiers",
                "external-doc-url": "https://github.com/airflow-kafka-retry/airflow-kafka-retry",
                "tags": ["service"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Kafka Retry Tiers",
                "python-modules": [
                    "airflow_kafka_retry.hooks.kafka_retry",
                    "airflow_kafka_retry.hooks.spark_submit",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": "Kafka Retry Tiers",
                "python-modules": [
                    "airflow_kafka_retry.operators.spark_reprocess",
                    "airflow_kafka_retry.operators.reprocess",
                    "airflow_kafka_retry.operators.dlt_watch",
                    "airflow_kafka_retry.operators.ensure_topics",
                    "airflow_kafka_retry.operators.replay_dlt",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "Kafka Retry Tiers",
                "python-modules": ["airflow_kafka_retry.sensors.tier_due"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Kafka Retry Tiers",
                "python-modules": ["airflow_kafka_retry.triggers.tier_due"],
            }
        ],
        "plugins": [
            {
                "name": "kafka_retry_tiers",
                "plugin-class": "airflow_kafka_retry.plugin.plugin.RetryTiersPlugin",
            }
        ],
        "config": provider_config(),
        "notifications": ["airflow_kafka_retry.notifications.dlt_log.DltLogNotifier"],
    }
