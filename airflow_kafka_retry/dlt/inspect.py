"""
``dlt inspect``: what a DLT, any other DLQ or the parking topic holds, grouped, read without committing.

Records of every dead-letter family are read (Spring's two spellings, Kafka Connect, the share-group DLQ,
Airflow's headerless ones): see :mod:`~airflow_kafka_retry.policy.dead_letters.families`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.dlt.groups import BUCKETS, Bucket, group_records
from airflow_kafka_retry.dlt.records import DltRecord
from airflow_kafka_retry.dlt.replay_targets import source_topic
from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError
from airflow_kafka_retry.engine.kafka.reading import TopicReader
from airflow_kafka_retry.engine.logs.replay_log import log_topic, read_log
from airflow_kafka_retry.engine.scans.order_state import read_order_state
from airflow_kafka_retry.policy.dead_letters.families import FAMILIES, Family
from airflow_kafka_retry.policy.errors import ReplayError

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology


def inspect_dlt(
    topology: Topology,
    kafka_config: Mapping[str, Any],
    *,
    dlt: str | None = None,
    bucket: Bucket = "hour",
    samples: int = 3,
    show_values: bool = False,
    family: str | None = None,
) -> dict[str, Any]:
    """
    Group the records of ``dlt``: the topology's DLT by default, ``parking``, or any DLQ by name.

    Returns plain data: the topic, record and replayed counts per partition and in total, the records
    per family, the groups (see :class:`~airflow_kafka_retry.dlt.groups.Group`) and the replays in its
    replay log (an unfinished one was stopped part way: rerun it with its id). Payloads only with
    ``show_values``. Under ``ordering: key`` also ``blocked_keys``: per partition the keys blocked, the
    records they hold and the oldest block (``engine/scans/order_state.py``; never a key).

    :param family: the family of records whose headers name none (``airflow``: Airflow's Kafka provider
        writes no header; ``kafka-connect``: a Connect DLQ without context headers); ``auto``: such
        records are ``unknown``; None (default): the family the topology's ``dead_letter_queues`` entry
        of ``dlt`` names, else ``auto``. The report's ``assumed_family`` says which was used.
    """
    if bucket not in BUCKETS:
        raise ReplayError(f"--by {bucket!r}: use one of {', '.join(BUCKETS)}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        raise ReplayError(f"--samples {samples!r} must be a whole number >= 0")
    topic = source_topic(topology, dlt)
    assume = topology.queue_family(topic) if family is None else _family(family)
    replay_log_topic = log_topic(topic)
    with TopicReader(kafka_config) as reader:
        try:
            partitions = reader.partitions(topic)
        except KafkaConfigError as exc:
            raise ReplayError(f"--dlt {topic}: {exc}") from None
        replay_log = read_log(reader, replay_log_topic)
        replayed = set(replay_log.moved)
        per_partition: dict[int, int] = {}

        def records() -> Any:
            for partition in range(partitions):
                per_partition[partition] = 0
                for message in reader.read(topic, partition):
                    per_partition[partition] += 1
                    yield DltRecord.from_message(message)

        groups = group_records(
            records(),
            bucket=bucket,
            replayed=replayed,
            samples=samples,
            show_values=show_values,
            assume=assume,
        )
    families: dict[str, int] = {}
    for g in groups:
        families[g.family] = families.get(g.family, 0) + g.count
    return {
        "topic": topic,
        "replay_log": replay_log_topic,
        "bucket": bucket,
        "show_values": show_values,
        "records": sum(per_partition.values()),
        "replayed": sum(g.replayed for g in groups),
        "partitions": per_partition,
        "families": dict(sorted(families.items())),
        "assumed_family": assume,
        "groups": [g.to_dict() for g in groups],
        "replays": replay_log.replays(),
        # ordering: key: the blocked keys per partition (counts, the oldest; never a key); else None
        "blocked_keys": _blocked_keys(topology, kafka_config),
    }


def _blocked_keys(topology: Topology, kafka_config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The state topic read (a broker problem in its ``error``), for a topology with ``ordering: key``."""
    if topology.order_state_topic is None:
        return None
    return read_order_state(kafka_config, topology.order_state_topic, timeout_s=30.0).to_dict()


def _family(family: str) -> Family | None:
    if family in ("", "auto"):
        return None
    for known in FAMILIES:
        if family == known:
            return known
    raise ReplayError(f"--family {family!r}: use auto or one of {', '.join(FAMILIES)}")
