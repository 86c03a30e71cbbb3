"""
A head watch's own consumer: the group's consumer, for one watch, as before consumers were shared.

A :class:`~airflow_kafka_retry.engine.heads.head_watch.HeadWatch` takes one when another watch of its process
already holds one of its partitions in the shared consumer (``shared_consumer.py``), or when asked
(``shared=False``). Its methods are those of a shared consumer's lease, so the watch does not tell them
apart. Nothing here reads payloads or logs the configuration.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from airflow_kafka_retry.engine.kafka.clients import consumer_config, from_log_start, partition_counts
from airflow_kafka_retry.engine.kafka.metadata_client import metadata_client

Key = tuple[str, int]
#: A watch consumer waits this long in one fetch when its partitions are at their end: a new record
#: still arrives at once (the fetch returns with it); idle, this bounds the fetches per second. Each fetch
#: names every partition at its end (librdkafka sends no incremental fetch sessions): 1,000 idle topologies
#: of 12 partitions took the broker 69 % of a core at 1 s, 12 % at 3 s (``bench.topology_watchers
#: --fetch-wait-ms``). What it delays: a partition assigned or re-assigned (its group committed) is fetched
#: from the next fetch on, so its new head is learnt within this wait; a run follows its next records for
#: ``follow`` (10 s), and the watcher fires ``fire_ahead`` (3 s) ahead, which leave room for it.
WATCH_FETCH_WAIT_MS = 3000
TAKE = 500  # messages taken from the client's queue in one call


def watch_config(kafka_config: Mapping[str, Any], group: str) -> dict[str, Any]:
    """The librdkafka configuration of a watch consumer of ``group``."""
    config = consumer_config(kafka_config, group)
    config["fetch.wait.max.ms"] = kafka_config.get("fetch.wait.max.ms", WATCH_FETCH_WAIT_MS)
    return config


class PrivateConsumer:
    """A consumer of the watch's own group, for one watch (a partition another watch holds)."""

    shared = False

    def __init__(self, kafka_config: Mapping[str, Any], group: str) -> None:
        self.consumer = Consumer(watch_config(kafka_config, group))
        self._kafka_config = kafka_config

    def claim(self, keys: Collection[Key]) -> bool:
        return True

    def partition_counts(self, topics: list[str]) -> dict[str, int]:
        """From the process's admin client: the consumer's own request would wait for its long poll."""
        return partition_counts(metadata_client(self._kafka_config), topics)

    def log_end(self, key: Key, timeout_s: float) -> int | None:
        """The partition's log end from the broker (ListOffsets)."""
        return self.consumer.get_watermark_offsets(TopicPartition(*key), timeout=timeout_s, cached=False)[1]

    def log_ends(self, keys: Sequence[Key], timeout_s: float) -> dict[Key, int | None]:
        """The log ends of ``keys`` (one request each: a consumer asks per partition)."""
        return {key: self.log_end(key, timeout_s) for key in keys}

    def cached_end(self, key: Key) -> int | None:
        """The log end the last fetch of the partition carried."""
        return self.consumer.get_watermark_offsets(TopicPartition(*key), cached=True)[1]

    def committed(self, group: str, keys: Sequence[Key], timeout_s: float) -> dict[Key, int]:
        """The watch's group's committed offsets (-1: none); a KafkaException names a failed partition."""
        found = self.consumer.committed([TopicPartition(t, p) for t, p in keys], timeout=timeout_s)
        offsets: dict[Key, int] = {}
        for tp in found:
            if tp.error is not None:
                raise KafkaException(f"{tp.topic}[{tp.partition}]: group {group!r}: {tp.error}")
            offsets[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else -1
        return offsets

    def assign(self, tps: list[TopicPartition]) -> None:
        self.consumer.incremental_assign(from_log_start(self.consumer, tps))

    def reassign(self, tps: list[TopicPartition]) -> None:
        """Assign ``tps`` again at their offsets, fetching (a partition paused at its head stays paused)."""
        self.consumer.incremental_unassign(tps)
        self.consumer.incremental_assign(from_log_start(self.consumer, tps))
        self.consumer.resume(tps)

    def pause(self, tps: list[TopicPartition]) -> None:
        self.consumer.pause(tps)

    def take(self) -> list[Message]:
        taken: list[Message] = []
        while messages := self.consumer.consume(num_messages=TAKE, timeout=0):
            taken.extend(messages)
        return taken

    def close(self) -> None:
        self.consumer.close()
