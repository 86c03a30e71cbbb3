"""
Watching the heads of topics for a consumer group, with a long-lived consumer and no commits.

The event triggers of event-driven tiers keep one :class:`HeadWatch` open while they run: it is
assigned every partition at the group's committed offset, learns each partition's first pending
record (its head: offset and due time) or its end (partition EOF), and pauses a partition once its
head is known, so nothing past the head is fetched. When the group's committed offset of a
partition moves (a tier run committed), :meth:`HeadWatch.sync_committed` re-assigns that partition
at the new offset and its head is learnt again. It never joins the group and never commits.

By default each watch has a consumer of its own. With ``shared=True`` the watches of one process share
one consumer per Kafka configuration (``shared_consumer.py``): each claims its partitions in it and
handles only its own, so idle watches cost the broker one long-polling fetch at a time in all, and one
committed-offset request per watch and check. A watch whose partition another watch of the process
already holds (two watches of one topic) then uses a consumer of its own. The triggers share with
``[kafka_retry] shared_watch_consumers`` on, the default.

Whether a partition has a pending record comes from partition EOF, never from ListOffsets (see
peek.py). For the backlog gauge, :meth:`HeadWatch.refresh_ends` also asks for the log end of the
partitions paused at their head (the fetch's own figure goes stale while paused): the higher of
the two is kept, so a broker whose ListOffsets lags (BROKERS.md) only makes the figure stale, never
lower than what the fetch saw. Only headers are read (the due time), never payloads. No Airflow import: the
triggers call this from a worker thread (blocking calls) or directly (:meth:`poll` never blocks).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from airflow_kafka_retry.engine.heads.own_consumer import PrivateConsumer
from airflow_kafka_retry.engine.heads.peek import PartitionHead, TierPeek
from airflow_kafka_retry.engine.heads.shared_consumer import ConsumerBroken, Lease, lease
from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError, TopicsMissing
from airflow_kafka_retry.policy.headers.codec import MAX_BACKOFF_MS, read_due_ms
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

Key = tuple[str, int]


class HeadWatchError(RuntimeError):
    """The watched topics could not be read; the message names topic and partition(s)."""


def where(keys: Sequence[Key]) -> str:
    return ", ".join(f"{t}[{p}]" for t, p in sorted(keys))


class HeadWatch:
    """
    The first pending record of every partition of ``topics`` after ``group``'s committed offset.

    :param kafka_config: librdkafka configuration (bootstrap servers, security).
    :param topics: the topics watched (a tier's topic, or a topology's DLTs).
    :param group: the consumer group whose committed offsets are the start (never joined, never committed).
    :param read_due: read each head's due time from its headers (tiers); False: any head is due (DLTs).
    :param due_horizon_ms: a due time further ahead than this is not believed (the record is due now),
        as the drain does.
    :param optional: of ``topics``, those watched once they exist.
    :param shared: share the process's consumer for this Kafka configuration (False: a consumer of its own).
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        topics: Sequence[str],
        group: str,
        *,
        read_due: bool = True,
        due_horizon_ms: int = MAX_BACKOFF_MS,
        optional: Collection[str] = (),
        shared: bool = False,
    ) -> None:
        self.topics = list(topics)
        self.optional = frozenset(optional)  # watched once they exist (a parking topic not created yet)
        self.group = group
        self.read_due = read_due
        self.due_horizon_ms = due_horizon_ms
        self.committed: dict[Key, int] = {}  # the group's committed offset per partition (-1: none)
        self.heads: dict[Key, PartitionHead] = {}
        self.ended: set[Key] = set()  # partitions read to their end: nothing pending
        self._kafka_config = kafka_config  # to name a missing ACL (never logged: it holds credentials)
        self._client: Lease | PrivateConsumer = (
            lease(kafka_config) if shared else PrivateConsumer(kafka_config, group)
        )
        try:
            try:
                self._refresh_partitions()
            except _Taken:  # another watch of this process holds one of the partitions
                self._client.close()
                self._client = PrivateConsumer(kafka_config, group)
                self._refresh_partitions()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ what is known
    @property
    def keys(self) -> list[Key]:
        return sorted(self.committed)

    @property
    def shared(self) -> bool:
        """Whether the watch reads through the process's shared consumer."""
        return self._client.shared

    @property
    def awaited(self) -> list[str]:
        """Its optional topics not watched yet: they did not exist at its last look."""
        watched = {t for t, _ in self.committed}
        return [t for t in self.topics if t in self.optional and t not in watched]

    @property
    def complete(self) -> bool:
        """Every partition gave its head or its end since it was last (re-)assigned."""
        return all(k in self.heads or k in self.ended for k in self.committed)

    # ------------------------------------------------------------------ blocking calls (worker thread)
    def _refresh_partitions(self) -> None:
        try:
            counts = self._client.partition_counts([t for t in self.topics if t not in self.optional])
        except KafkaConfigError as exc:
            raise HeadWatchError(self._named(str(exc), exc)) from exc
        for topic in self.optional:
            try:
                counts.update(self._client.partition_counts([topic]))
            except TopicsMissing:  # not there yet: looked for again at the next sync
                continue
            except KafkaConfigError as exc:  # there, but not to be read: the lane's error, naming the ACL
                raise HeadWatchError(self._named(str(exc), exc)) from exc
        keys = [(t, p) for t in self.topics if t in counts for p in range(counts[t])]
        new = [k for k in keys if k not in self.committed]
        if new:
            if not self._client.claim(new):
                raise _Taken(f"{where(new)}: already watched by another watch of this process")
            offsets = self._read_committed(new)
            self._assign(
                [TopicPartition(t, p, o if o >= 0 else OFFSET_BEGINNING) for (t, p), o in offsets.items()]
            )
            self.committed.update(offsets)

    def _assign(self, tps: list[TopicPartition], *, again: bool = False) -> None:
        """(Re-)assign ``tps``; a broker that does not answer (the log start asked first) names them."""
        try:
            (self._client.reassign if again else self._client.assign)(tps)
        except KafkaException as exc:
            keys = [(tp.topic, tp.partition) for tp in tps]
            raise HeadWatchError(
                f"{where(keys)}: cannot start watching at the group's offsets: {exc}"
            ) from exc

    # 15 s: a lane whose request times out waits that long before it is opened again
    def _read_committed(self, keys: Sequence[Key], timeout_s: float = 15.0) -> dict[Key, int]:
        try:
            return self._client.committed(self.group, keys, timeout_s)
        except KafkaException as exc:
            said = f"{where(keys)}: cannot read the committed offsets of group {self.group!r}: {exc}"
            raise HeadWatchError(self._named(said, exc)) from exc

    def _named(self, said: str, error: Exception, timeout_s: float = 5.0) -> str:
        """
        ``said``, and the watcher's ACLs its principal lacks when they explain ``error``.

        Kafka answers a topic the principal may not describe with an authorization failure, but a group it
        may not describe only with a timeout: asked as the watch's principal (``authorization.explain``,
        within ``timeout_s``), the message names the principal, the operation and the resource.
        """
        from airflow_kafka_retry.engine.kafka.authorization import explain
        from airflow_kafka_retry.policy.topology.acl import AclBinding

        needed = [AclBinding("watcher", "topic", t, "literal", "READ", "the head") for t in self.topics]
        needed.append(AclBinding("watcher", "group", self.group, "literal", "DESCRIBE", "the committed"))
        note = explain(error, self._kafka_config, needed, timeout=timeout_s)
        return f"{said}; {note}" if note else said

    def sync_committed(self) -> dict[Key, int]:
        """
        Read the group's committed offsets (and new partitions); return the committed offsets.

        Re-read the head of every partition whose committed offset moved.
        """
        self._refresh_partitions()
        offsets = self._read_committed(self.keys)
        moved = [k for k, o in offsets.items() if o != self.committed[k]]
        if moved:
            self._assign(
                [
                    TopicPartition(t, p, offsets[(t, p)] if offsets[(t, p)] >= 0 else OFFSET_BEGINNING)
                    for t, p in moved
                ],
                again=True,
            )
            for key in moved:
                self.heads.pop(key, None)
                self.ended.discard(key)
        self.committed.update(offsets)
        return dict(self.committed)

    def refresh_ends(self, timeout_s: float = 10.0) -> None:
        """Ask the broker for the log end of every partition paused at its head (for the backlog gauge)."""
        if not self.heads:
            return
        try:
            ends = self._client.log_ends(sorted(self.heads), timeout_s)
        except KafkaException as exc:
            raise HeadWatchError(f"{where(list(self.heads))}: cannot read the log end: {exc}") from exc
        for key, high in ends.items():
            head = self.heads.get(key)
            if (
                head is not None
                and high is not None
                and high >= 0
                and (head.end_offset is None or high > head.end_offset)
            ):
                self.heads[key] = replace(head, end_offset=high)

    def peek_of(self, topic: str) -> TierPeek:
        """What the watch knows of ``topic``, as a tier-due peek would report it."""
        return TierPeek(
            topic,
            self.group,
            tuple(p for t, p in self.keys if t == topic),
            tuple(h for (t, _), h in sorted(self.heads.items()) if t == topic),
        )

    def close(self) -> None:
        self._client.close()

    # ------------------------------------------------------------------ never blocks
    def poll(self) -> None:
        """Take what the client has fetched: heads and ends of partitions (never waits)."""
        try:
            messages = self._client.take()
        except ConsumerBroken as exc:
            raise HeadWatchError(f"{where(self.keys)}: watching for records failed: {exc}") from exc
        for message in messages:
            self._take(message)

    def _take(self, message: Any) -> None:
        key = (message.topic(), message.partition())
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                if key in self.committed and key not in self.heads:
                    self.ended.add(key)
                return
            place = (
                f"{key[0]}[{key[1]}]" if key[0] and key[1] is not None and key[1] >= 0 else where(self.keys)
            )
            raise HeadWatchError(f"{place}: watching for records failed: {error}")
        if key not in self.committed or key in self.heads:
            return  # a record fetched before the partition was paused: its head is known
        base = self.committed[key]
        if 0 <= message.offset() < base:
            return  # fetched before a re-assignment moved the partition on
        due = (
            read_due_ms(message.headers(), now_ms=wall_clock_ms(), horizon_ms=self.due_horizon_ms)
            if self.read_due
            else None
        )
        _, timestamp = message.timestamp()
        end = self._client.cached_end(key)  # the log end the fetch carried
        self.heads[key] = PartitionHead(
            key[1],
            message.offset(),
            due,
            timestamp if timestamp >= 0 else None,
            end if end is not None and end >= 0 else None,
        )
        self.ended.discard(key)
        self._client.pause([TopicPartition(*key)])


class _Taken(HeadWatchError):
    """A partition is claimed by another watch of the process's shared consumer."""
