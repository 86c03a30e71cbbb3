"""Airflow hooks of the Kafka retry provider."""

#: The Kafka connection of every operator and trigger by default: the Kafka provider's
#: ``KafkaBaseHook.default_conn_name``, spelled out so a DAG file's parse does not import the Kafka client.
from __future__ import annotations

DEFAULT_KAFKA_CONN_ID = "kafka_default"
