"""The "Retry tiers" view in the Airflow UI (plugin class in :mod:`airflow_kafka_retry.plugin.plugin`)."""
