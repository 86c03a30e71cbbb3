"""
The parking topic must exist once a chunk parks a record: looked up then, under the attempt's deadlines.

A topology upgraded from one without parking runs without the topic until a replayed record fails again;
then the chunk fails, nothing of it committed, and the error says how to create the topic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError, TopicsMissing, partition_counts

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.chunk import ChunkWork
    from airflow_kafka_retry.engine.drain.transaction import ChunkTransaction
    from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines


class ParkingTopicMissingError(KafkaConfigError):
    """A replayed record must be parked, and the topology's parking topic does not exist."""


def require_parking(
    parking: str | None,
    where: str,
    work: ChunkWork,
    router: ChunkTransaction,
    deadlines: CallDeadlines,
    call_timeout_s: float,
) -> None:
    """
    Learn the parking topic's partition count (into ``router``) once ``work`` parks a record.

    ``where`` names the partition run (``<topic>[<partition>]``). A metadata request that fails goes up as
    it is (the run retries it); a topic that does not exist is :class:`ParkingTopicMissingError`.
    """
    if parking is None or parking in router.partition_counts:
        return
    parked = [item.source for item in work.routed if item.destination.topic == parking]
    if not parked:
        return
    timeout = deadlines.timeout(min(10.0, call_timeout_s))
    try:
        with deadlines.call("list_topics", timeout, "any broker (metadata)"):
            count = partition_counts(router.consumer, [parking], timeout)[parking]
    except TopicsMissing:
        raise ParkingTopicMissingError(
            f"parking topic {parking!r} does not exist, and {len(parked)} replayed record(s) of {where} "
            f"failed again and must be parked there (first: offset {parked[0].offset()}); nothing of this "
            "chunk was committed. Create it with `airflow-kafka-retry topology create-topics` or "
            "EnsureRetryTopicsOperator, then run the tier again"
        ) from None
    router.partition_counts = {**router.partition_counts, parking: count}
