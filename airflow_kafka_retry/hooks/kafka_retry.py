"""``KafkaRetryHook``: the librdkafka configuration of a Kafka connection, for the retry engines."""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook


class KafkaRetryHook(KafkaBaseHook):
    """
    Reads a Kafka connection (type ``kafka``, as the Apache Kafka provider defines it).

    The connection's extra is the librdkafka configuration itself, e.g.
    ``{"bootstrap.servers": "kafka:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
    "sasl.username": "svc", "sasl.password": "..."}``. It is built exactly as the Kafka provider
    builds it (allow-listed callbacks resolved, managed-Kafka token callbacks added) and is never
    logged: it may hold credentials.

    :param kafka_config_id: the Kafka connection id, ``kafka_default`` by default.
    """

    def __init__(self, kafka_config_id: str = KafkaBaseHook.default_conn_name) -> None:
        super().__init__(kafka_config_id=kafka_config_id)

    def kafka_config(self) -> dict[str, Any]:
        """The librdkafka configuration dict of the connection (a fresh copy on every call)."""
        return dict(self._build_config())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kafka_config_id={self.kafka_config_id!r})"
