"""
The consumer behind a head watch: one per process and Kafka configuration, shared, or a private one.

Every asset watcher of a triggerer keeps a :class:`~airflow_kafka_retry.engine.heads.head_watch.HeadWatch`
open. With one librdkafka consumer each, 200 topologies would hold 800 consumers in one process, each
with its threads, its broker connections and its own long-polling fetch. Instead the watches of a
process *lease* one :class:`SharedConsumer` per Kafka configuration (the registry's key: the consumer
configuration without its group): each lease claims its partitions, assigns, pauses, resumes and
un-assigns only them, and :meth:`Lease.take` drains the client's queue into each lease's inbox, so a
watch handles only its own partitions. The shared consumer never joins a group and never commits; a
watch's group's committed offsets are read with one ``ListConsumerGroupOffsets`` request per group,
as a consumer of that group would read them (stable offsets), sent from a child process
(``offset_reader.py``: librdkafka's admin thread can crash handling its response); metadata and log
ends go through an ``AdminClient`` next to the consumer, as on the consumer's own connection a request
waits behind the fetch the broker holds open.

A partition already claimed in the shared consumer (two watches of one topic in one process) cannot be
assigned twice: :meth:`Lease.claim` says so and the watch takes a consumer of its own
(``own_consumer.py``: the behaviour before sharing). An error of one partition or topic reaches the watches
holding it. An error of the consumer itself (consuming raises, or an error naming no partition) breaks
the shared consumer: every lease's next call raises :class:`ConsumerBroken`, and the registry gives
later leases a new consumer; the broken one is closed with its last lease. librdkafka only logs
connection errors (the cluster unreachable): each watch learns of them when its next metadata or
committed-offset request fails, as before sharing.

Thread-safety: the triggers call the blocking methods from worker threads and :meth:`Lease.take` and
:meth:`Lease.pause` on the event loop. One lock per shared consumer guards its bookkeeping (who owns which
partition, the inboxes, whether it broke) and the drain of its queue (``consume`` with no wait). It is
never held across a client call that can block: an (un)assignment waits for librdkafka's main thread to
answer, so it runs outside the lock (librdkafka's calls are thread-safe), and the event loop never waits
behind one. Nothing here reads payloads or logs the configuration.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections import deque
from collections.abc import Collection, Hashable, Mapping, Sequence
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from airflow_kafka_retry.engine.heads.offset_reader import offset_reader
from airflow_kafka_retry.engine.heads.own_consumer import TAKE, Key, watch_config
from airflow_kafka_retry.engine.kafka.clients import partition_counts
from airflow_kafka_retry.engine.kafka.metadata_client import metadata_client
from airflow_kafka_retry.engine.kafka.process_clients import config_key, keep_inherited

#: The shared consumer's own group: never joined, never committed, never read.
SHARED_GROUP = "airflow-kafka-retry-head-watch"
#: Seconds past an admin request's own timeout its future is awaited: librdkafka's timeout answers first.
ANSWER_GRACE_S = 5.0

T = TypeVar("T")


def answer(future: Future[T], timeout_s: float, what: str) -> T:
    """
    The result of an admin request sent with ``request_timeout=timeout_s``; a timeout is a KafkaException.

    Awaited ``timeout_s`` plus :data:`ANSWER_GRACE_S`: waited with the request's own timeout, Python's
    builtin ``TimeoutError`` came before librdkafka's ``_TIMED_OUT``, and no caller expects it (it ended a
    topology's whole watcher instead of one lane backing off). Either way the caller gets a KafkaException
    (``_TIMED_OUT``) naming ``what`` it waited for.
    """
    waited = timeout_s + ANSWER_GRACE_S
    try:
        return future.result(waited)
    except FutureTimeout:
        reason = f"{what}: no answer from the broker within {waited:.0f} s"
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, reason)) from None


class ConsumerBroken(KafkaException):
    """The shared consumer failed as a whole; the message is the client's error."""


