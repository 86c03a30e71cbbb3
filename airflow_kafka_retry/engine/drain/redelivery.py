"""
A share-group topology's partition run under ``on_due: redeliver``: no handler, records go back to the queue.

* The input lane (tier 0, the share group's DLQ): each dead letter is a failure of its round
  (``policy/routing/share_redelivery.dead_letter_round``: the round from the redelivery log, else 1) and is
  routed like any failed record: into the next tier with its back-off, or to the DLT once its rounds are
  spent. The log entry that gave the round is deleted (a tombstone) in the chunk's transaction
  (:meth:`bookkeeping`).
* A retry tier: each due record is produced back to its source topic and partition
  (``redelivery_plan``; where the source topic has fewer partitions the key decides), with the round in
  ``retry_topic-attempts``; its redelivery log entry, keyed by the offset its delivery report gives, is
  written in the same transaction as the record and the tier's offset commit (:meth:`bookkeeping`). A
  record that names no source the topology allows (``input.sources``, ``input.group``), or whose source
  topic no longer exists, goes to the DLT; so does one its source refuses for good (too large for it, not
  writable: :meth:`reroute`), after which the chunk is committed again without it.

Only in Kafka transactions (``transactional=True``, the default): the log entry must commit with the
redelivered record, and a refused record's chunk is aborted before it goes again.

:class:`~airflow_kafka_retry.engine.drain.partition.PartitionJob` reads, commits and reports as for any tier.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.engine.drain.lanes import LaneKind
from airflow_kafka_retry.engine.drain.transaction import Refused, RoutedRecord, UndeliverableError
from airflow_kafka_retry.engine.kafka.clients import TopicsMissing, partition_counts
from airflow_kafka_retry.engine.kafka.messages import offset_of
from airflow_kafka_retry.engine.logs.redelivery_log import (
    RedeliveryLogView,
    ensure_redelivery_log,
    redelivery_log_topic,
)
from airflow_kafka_retry.policy.headers.codec import HEADER_NAMES
from airflow_kafka_retry.policy.routing.resolver import Destination
from airflow_kafka_retry.policy.routing.share_redelivery import (
    NotRedeliverableError,
    RedeliveryTargets,
    dead_letter_round,
    entry_key,
    redelivery_headers,
    redelivery_plan,
)

if TYPE_CHECKING:
    from confluent_kafka import Message, TopicPartition

    from airflow_kafka_retry.engine.drain.chunk import ChunkWork
    from airflow_kafka_retry.engine.drain.due_records import Chunk
    from airflow_kafka_retry.engine.drain.failure_routing import FailureRouting
    from airflow_kafka_retry.engine.drain.lanes import LaneRun
    from airflow_kafka_retry.engine.drain.options import DrainOptions
    from airflow_kafka_retry.engine.drain.transaction import ChunkTransaction
    from airflow_kafka_retry.policy.headers.codec import Header
    from airflow_kafka_retry.policy.routing.share_redelivery import Redelivery
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

log = logging.getLogger(__name__)


def redelivers(topology: Topology, tier: Tier) -> bool:
    """Whether a run of ``tier`` redelivers (or feeds the tiers of) a share group instead of handling."""
    return topology.on_due == "redeliver" and tier.kind in ("main", "retry")


def check_options(topology: Topology, options: DrainOptions) -> None:
    """A redelivering run's options fit it: transactions; a ValueError names the option and the topology."""
    if not options.transactional:
        raise ValueError(
            f"{topology.source}: option transactional=False does not fit on_due: redeliver: a redelivered "
            "record would be visible before its redelivery log entry (its next round would start again at "
            "1) and a record its source refuses could not be taken back; leave transactional at True"
        )


def no_handler(records: object) -> None:
    """A redelivering run's handler: never called (:class:`RedeliveryLane` gives each record its home)."""
    raise RuntimeError("a redelivering tier run calls no handler")


def redelivery_handler(topology: Topology, options: DrainOptions) -> Callable[..., Any]:
    """A redelivering run's handler (:func:`no_handler`), once its options are checked."""
    check_options(topology, options)
    return no_handler


