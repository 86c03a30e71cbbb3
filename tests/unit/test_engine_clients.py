"""Unit tests for engine.kafka.clients configuration builders (no client is constructed)."""

from __future__ import annotations

import logging
from types import MappingProxyType
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from airflow_kafka_retry.engine.kafka.clients import (
    CLIENT_LOGGER,
    PREFETCH_DEFAULTS,
    PRODUCER_MAX_MESSAGE_BYTES,
    KafkaConfigError,
    consumer_config,
    init_transactions,
    producer_config,
)

BOOTSTRAP = "broker-1:9092,broker-2:9092"
SECRET = "s3cr3t-never-log-me"

SECURITY = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "svc-orders",
    "sasl.password": SECRET,
    "ssl.ca.location": "/etc/ssl/ca.pem",
    "ssl.key.password": SECRET,
    "client.id": "airflow",
    "socket.timeout.ms": 30000,
    "message.max.bytes": 2_000_000,
}

PRODUCER_ONLY = {
    "acks": "1",
    "linger.ms": 5,
    "batch.size": 100_000,
    "batch.num.messages": 1000,
    "compression.type": "zstd",
    "compression.codec": "lz4",
    "transaction.timeout.ms": 60_000,
    "delivery.timeout.ms": 120_000,
    "message.timeout.ms": 120_000,
    "queue.buffering.max.ms": 10,
    "queue.buffering.max.messages": 100_000,
    "retries": 5,
    "enable.idempotence": False,
    "transactional.id": "user-txn",
}

CONSUMER_ONLY = {
    "auto.offset.reset": "latest",
    "session.timeout.ms": 6000,
    "max.poll.interval.ms": 600_000,
    "fetch.min.bytes": 1,
    "fetch.max.bytes": 50_000_000,
    "fetch.wait.max.ms": 250,
    "group.id": "user-group",
    "group.instance.id": "static-1",
    "heartbeat.interval.ms": 1000,
    "partition.assignment.strategy": "cooperative-sticky",
    "isolation.level": "read_uncommitted",
    "enable.auto.commit": True,
    "enable.auto.offset.store": True,
    "enable.partition.eof": False,
    "queued.min.messages": 1000,
    "queued.max.messages.kbytes": 1024,
}