class SharedConsumer:
    """One consumer for the watches of a process with one Kafka configuration (admin: ``metadata_client``)."""

    def __init__(self, key: Hashable, kafka_config: Mapping[str, Any]) -> None:
        self.key = key
        self.consumer = Consumer(watch_config(kafka_config, SHARED_GROUP))
        self.kafka_config = kafka_config
        self.lock = threading.Lock()
        self.owners: dict[Key, int] = {}  # partition -> the lease that claimed it
        self.inboxes: dict[int, deque[Message]] = {}
        self.broken: str | None = None  # the error that broke the consumer
        self.leases = 0  # guarded by the registry's lock

    @property
    def admin(self) -> AdminClient:
        return metadata_client(self.kafka_config)

    def drain(self) -> None:
        """Move what the client fetched into the inboxes of the leases owning it (under ``lock``)."""
        if self.broken is not None:
            return
        try:
            while messages := self.consumer.consume(num_messages=TAKE, timeout=0):
                for message in messages:
                    self._route(message)
        except (KafkaException, RuntimeError) as exc:
            self.broken = str(exc)

    def _route(self, message: Message) -> None:
        topic, partition = message.topic(), message.partition()
        owner = self.owners.get((topic, partition)) if topic and partition is not None else None
        if owner is not None:
            self.inboxes[owner].append(message)
        elif message.error() is None or (partition is not None and partition >= 0):
            return  # a partition nobody holds any more (un-assigned after the fetch)
        elif topic and (owners := {o for (t, _), o in self.owners.items() if t == topic}):
            for owner in owners:  # an error of a topic: its watches
                self.inboxes[owner].append(message)
        else:  # an error of the consumer itself: every watch, and the consumer is not used again
            self.broken = str(message.error())


class Lease:
    """One watch's share of a :class:`SharedConsumer`: the partitions it claimed and its inbox."""

    shared = True

    def __init__(self, sharing: SharedConsumer, ident: int) -> None:
        self.sharing = sharing
        self.consumer = sharing.consumer
        self.ident = ident
        self.keys: set[Key] = set()  # claimed
        self.assigned: set[Key] = set()  # of those, in the consumer's assignment
        self._closed = False

    def claim(self, keys: Collection[Key]) -> bool:
        """Own ``keys`` in the shared consumer; False (nothing claimed) if another lease holds one."""
        s = self.sharing
        with s.lock:
            if any(s.owners.get(k, self.ident) != self.ident for k in keys):
                return False
            s.owners.update(dict.fromkeys(keys, self.ident))
            self.keys.update(keys)
            return True

    # Metadata and log ends go through the admin client: on the consumer's connection a request waits
    # behind the fetch the broker holds open (up to fetch.wait.max.ms), and there always is one.
    def partition_counts(self, topics: list[str]) -> dict[str, int]:
        return partition_counts(self.sharing.admin, topics)

    def log_ends(self, keys: Sequence[Key], timeout_s: float) -> dict[Key, int | None]:
        """
        The log ends of ``keys`` from the broker, asked at once (one ListOffsets request per leader broker).

        As the consumer reads them: committed records (``READ_COMMITTED``).
        """
        tps = {TopicPartition(*key): key for key in keys}
        futures = self.sharing.admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in tps},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=timeout_s,
        )
        return {
            key: int(answer(futures[tp], timeout_s, f"the log end of {key[0]}[{key[1]}]").offset)
            for tp, key in tps.items()
        }

    def cached_end(self, key: Key) -> int | None:
        """The log end the last fetch of the partition carried."""
        return self.consumer.get_watermark_offsets(TopicPartition(*key), cached=True)[1]

    def _from_start(self, tps: list[TopicPartition], timeout_s: float = 30.0) -> list[TopicPartition]:
        """
        ``OFFSET_BEGINNING`` replaced by the log start (a reset would wait behind the open fetch).

        Not :func:`~airflow_kafka_retry.engine.kafka.clients.from_log_start`: that one asks on the consumer's
        own connection, where the request would wait behind the fetch the broker holds open, and leaves a
        partition to librdkafka when the broker does not answer; this one asks the admin client for every
        partition at once, and a broker that does not answer fails the assignment.
        """
        start = [tp for tp in tps if tp.offset == OFFSET_BEGINNING]
        if not start:
            return tps
        futures = self.sharing.admin.list_offsets(
            {TopicPartition(tp.topic, tp.partition): OffsetSpec.earliest() for tp in start},
            request_timeout=timeout_s,
        )
        found = {
            (tp.topic, tp.partition): answer(
                f, timeout_s, f"the log start of {tp.topic}[{tp.partition}]"
            ).offset
            for tp, f in futures.items()
        }
        return [
            TopicPartition(tp.topic, tp.partition, found[(tp.topic, tp.partition)])
            if tp.offset == OFFSET_BEGINNING
            else tp
            for tp in tps
        ]

    def committed(self, group: str, keys: Sequence[Key], timeout_s: float) -> dict[Key, int]:
        """``group``'s committed offsets (-1: none), asked in a child process (``offset_reader.py``)."""
        return offset_reader(self.sharing.kafka_config).committed(group, keys, timeout_s)

    # (Un)assigning waits for librdkafka's main thread: never under the lock, which take() needs on the
    # event loop. Only this lease changes its partitions, so nothing else orders these calls.
    def assign(self, tps: list[TopicPartition]) -> None:
        """
        Assign ``tps`` at their offsets, fetching (a partition this lease has assigned is assigned again).

        librdkafka's incremental (un)assignment is all or nothing: one partition not in the consumer's
        assignment fails an un-assignment, one already in it fails an assignment, and nothing changes. So
        the lease un-assigns only what it knows it assigned (:attr:`assigned`): a partition it claimed but
        failed to assign (a broker that did not answer in between) must not leave the others assigned to
        nobody, where every later lease's assignment of them would fail.

        librdkafka keeps a partition's pause across un-assignment: a watch of this process that held the
        partition before (closed after a broker error, and opened again) may have paused it at its head,
        and without the resume the new watch would never fetch it.
        """
        tps = self._from_start(tps)
        self._check(tps)
        self._unassign([(tp.topic, tp.partition) for tp in tps])
        self.consumer.incremental_assign(tps)
        self.assigned.update((tp.topic, tp.partition) for tp in tps)
        self.consumer.resume(tps)

    def reassign(self, tps: list[TopicPartition]) -> None:
        """Assign ``tps`` again at their offsets, fetching (resumed, as :meth:`assign`)."""
        self.assign(tps)

    def _unassign(self, keys: Collection[Key]) -> None:
        """Un-assign those of ``keys`` this lease assigned."""
        if gone := [k for k in keys if k in self.assigned]:
            self.consumer.incremental_unassign([TopicPartition(t, p) for t, p in gone])
            self.assigned.difference_update(gone)

    def pause(self, tps: list[TopicPartition]) -> None:
        """Stop fetching ``tps`` (librdkafka queues the pause: no wait, no lock)."""
        self._check(tps)
        self.consumer.pause(tps)

    def take(self) -> list[Message]:
        """What was fetched for this lease's partitions; raises :class:`ConsumerBroken` once broken."""
        s = self.sharing
        with s.lock:
            s.drain()
            if s.broken is not None:
                raise ConsumerBroken(s.broken)
            inbox = s.inboxes[self.ident]
            taken = list(inbox)
            inbox.clear()
            return taken

    def _check(self, tps: list[TopicPartition]) -> None:
        # reads this lease's own keys and one reference: no lock needed
        if self.sharing.broken is not None:
            raise ConsumerBroken(self.sharing.broken)
        if not self.keys.issuperset((tp.topic, tp.partition) for tp in tps):
            raise ValueError("a lease changes only the partitions it claimed")

    def close(self) -> None:
        """Un-assign this lease's partitions; the last lease of the consumer closes it."""
        if self._closed:
            return
        self._closed = True
        s = self.sharing
        with s.lock:
            for key in [k for k, o in s.owners.items() if o == self.ident]:
                del s.owners[key]  # what is fetched for them from now on is dropped by the drain
            s.inboxes.pop(self.ident, None)
            unassign = s.broken is None
        if unassign:  # outside the lock: it waits for librdkafka's main thread
            with contextlib.suppress(KafkaException, RuntimeError):
                self._unassign(list(self.assigned))
        _release(s)


