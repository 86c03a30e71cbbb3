"""
What a run under ``ordering: key`` refuses at its start, each refusal naming the field or topic and the fix.

Transactions (the hold, the state and the routed records commit together); every tier, DLT, the hold and the
state topic with the main topic's partition count; the state topic compacted; the hold topic present while
the state names held records.

The partition counts are asked at every run, of the run's own consumer, for the topics its drain did not
count already: a hold topic deleted by hand is named at the next run's start. The state topic's cleanup
policy is asked once per :data:`COMPACTED_TTL_S` per process (through the process's admin client), and
again after a run of its keeper failed (:func:`forget_compacted`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource

from airflow_kafka_retry.engine.kafka.clients import (
    KafkaConfigError,
    TopicsMissing,
    admin_config,
    partition_counts,
)
from airflow_kafka_retry.engine.kafka.metadata_client import metadata_client
from airflow_kafka_retry.engine.kafka.process_clients import config_key

if TYPE_CHECKING:
    from confluent_kafka import Consumer

    from airflow_kafka_retry.engine.drain.lanes import LaneRun
    from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
    from airflow_kafka_retry.policy.topology.model import Topology


class OrderingRefused(KafkaConfigError):
    """A run under ``ordering: key`` cannot start; the message names the field or topic and the fix."""

    transient = False


def require_transactions(run: LaneRun) -> None:
    if not run.options.transactional:
        raise OrderingRefused(
            f"ordering: key needs transactional=True (topology {run.topology.topic!r}): the held records, "
            f"the order state and the routed records of {run.tier.topic}[{run.partition}] commit in one "
            "transaction; run it with transactional=True (the default)"
        )


def ordering_topics(topology: Topology) -> tuple[str, str]:
    """The hold topic and the state topic of a topology under ``ordering: key``."""
    hold, state = topology.hold_topic, topology.order_state_topic
    if hold is None or state is None:
        raise OrderingRefused(f"topology {topology.topic!r}: the ordering lanes need ordering: key")
    return hold, state


def require_partitions(
    consumer: Consumer,
    run: LaneRun,
    topics: list[str],
    timeout_s: float,
    what: Mapping[str, str],
    known: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """
    The partition count of each of ``topics``; each must have the main topic's.

    ``what`` says, for a topic the run may find missing, what to do about it; ``known``: counts the run read
    already (its drain's), not asked again.
    """
    main = run.topology.topic
    counts: dict[str, int] = {t: n for t, n in (known or {}).items() if t in {main, *topics}}
    for topic in [main, *topics]:
        if topic in counts:
            continue
        try:
            with run.deadlines.call("list_topics", timeout_s, "any broker (metadata)"):
                counts.update(partition_counts(consumer, [topic], timeout_s, kafka_config=run.kafka_config))
        except TopicsMissing as exc:
            if topic in what:
                raise OrderingRefused(
                    f"ordering: key: topic {topic!r} does not exist: {what[topic]}"
                ) from exc
            raise
        if counts[topic] != counts[main]:
            raise OrderingRefused(
                f"ordering: key: topic {topic!r} has {counts[topic]} partitions, the main topic {main!r} has "
                f"{counts[main]}: a key's records, marks and state must stay on one partition number; "
                f"recreate {topic!r} with {counts[main]} partitions"
            )
    return counts


#: Seconds a process trusts a state topic's ``cleanup.policy=compact`` it read (a run that fails forgets it).
COMPACTED_TTL_S = 300.0
_COMPACTED: dict[tuple[Hashable, str], float] = {}  # (cluster config, topic) -> when it was read (monotonic)
_COMPACTED_LOCK = threading.Lock()


def require_compacted(
    kafka_config: Mapping[str, Any], topic: str, deadlines: CallDeadlines, timeout_s: float
) -> None:
    """``topic`` (the state topic) has ``cleanup.policy=compact``: asked within ``timeout_s``, or known."""
    key = (config_key(admin_config(kafka_config)), topic)
    with _COMPACTED_LOCK:
        read_at = _COMPACTED.get(key)
    if read_at is not None and time.monotonic() - read_at < COMPACTED_TTL_S:
        return
    _ask_compacted(kafka_config, topic, deadlines, timeout_s)
    with _COMPACTED_LOCK:
        _COMPACTED[key] = time.monotonic()


def forget_compacted(kafka_config: Mapping[str, Any], topic: str) -> None:
    """Ask ``topic``'s cleanup policy again at the next run (a run of its keeper failed)."""
    with _COMPACTED_LOCK:
        _COMPACTED.pop((config_key(admin_config(kafka_config)), topic), None)


def _ask_compacted(
    kafka_config: Mapping[str, Any], topic: str, deadlines: CallDeadlines, timeout_s: float
) -> None:
    admin = metadata_client(kafka_config)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        with deadlines.call("describe_configs", timeout_s, "any broker (topic configs)"):
            future = admin.describe_configs([resource], request_timeout=timeout_s)[resource]
            entries = future.result(timeout_s)
    except KafkaException as exc:
        raise KafkaConfigError(
            f"ordering: key: cannot read the configuration of topic {topic!r}: {exc.args[0]}"
        ) from exc
    policy = str(getattr(entries.get("cleanup.policy"), "value", "") or "")
    if "compact" not in {p.strip() for p in policy.split(",")}:
        raise OrderingRefused(
            f"ordering: key: the order state topic {topic!r} has cleanup.policy={policy or '?'}, it needs "
            "compact (it keeps one entry per blocked key); fix it with: kafka-configs --bootstrap-server "
            f"HOST:PORT --alter --entity-type topics --entity-name {topic} "
            "--add-config cleanup.policy=compact"
        )


def hold_missing(hold: str, held: int) -> str:
    """What to do about a hold topic that is gone."""
    if not held:
        return "create it (cleanup.policy=delete, retention.ms=-1) with the main topic's partition count"
    return (
        f"the order state names {held} held record(s) there: restore the topic, or release their keys "
        "(airflow-kafka-retry ordering release)"
    )