def base(**extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": BOOTSTRAP, **extra}


# ----------------------------------------------------------------------------- consumer
def test_consumer_engine_settings() -> None:
    config = consumer_config(base(), "svc-orders-retry-0")
    assert config == {
        "bootstrap.servers": BOOTSTRAP,
        "logger": CLIENT_LOGGER,
        "group.id": "svc-orders-retry-0",
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        **PREFETCH_DEFAULTS,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "allow.auto.create.topics": False,
    }


def test_consumer_engine_owned_keys_override_user_values() -> None:
    user = base(
        **{
            "group.id": "user-group",
            "enable.auto.commit": True,
            "enable.auto.offset.store": True,
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": False,
            "allow.auto.create.topics": True,
        }
    )
    config = consumer_config(user, "tier-group")
    assert config["group.id"] == "tier-group"
    assert config["enable.auto.commit"] is False
    assert config["enable.auto.offset.store"] is False
    assert config["isolation.level"] == "read_committed"
    assert config["enable.partition.eof"] is True
    assert config["allow.auto.create.topics"] is False


def test_consumer_keeps_user_tuning() -> None:
    user = base(
        **{
            "auto.offset.reset": "latest",
            "session.timeout.ms": 6000,
            "max.poll.interval.ms": 600_000,
            "heartbeat.interval.ms": 1000,
            "fetch.min.bytes": 10,
            "queued.min.messages": 5,
        }
    )
    config = consumer_config(user, "g")
    for key in (
        "auto.offset.reset",
        "session.timeout.ms",
        "max.poll.interval.ms",
        "heartbeat.interval.ms",
        "fetch.min.bytes",
        "queued.min.messages",
    ):
        assert config[key] == user[key], key


def test_prefetch_is_bounded_by_default() -> None:
    """librdkafka's defaults queue 64 MB per consumer: memory would multiply with parallelism."""
    config = consumer_config(base(), "g")
    assert config["queued.max.messages.kbytes"] <= 8192
    assert config["fetch.max.bytes"] <= 8 * 1024 * 1024
    assert config["max.partition.fetch.bytes"] <= config["fetch.max.bytes"]
    assert config["fetch.queue.backoff.ms"] < 1000  # librdkafka's 1 s pause would stall a fast drain
    producer = producer_config(base(**PREFETCH_DEFAULTS), None)  # consumer keys never reach a producer
    assert not set(PREFETCH_DEFAULTS) & set(producer), producer


def test_prefetch_bounds_keep_user_values_and_fit_the_largest_message() -> None:
    user = consumer_config(base(**{"queued.max.messages.kbytes": 65536, "fetch.max.bytes": 52428800}), "g")
    assert user["queued.max.messages.kbytes"] == 65536
    assert user["fetch.max.bytes"] == 52428800
    big = consumer_config(base(**{"max.partition.fetch.bytes": 10_485_760}), "g")
    assert big["fetch.max.bytes"] == 10_485_760  # a fetch must hold one partition's share
    sized = consumer_config(base(**{"message.max.bytes": 20_000_000}), "g")
    assert sized["fetch.max.bytes"] == 20_000_000


def test_fetch_wait_max_ms_default_and_override() -> None:
    assert consumer_config(base(), "g")["fetch.wait.max.ms"] == 100
    assert consumer_config(base(**{"fetch.wait.max.ms": 500}), "g")["fetch.wait.max.ms"] == 500
    assert consumer_config(base(**{"fetch.wait.max.ms": 0}), "g")["fetch.wait.max.ms"] == 0
    assert "fetch.wait.max.ms" not in producer_config(base(**{"fetch.wait.max.ms": 500}), None)
    assert "fetch.wait.max.ms" not in producer_config(base(), None)


@pytest.mark.parametrize("key", sorted(PRODUCER_ONLY))
def test_producer_only_keys_are_not_given_to_consumers(key: str) -> None:
    config = consumer_config(base(**{key: PRODUCER_ONLY[key]}), "g")
    assert key not in config


def test_consumer_without_transactional_or_idempotence_keys() -> None:
    config = consumer_config(base(**PRODUCER_ONLY), "g")
    assert not set(PRODUCER_ONLY) & set(config)


# ----------------------------------------------------------------------------- producer
def test_producer_engine_settings() -> None:
    assert producer_config(base(), None) == {
        "bootstrap.servers": BOOTSTRAP,
        "logger": CLIENT_LOGGER,
        "enable.idempotence": True,
        "acks": "all",
        "allow.auto.create.topics": False,
        "message.max.bytes": PRODUCER_MAX_MESSAGE_BYTES,
    }


def test_producer_never_auto_creates_a_destination_and_keeps_a_user_size_limit() -> None:
    """Regression (faults case 3 and 10): a deleted destination is not re-created behind the topology's
    back, and a record larger than librdkafka's 1 MB default is routed; a user's own limit still wins."""
    config = producer_config(base(**{"allow.auto.create.topics": True, "message.max.bytes": 2_000_000}), None)
    assert config["allow.auto.create.topics"] is False
    assert config["message.max.bytes"] == 2_000_000


def test_producer_transactional_id() -> None:
    config = producer_config(base(), "airflow-kafka-retry.g.t.0")
    assert config["transactional.id"] == "airflow-kafka-retry.g.t.0"
    assert config["enable.idempotence"] is True
    assert config["acks"] == "all"


@pytest.mark.parametrize("txn", [None, ""])
def test_producer_user_transactional_id_is_dropped_when_idempotent(txn: str | None) -> None:
    config = producer_config(base(**{"transactional.id": "user-txn"}), txn)
    assert "transactional.id" not in config


def test_producer_engine_owned_keys_override_user_values() -> None:
    user = base(**{"enable.idempotence": False, "acks": "0", "transactional.id": "user-txn"})
    config = producer_config(user, "engine-txn")
    assert config["enable.idempotence"] is True
    assert config["acks"] == "all"
    assert config["transactional.id"] == "engine-txn"


def test_producer_keeps_user_tuning() -> None:
    owned = ("acks", "enable.idempotence", "transactional.id")
    tuning = {k: v for k, v in PRODUCER_ONLY.items() if k not in owned}
    config = producer_config(base(**tuning), None)
    for key, value in tuning.items():
        assert config[key] == value, key


@pytest.mark.parametrize("key", sorted(CONSUMER_ONLY))
def test_consumer_only_keys_are_not_given_to_producers(key: str) -> None:
    config = producer_config(base(**{key: CONSUMER_ONLY[key]}), "txn")
    assert key not in config


def test_producer_has_no_consumer_keys() -> None:
    config = producer_config(base(**CONSUMER_ONLY), "txn")
    assert not set(CONSUMER_ONLY) & set(config)
    assert "group.id" not in config


# ----------------------------------------------------------------------------- shared
@pytest.mark.parametrize(
    "build",
    [lambda c: consumer_config(c, "g"), lambda c: producer_config(c, "txn")],
    ids=["consumer", "producer"],
)
def test_security_and_common_keys_pass_through_to_both(build: Any) -> None:
    config = build(base(**SECURITY))
    for key, value in SECURITY.items():
        assert config[key] == value, key
    assert config["bootstrap.servers"] == BOOTSTRAP


@pytest.mark.parametrize(
    "build",
    [lambda c: consumer_config(c, "g"), lambda c: producer_config(c, None)],
    ids=["consumer", "producer"],
)
def test_missing_bootstrap_servers(build: Any) -> None:
    with pytest.raises(KafkaConfigError) as info:
        build(dict(SECURITY))
    assert "bootstrap.servers" in str(info.value)
    assert SECRET not in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "build",
    [lambda c: consumer_config(c, "g"), lambda c: producer_config(c, None)],
    ids=["consumer", "producer"],
)
def test_user_logger_is_kept(build: Any) -> None:
    mine = logging.getLogger("my.kafka")
    assert build(base(logger=mine))["logger"] is mine
    assert build(base())["logger"] is CLIENT_LOGGER