# ---------------------------------------------------------------------- the process's registry
_LOCK = threading.Lock()
_REGISTRY: dict[Hashable, SharedConsumer] = {}
_IDENTS = itertools.count(1)


def _forget_in_child() -> None:
    """After a fork, in the child: its watches start afresh; the inherited clients are left alone."""
    for sharing in _REGISTRY.values():  # the admin clients are metadata_client.py's to keep
        keep_inherited(sharing.consumer)
    _REGISTRY.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def share_key(kafka_config: Mapping[str, Any]) -> Hashable:
    """What decides which watches share a consumer: their consumer configuration, group aside."""
    config = watch_config(kafka_config, SHARED_GROUP)
    return config_key(config, without=("group.id",))


def lease(kafka_config: Mapping[str, Any]) -> Lease:
    """A lease of the process's shared consumer for ``kafka_config`` (a new consumer if none or broken)."""
    key = share_key(kafka_config)
    with _LOCK:
        sharing = _REGISTRY.get(key)
        if sharing is None or sharing.broken is not None:
            sharing = _REGISTRY[key] = SharedConsumer(key, kafka_config)
        sharing.leases += 1
        ident = next(_IDENTS)
    with sharing.lock:
        sharing.inboxes[ident] = deque()
    return Lease(sharing, ident)


def _release(sharing: SharedConsumer) -> None:
    with _LOCK:
        sharing.leases -= 1
        last = sharing.leases == 0
        if last and _REGISTRY.get(sharing.key) is sharing:
            del _REGISTRY[sharing.key]
    if last:
        with contextlib.suppress(KafkaException, RuntimeError):
            sharing.consumer.close()


def shared_consumers() -> list[SharedConsumer]:
    """The working shared consumers of this process (one per Kafka configuration in use)."""
    with _LOCK:
        return [s for s in _REGISTRY.values() if s.broken is None]