class RedeliveryLane:
    """
    The redeliver lane of one partition run; :meth:`handle` takes the place of the handler.

    :param run: the partition run (its topology, tier, Kafka configuration, failure routing, clock, options).
    :param router: the run's router (its consumer looks up source topics, its partition counts learn them).
    """

    def __init__(self, run: LaneRun, router: ChunkTransaction) -> None:
        self.tier = run.tier
        self.kafka_config: Mapping[str, Any] = run.kafka_config
        self.routing: FailureRouting = run.routing
        self.router = router
        self.clock: Callable[[], int] = run.clock
        self.call_timeout_s = run.options.call_timeout_s
        self.names = HEADER_NAMES[run.topology.headers.naming]
        self.targets = RedeliveryTargets.of(run.topology)  # where a redelivery may go: never a header's say
        self.log_topic = redelivery_log_topic(run.topology.topic)
        self.deadlines = run.deadlines
        self._view = (
            RedeliveryLogView(
                self.kafka_config,
                self.log_topic,
                deadlines=run.deadlines,
                timeout_s=min(10.0, self.call_timeout_s),
                idle_timeout_s=run.options.idle_timeout_s,
            )
            if self.tier.index == 0
            else None
        )
        self._used: dict[bytes, None] = {}  # log keys whose entries gave a round in this chunk, in order
        self._log_ready = False
        self._missing: set[str] = set()  # source topics found not to exist in this run
        self._refusing: dict[str, str] = {}  # source topics that refused a record in this run -> why
        self._entries: dict[int, Redelivery] = {}  # id(routed record) -> its log entry, until the commit

    def prepare(self, work: ChunkWork) -> None:
        """Nothing before a chunk's records."""

    def handle(self, piece: Chunk, work: ChunkWork) -> None:
        """Give each record of the piece its home: a tier or the DLT (input lane), its source or the DLT."""
        if self._view is not None:
            self._feed(piece, work)
        else:
            self._redeliver(piece, work)
        messages = piece.messages
        if work.first_offset is None:
            work.first_offset = offset_of(messages[0])
        work.last_offset = offset_of(messages[-1])
        work.read += len(messages)

    def _feed(self, piece: Chunk, work: ChunkWork) -> None:
        view = self._view
        if view is None:
            raise RuntimeError("only the input lane reads the redelivery log")
        view.refresh()  # after the piece was read: the entry of each of its dead letters is in
        failures: list[tuple[Message, BaseException, int]] = []
        headers: list[list[Header] | None] = []
        for message, own in zip(piece.messages, piece.headers):
            ts = message.timestamp()[1]
            found = dead_letter_round(
                own, ts, message.key(), message.value(), self.names, view.get, targets=self.targets
            )
            failures.append((message, found.error, found.attempt))
            headers.append(found.headers)
            if found.logged is not None:
                self._used[found.logged] = None
        self._route(failures, work, headers)

    def _redeliver(self, piece: Chunk, work: ChunkWork) -> None:
        failures: list[tuple[Message, BaseException, int]] = []
        now = self.clock()
        for message, own, attempt, due in zip(piece.messages, piece.headers, piece.attempts, piece.due_ms):
            plan = redelivery_plan(own, attempt, due, self.names, targets=self.targets)
            if isinstance(plan, NotRedeliverableError):
                failures.append((message, plan, attempt))
                continue
            if plan.topic in self._refusing:
                why = f"its source topic {plan.topic!r} refused a redelivery in this run: "
                why += self._refusing[plan.topic]
                failures.append((message, NotRedeliverableError(why), attempt))
                continue
            if not self._exists(plan.topic):
                failures.append(
                    (
                        message,
                        NotRedeliverableError(f"its source topic {plan.topic!r} does not exist"),
                        attempt,
                    )
                )
                continue
            destination = Destination(
                "redeliver",
                plan.topic,
                plan.partition,
                attempt,
                due if due is not None else now,
                0,
                "retryable",
            )
            item = RoutedRecord(message, destination, redelivery_headers(own, self.names), "")
            self._entries[id(item)] = plan.entry
            work.routed.append(item)
            if due is not None:
                work.lateness_ms.add(now - due)
        if self._entries and not self._log_ready:
            ensure_redelivery_log(
                self.kafka_config, self.log_topic, timeout=self.call_timeout_s, deadlines=self.deadlines
            )
            self._log_ready = True
        self._route(failures, work)

    def _route(
        self,
        failures: list[tuple[Message, BaseException, int]],
        work: ChunkWork,
        headers: Sequence[list[Header] | None] | None = None,
    ) -> None:
        routed, dropped, _ = self.routing.route(failures, 0, headers)
        work.routed.extend(routed)
        work.dropped.extend(dropped)

    def _exists(self, topic: str) -> bool:
        """Whether the source topic exists (its partition count then known to the router)."""
        if topic in self.router.partition_counts:
            return True
        if topic in self._missing:
            return False
        timeout = self.deadlines.timeout(min(10.0, self.call_timeout_s))
        try:
            with self.deadlines.call("list_topics", timeout, "any broker (metadata)"):
                count = partition_counts(self.router.consumer, [topic], timeout)[topic]
        except TopicsMissing:  # (metadata that cannot be read fails the run: nothing committed, retried)
            log.warning(
                "%s: source topic %s does not exist; its records go to the DLT", self.tier.topic, topic
            )
            self._missing.add(topic)
            return False
        self.router.partition_counts = {**self.router.partition_counts, topic: count}
        return True

    def commit(self, source: TopicPartition | None, work: ChunkWork) -> None:
        """
        Commit the chunk with its log entries (:meth:`bookkeeping`); what a source refuses goes to the DLT.

        Each time round the router aborted the transaction (nothing committed) and :meth:`reroute` either
        made refused redeliveries DLT records or set records of a refused batch apart (each once), so the
        rounds end; anything else the router refuses fails the run.
        """
        while True:
            try:
                self.router.commit([] if source is None else source, work.routed, self.bookkeeping)
                return
            except UndeliverableError as exc:
                if not self.reroute(exc.refused, work):
                    raise

    def reroute(self, refused: Sequence[Refused], work: ChunkWork) -> bool:
        """
        Route to the DLT the redeliveries their source refused for good, in place in the chunk's records.

        The chunk's transaction was aborted; it is committed again with them in the DLT (the reason in their
        exception headers). A source that refused as a whole refuses the rest of the run's records too. When
        the broker refused a batch of several records (too large together, or one too large), which one it
        was is not known: each of them goes alone next time, and only one refused alone goes to the DLT.
        False (nothing changed) when a refused record is not a redelivery of this lane: the run then fails.
        """
        if not refused or any(id(r.record) not in self._entries for r in refused):
            return False
        doubtful = [r for r in refused if not (r.own or r.whole_topic)]
        if len(doubtful) > 1:
            for r in doubtful:
                r.record.alone = True
        sure = [r for r in refused if r.own or r.whole_topic or len(doubtful) == 1]
        replaced: dict[int, list[RoutedRecord]] = {}
        for r in sure:
            item, topic = r.record, str(r.record.destination.topic)
            if r.whole_topic:
                self._refusing[topic] = r.reason
            del self._entries[id(item)]
            error = NotRedeliverableError(f"its source topic {topic!r} refused the redelivery: {r.reason}")
            routed, dropped, _ = self.routing.route([(item.source, error, item.destination.next_attempt)], 0)
            replaced[id(item)] = routed
            work.dropped.extend(dropped)
            log.warning(
                "%s[%s]@%s: its source topic %s refused the redelivery (%s); it goes to the DLT instead",
                item.source.topic(),
                item.source.partition(),
                item.source.offset(),
                topic,
                r.reason,
            )
        work.routed[:] = [new for old in work.routed for new in replaced.get(id(old), [old])]
        return True

    def bookkeeping(self, routed: Sequence[RoutedRecord]) -> list[tuple[str, bytes, bytes | None]]:
        """
        The log records the chunk's commit writes in its transaction.

        The entries of its redelivered records, by the coordinates their delivery gave; the input lane's
        tombstones of the entries that gave its dead letters their round (an aborted chunk deletes none).
        """
        out: list[tuple[str, bytes, bytes | None]] = [(self.log_topic, key, None) for key in self._used]
        self._used.clear()
        for item in routed:
            entry = self._entries.pop(id(item), None)
            if entry is None:
                continue
            topic, partition, offset = item.destination.topic, item.delivered_partition, item.delivered_offset
            if topic is None or partition is None or offset is None:
                raise RuntimeError(
                    f"a redelivered record to {topic} has no delivery report before its commit"
                )
            out.append((self.log_topic, entry_key((topic, partition, offset)), entry.encode()))
        return out

    def close(self) -> None:
        if self._view is not None:
            self._view.close()


REDELIVERING = LaneKind(handler=redelivery_handler, open=RedeliveryLane)