def test_input_is_not_mutated_and_any_mapping_works() -> None:
    user = base(**SECURITY, **{"enable.auto.commit": True, "acks": "1"})
    snapshot = dict(user)
    consumer = consumer_config(MappingProxyType(user), "g")
    producer_config(MappingProxyType(user), "txn")
    assert user == snapshot
    consumer["extra"] = 1
    assert "extra" not in producer_config(user, "txn")


def test_consumer_and_producer_configs_are_independent() -> None:
    user = base(**SECURITY, **CONSUMER_ONLY, **PRODUCER_ONLY)
    consumer = consumer_config(user, "g")
    producer = producer_config(user, "txn")
    # the only keys both get are the user's shared settings (and no topic auto-creation, for both)
    shared = set(consumer) & set(producer)
    assert shared == {"bootstrap.servers", "logger", "allow.auto.create.topics", *SECURITY}


class _Watermarks:
    """A consumer's ``get_watermark_offsets``: the log start of each partition, or an error."""

    def __init__(self, lows: dict[int, int | Exception]) -> None:
        self.lows = lows
        self.asked: list[int] = []

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        assert not cached, "the log start must come from the broker, not the client's cache"
        self.asked.append(tp.partition)
        low = self.lows[tp.partition]
        if isinstance(low, Exception):
            raise low
        return low, low + 10


def test_from_log_start_asks_the_broker_only_for_the_beginning() -> None:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from airflow_kafka_retry.engine.kafka.clients import from_log_start

    consumer = _Watermarks({0: 4, 1: 0, 2: 99})
    tps = [
        TopicPartition("t", 0, OFFSET_BEGINNING),
        TopicPartition("t", 1, OFFSET_BEGINNING),
        TopicPartition("t", 2, 7),
    ]
    resolved = from_log_start(consumer, tps)  # type: ignore[arg-type]
    assert [(tp.partition, tp.offset) for tp in resolved] == [(0, 4), (1, 0), (2, 7)]
    assert consumer.asked == [0, 1]


def test_from_log_start_leaves_the_beginning_to_librdkafka_once_the_broker_does_not_answer() -> None:
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

    from airflow_kafka_retry.engine.kafka.clients import from_log_start

    unknown = KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
    consumer = _Watermarks({0: 3, 1: unknown, 2: 5})
    tps = [TopicPartition("t", p, OFFSET_BEGINNING) for p in range(3)]
    resolved = from_log_start(consumer, tps)  # type: ignore[arg-type]
    # the partition after the failure is not asked: a broker that does not answer is not asked again
    assert [(tp.partition, tp.offset) for tp in resolved] == [
        (0, 3),
        (1, OFFSET_BEGINNING),
        (2, OFFSET_BEGINNING),
    ]
    assert consumer.asked == [0, 1]


class _TxnProducer:
    """Records the calls init_transactions makes; list_topics fails when ``metadata_error`` is set."""

    def __init__(self, metadata_error: bool = False) -> None:
        self.calls: list[tuple[str, object]] = []
        self.metadata_error = metadata_error

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> None:
        self.calls.append(("list_topics", topic))
        if self.metadata_error:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    def init_transactions(self, timeout: float) -> None:
        self.calls.append(("init_transactions", None))


def test_init_transactions_asks_a_topics_metadata_first_so_the_coordinator_query_needs_no_retry() -> None:
    producer = _TxnProducer()
    init_transactions(producer, 10.0, topic="orders-retry-1")  # type: ignore[arg-type]
    assert producer.calls == [("list_topics", "orders-retry-1"), ("init_transactions", None)]
    without = _TxnProducer()
    init_transactions(without, 10.0)  # type: ignore[arg-type]
    assert without.calls == [("init_transactions", None)], "no topic: no metadata request of every topic"


def test_init_transactions_goes_on_when_the_metadata_request_fails() -> None:
    producer = _TxnProducer(metadata_error=True)
    init_transactions(producer, 10.0, topic="orders-dlt")  # type: ignore[arg-type]
    assert producer.calls == [("list_topics", "orders-dlt"), ("init_transactions", None)]
