"""
Replay DLT records: select, check, then move each record with its log entry in one Kafka transaction.

A replay runs in three steps, and nothing is written before the third:

1. **Fence and read the log.** A transactional producer whose id is derived from the DLT topic
   initialises transactions, which aborts whatever an earlier (killed) replay of the same DLT left
   open and fences it; then the replay log is read to its end.
2. **Select and check.** Every DLT partition asked for is read (without committing) up to its end
   (for a resumed replay id: the ends recorded in its plan). Records pass the filters; those in the
   log are skipped (whatever replay moved them); the transform runs on every remaining record and
   its result is checked; each record's target is resolved and every target topic must exist.
   Bad input raises :class:`ReplayError` here, having moved nothing. A dry run stops here and
   reports every move it would make.
3. **Move.** The plan is logged, then records go in chunks, one transaction per chunk: the copies
   (with audit headers and a fresh attempt count) are produced and acknowledged, then their
   ``record/<partition>/<offset>`` log entries (each with the digest of its copy's replay id, key
   and value) are produced, then the transaction commits. A record's copy and its log entry are
   committed together or not at all.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, Producer

from airflow_kafka_retry.dlt.errors import ReplayAbortedError
from airflow_kafka_retry.dlt.filters import ReplayFilter
from airflow_kafka_retry.dlt.records import DltRecord
from airflow_kafka_retry.dlt.summary import Move, ReplaySummary
from airflow_kafka_retry.dlt.topics import BY_KEY, Target, check_target_spec, source_topic, target_for
from airflow_kafka_retry.dlt.transform import Transform, apply_transform, load_transform, resolve_transform
from airflow_kafka_retry.engine.clients import (
    KafkaConfigError,
    init_transactions,
    partition_counts,
    producer_config,
)
from airflow_kafka_retry.engine.consumed import offset_of
from airflow_kafka_retry.engine.options import DEFAULT_TRANSACTIONAL_ID_PREFIX
from airflow_kafka_retry.engine.reading import TopicReader
from airflow_kafka_retry.engine.replay_log import (
    ReplayLog,
    done_key,
    encode,
    ensure_log_topic,
    log_topic,
    plan_key,
    read_log,
    record_key,
)
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.replay_headers import ReplayAudit, copy_digest, replayed_headers
from airflow_kafka_retry.policy.resolver import wall_clock_ms

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology import Topology

log = logging.getLogger(__name__)

_TIMEOUT_S = 60.0
_REPLAY_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:+")


def new_replay_id(now_ms: int | None = None) -> str:
    """A fresh replay id: ``replay-<UTC time>-<random>``."""
    at = datetime.fromtimestamp((now_ms if now_ms is not None else wall_clock_ms()) / 1000, tz=UTC)
    return f"replay-{at:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def check_replay_id(replay_id: str) -> str:
    if not replay_id or len(replay_id) > 200 or not set(replay_id) <= _REPLAY_ID_CHARS:
        raise ReplayError(
            f"--replay-id {replay_id!r}: use 1-200 characters from letters, digits and . _ - : +"
        )
    return replay_id


def replay_transactional_id(prefix: str, source: str) -> str:
    """One transactional id per DLT: replays of the same DLT fence each other, never interleave."""
    return f"{prefix}replay/{source}"


@dataclass(frozen=True)
class ReplayRequest:
    """
    What to replay, as given (CLI strings, operator fields, DAG params); checked by :class:`Replay`.

    :param dlt: the DLT or parking topic (default: the topology's DLT; ``parking`` for the parking topic).
    :param to: ``main``, ``first-tier`` or a topic; default: each record's original topic.
    :param transform: ``package.module:function`` editing each record (None: leave it out).

    The filter fields are those of :meth:`ReplayFilter.build`.
    """

    dlt: str | None = None
    exception: Any = None
    original_topic: Any = None
    since: Any = None
    until: Any = None
    key: Any = None
    partition: Any = None
    offsets: Any = None
    limit: Any = None
    to: str | None = None
    transform: str | None = None

    def spec(self) -> dict[str, Any]:
        """
        The request as normalised plain data: what a rerun of the same replay id must repeat.

        Times are kept as given (a duration ago is anchored at the replay's start, recorded in its plan).
        """
        described = self.build_filter(0).describe()
        del described["since_ms"], described["until_ms"]
        raw = {
            name: None if getattr(self, name) in (None, "") else str(getattr(self, name))
            for name in ("dlt", "since", "until", "to", "transform")
        }
        return {**raw, **described}

    def build_filter(self, now_ms: int) -> ReplayFilter:
        return ReplayFilter.build(
            exception=self.exception,
            original_topic=self.original_topic,
            since=self.since,
            until=self.until,
            key=self.key,
            partition=self.partition,
            offsets=self.offsets,
            limit=self.limit,
            now_ms=now_ms,
        )


@dataclass
class _Candidate:
    partition: int
    offset: int
    timestamp_ms: int
    target: Target
    transformed: bool
    moved_before: bool = False


class Replay:
    """
    One replay of one DLT. :meth:`run` returns the summary; bad input raises :class:`ReplayError`.

    :param topology: the retry path (its DLTs, parking topic, tiers).
    :param kafka_config: librdkafka configuration.
    :param request: filters, target and transform.
    :param replay_id: a fresh one by default; the same id resumes a replay that was stopped.
    :param dry_run: report what would move and write nothing (not even the log topic).
    :param chunk_size: records per Kafka transaction.
    :param move_cap: at most this many moves listed in the summary (None: all).
    :param transforms: when given (the replay DAG, the operator), ``request.transform`` is a name of
        this mapping (name -> ``package.module:function``); any other value fails before anything is
        imported or read. None (the command line): ``request.transform`` is the path itself.
    :param allowed_targets: topics beyond the topology's main topic and retry tiers that records may
        be replayed to (``--to`` or the original-topic header).
    """

    def __init__(
        self,
        topology: Topology,
        kafka_config: Mapping[str, Any],
        request: ReplayRequest,
        *,
        replay_id: str | None = None,
        dry_run: bool = False,
        chunk_size: int = 100,
        move_cap: int | None = None,
        transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX,
        clock: Callable[[], int] = wall_clock_ms,
        transforms: Mapping[str, str] | None = None,
        allowed_targets: Collection[str] = (),
    ) -> None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ReplayError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
        self.topology = topology
        self.kafka_config = kafka_config
        self.request = request
        self.clock = clock
        self.replay_id = check_replay_id(replay_id) if replay_id else new_replay_id(clock())
        self.dry_run = dry_run
        self.chunk_size = chunk_size
        self.move_cap = move_cap
        self.source = source_topic(topology, request.dlt)
        request.build_filter(clock())  # a bad filter fails here, before any Kafka client is created
        self.allowed_targets = frozenset(allowed_targets)
        check_target_spec(topology, self.source, request.to, self.allowed_targets)
        self.transform: Transform | None = load_transform(resolve_transform(request.transform, transforms))
        self.log_topic = log_topic(self.source)
        self.transactional_id = replay_transactional_id(transactional_id_prefix, self.source)
        self.summary: ReplaySummary | None = None

    # ------------------------------------------------------------------ the three steps
    def run(self) -> ReplaySummary:
        """Run the replay; a partial summary stays in :attr:`summary` when it stops with an error."""
        with TopicReader(self.kafka_config) as reader:
            partitions = self._partitions(reader, self.source, "--dlt")
            producer = None if self.dry_run else self._fence()
            try:
                plan, selection, replay_log = self._resume(reader, partitions)
                summary = self.summary = ReplaySummary(
                    self.replay_id,
                    self.topology.source,
                    self.source,
                    self.log_topic,
                    self.dry_run,
                    selection.describe(),
                    self.request.to,
                    self.request.transform,
                    started_ms=plan["started_ms"],
                    resumed="ends" in plan,
                )
                candidates, seen_ends = self._select(reader, selection, replay_log, plan.get("ends"), summary)
                self._check_targets(reader, candidates)
                if producer is None:
                    for c in candidates:
                        if not c.moved_before:
                            summary.add_move(
                                Move(
                                    c.partition,
                                    c.offset,
                                    c.target.topic,
                                    _shown(c.target.partition),
                                    c.target.attempt,
                                    c.transformed,
                                    by_key=c.target.partition == BY_KEY,
                                ),
                                self.move_cap,
                            )
                else:
                    self._write(
                        reader,
                        producer,
                        summary,
                        plan,
                        seen_ends,
                        [c for c in candidates if not c.moved_before],
                    )
                summary.finished_ms = self.clock()
                return summary
            except ReplayAbortedError as exc:
                if self.summary is not None:
                    self.summary.status, self.summary.error = "failed", str(exc)
                raise
            # No flush on the way out (as engine.clients.open_producer): the producer is transactional, so
            # commit_transaction flushed every committed chunk and what is left belongs to an aborted one;
            # a fenced (fatal) producer's flush raises, hiding the run's own error.

    def _resume(self, reader: TopicReader, partitions: int) -> tuple[dict[str, Any], ReplayFilter, ReplayLog]:
        """The log, this replay id's plan (``ends`` only when resuming one) and the checked filter."""
        replay_log = read_log(reader, self.log_topic)
        logged = replay_log.plans.get(self.replay_id)
        if logged is not None and logged["request"] != self.request.spec():
            raise ReplayError(
                f"replay id {self.replay_id} was started with other options ({logged['request']}); "
                "rerun it with the same options, or use a new replay id"
            )
        plan: dict[str, Any] = (
            {"started_ms": self.clock()}
            if logged is None
            else {"started_ms": logged["started_ms"], "ends": {int(p): e for p, e in logged["ends"].items()}}
        )
        selection = self.request.build_filter(plan["started_ms"])
        selection.check_partitions(self.source, partitions)
        return plan, selection, replay_log

    def _write(
        self,
        reader: TopicReader,
        producer: Producer,
        summary: ReplaySummary,
        plan: dict[str, Any],
        seen_ends: dict[int, int],
        todo: list[_Candidate],
    ) -> None:
        """Log the plan (first run of this id), move ``todo``, log the replay as done."""
        if "ends" not in plan:
            self._log_only(
                producer,
                plan_key(self.replay_id),
                {
                    "replay_id": self.replay_id,
                    "request": self.request.spec(),
                    "started_ms": plan["started_ms"],
                    "ends": {str(p): e for p, e in seen_ends.items()},
                },
            )
        self._move(reader, producer, todo, summary)
        self._log_only(
            producer,
            done_key(self.replay_id),
            {
                "replay_id": self.replay_id,
                "moved": summary.moved + summary.moved_before,
                "targets": summary.targets,
                "finished_ms": self.clock(),
            },
        )

    def _partitions(self, reader: TopicReader, topic: str, option: str) -> int:
        try:
            return reader.partitions(topic)
        except KafkaConfigError as exc:
            raise ReplayError(f"{option} {topic}: {exc}") from None

    def _fence(self) -> Producer:
        ensure_log_topic(self.kafka_config, self.log_topic)
        producer = Producer(producer_config(self.kafka_config, self.transactional_id))
        try:
            init_transactions(producer, _TIMEOUT_S, topic=self.log_topic)
        except KafkaException as exc:
            raise ReplayAbortedError(
                f"cannot initialise transactions for replays of {self.source}: {exc.args[0].str()}"
            ) from exc
        return producer

    # ------------------------------------------------------------------ step 2: select and check
    def _select(
        self,
        reader: TopicReader,
        selection: ReplayFilter,
        replay_log: ReplayLog,
        ends: dict[int, int] | None,
        summary: ReplaySummary,
    ) -> tuple[list[_Candidate], dict[int, int]]:
        candidates: list[_Candidate] = []
        seen_ends: dict[int, int] = {}
        for partition in selection.chosen_partitions(reader.partitions(self.source)):
            end = None if ends is None else ends.get(partition, 0)
            seen_ends[partition] = end if end is not None else 0
            for message in reader.read(self.source, partition, start=selection.start_offset, end=end):
                if end is None:
                    seen_ends[partition] = offset_of(message) + 1
                summary.scanned += 1
                record = DltRecord.from_message(message)
                if not selection.matches(record):
                    continue
                summary.matched += 1
                entry = replay_log.moved.get((record.partition, record.offset))
                if entry is not None and entry.get("replay_id") != self.replay_id:
                    summary.already_replayed += 1
                    continue
                if entry is not None:
                    target = Target(
                        entry["target"], entry.get("target_partition", BY_KEY), entry.get("attempt")
                    )
                    candidates.append(
                        _Candidate(
                            partition,
                            record.offset,
                            record.timestamp_ms,
                            target,
                            bool(entry.get("transformed")),
                            moved_before=True,
                        )
                    )
                    continue
                edited = apply_transform(self.transform, self.request.transform, record)
                if edited is None:
                    summary.left_out += 1
                    continue
                target = target_for(
                    self.topology,
                    self.source,
                    self.request.to,
                    record,
                    key_changed=edited.key != record.key,
                    allowed=self.allowed_targets,
                )
                candidates.append(
                    _Candidate(partition, record.offset, record.timestamp_ms, target, _edited(record, edited))
                )
        if selection.limit is not None and len(candidates) > selection.limit:
            candidates.sort(key=lambda c: (c.timestamp_ms, c.partition, c.offset))
            summary.beyond_limit = len(candidates) - selection.limit
            candidates = candidates[: selection.limit]
        candidates.sort(key=lambda c: (c.partition, c.offset))
        summary.selected = len(candidates)
        summary.moved_before = sum(1 for c in candidates if c.moved_before)
        return candidates, seen_ends

    def _check_targets(self, reader: TopicReader, candidates: list[_Candidate]) -> None:
        """Every target topic must exist; a partition the target lacks becomes 'by key'."""
        topics = sorted({c.target.topic for c in candidates if not c.moved_before})
        counts: dict[str, int] = {}
        missing: list[str] = []
        for topic in topics:
            try:
                counts[topic] = partition_counts(reader.consumer, [topic])[topic]
            except KafkaConfigError:
                missing.append(topic)
        if missing:
            examples = {
                t: [f"{self.source}[{c.partition}]@{c.offset}" for c in candidates if c.target.topic == t][:3]
                for t in missing
            }
            raise ReplayError(
                "target topic(s) do not exist: "
                + "; ".join(
                    f"{t} (for {', '.join(e)}{' ...' if len(e) == 3 else ''})" for t, e in examples.items()
                )
                + ". Create them, or pick another target with --to"
            )
        for c in candidates:
            count = counts.get(c.target.topic)
            if count is not None and c.target.partition >= count:
                c.target = Target(c.target.topic, BY_KEY, c.target.attempt)

    # ------------------------------------------------------------------ step 3: move
    def _move(
        self, reader: TopicReader, producer: Producer, todo: list[_Candidate], summary: ReplaySummary
    ) -> None:
        by_partition: dict[int, dict[int, _Candidate]] = {}
        for c in todo:
            by_partition.setdefault(c.partition, {})[c.offset] = c
        chunk: list[tuple[DltRecord, _Candidate]] = []
        for partition, wanted in sorted(by_partition.items()):
            first, last = min(wanted), max(wanted)
            for message in reader.read(self.source, partition, start=first, end=last + 1):
                candidate = wanted.get(offset_of(message))
                if candidate is None:
                    continue
                record = DltRecord.from_message(message)
                chunk.append((record, candidate))
                if len(chunk) >= self.chunk_size:
                    self._commit_chunk(producer, chunk, summary)
                    chunk = []
        if chunk:
            self._commit_chunk(producer, chunk, summary)
        if summary.moved != len(todo):
            raise ReplayAbortedError(
                f"replay {self.replay_id}: found {summary.moved} of the {len(todo)} selected "
                f"records of {self.source} when moving them; rerun with the same replay id"
            )

    def _commit_chunk(
        self, producer: Producer, chunk: list[tuple[DltRecord, _Candidate]], summary: ReplaySummary
    ) -> None:
        moves: list[tuple[Move, str]] = []  # each move and the digest of its copy
        failures: list[str] = []
        try:
            producer.begin_transaction()
            for record, candidate in chunk:
                moves.append(self._produce(producer, record, candidate, failures))
            # copies first, acknowledged, then their log entries: a log entry never exists without its copy
            if producer.flush(_TIMEOUT_S) or failures:
                raise ReplayAbortedError(
                    f"replay {self.replay_id}: {len(failures)} replayed record(s) were not "
                    f"delivered ({'; '.join(failures[:3])}); the chunk was aborted"
                )
            at = self.clock()
            for move, digest in moves:
                producer.produce(
                    self.log_topic,
                    key=record_key(move.partition, move.offset),
                    value=encode(
                        {
                            "replay_id": self.replay_id,
                            "partition": move.partition,
                            "offset": move.offset,
                            "target": move.target,
                            "target_partition": move.target_partition
                            if move.target_partition is not None
                            else BY_KEY,
                            "target_offset": move.target_offset,
                            "attempt": move.attempt,
                            "transformed": move.transformed,
                            "by_key": move.by_key,
                            "at_ms": at,
                            "copy": digest,
                        }
                    ),
                )
            producer.commit_transaction(_TIMEOUT_S)
        except ReplayError as exc:
            self._abort(producer)
            raise ReplayAbortedError(
                f"{exc}; the chunk was aborted, {summary.moved} record(s) moved before it "
                "stay moved (and logged)"
            ) from exc
        except ReplayAbortedError:
            self._abort(producer)
            raise
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() in (
                KafkaError._FENCED,
                KafkaError.PRODUCER_FENCED,
                KafkaError.INVALID_PRODUCER_EPOCH,
            ):
                raise ReplayAbortedError(
                    f"replay {self.replay_id} of {self.source} was fenced by another replay "
                    "of the same DLT; records moved so far are logged, rerun with the same "
                    "replay id to finish"
                ) from exc
            if error.txn_requires_abort():
                self._abort(producer)
            raise ReplayAbortedError(
                f"replay {self.replay_id}: a transaction failed and was aborted "
                f"({error.str()}); rerun with the same replay id to finish"
            ) from exc
        except SystemError as exc:
            # confluent-kafka's flush() of a producer that turned fatal mid-call (fenced by another replay of
            # the same DLT while this one waited) can fail without a Kafka error: the transaction is lost
            # either way
            raise ReplayAbortedError(
                f"replay {self.replay_id} of {self.source}: the producer failed while "
                f"flushing ({exc}), most likely fenced by another replay of the same DLT; "
                "records moved so far are logged, rerun with the same replay id to finish"
            ) from exc
        summary.transactions += 1
        for move, _ in moves:
            summary.moved += 1
            summary.add_move(move, self.move_cap)

    def _produce(
        self, producer: Producer, record: DltRecord, candidate: _Candidate, failures: list[str]
    ) -> tuple[Move, str]:
        edited = apply_transform(self.transform, self.request.transform, record)
        if edited is None:
            raise ReplayError(
                f"transform {self.request.transform!r} left out {record.coordinates} when moving it, "
                "but kept it when the replay was checked; the transform must be deterministic"
            )
        target = target_for(
            self.topology,
            self.source,
            self.request.to,
            record,
            key_changed=edited.key != record.key,
            allowed=self.allowed_targets,
        )
        if target.topic != candidate.target.topic:
            raise ReplayError(f"{record.coordinates}: target changed between check and move")
        partition = candidate.target.partition
        now = self.clock()
        audit = ReplayAudit(self.replay_id, record.topic, record.partition, record.offset, now)
        headers = replayed_headers(edited.headers, audit, attempt=target.attempt, due_ms=now)
        move = Move(
            record.partition,
            record.offset,
            target.topic,
            _shown(partition),
            target.attempt,
            _edited(record, edited),
            by_key=partition == BY_KEY,
        )

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                failures.append(f"{target.topic}: {err.str()}")
            else:
                move.target_partition, move.target_offset = msg.partition(), msg.offset()

        producer.produce(
            target.topic,
            value=edited.value,
            key=edited.key,
            # the stubs' List is invariant; a list of (str, bytes | None) is what produce() takes
            headers=headers,  # type: ignore[arg-type]
            partition=partition,
            on_delivery=delivered,
        )
        producer.poll(0)
        return move, copy_digest(self.replay_id, edited.key, edited.value)

    def _log_only(self, producer: Producer, key: bytes, value: dict[str, Any]) -> None:
        try:
            producer.begin_transaction()
            producer.produce(self.log_topic, key=key, value=encode(value))
            producer.commit_transaction(_TIMEOUT_S)
        except KafkaException as exc:
            self._abort(producer)
            raise ReplayAbortedError(
                f"replay {self.replay_id}: cannot write {key.decode()} to {self.log_topic}: "
                f"{exc.args[0].str()}"
            ) from exc

    @staticmethod
    def _abort(producer: Producer) -> None:
        # on failure the broker times the transaction out; the next replay's init_transactions fences it
        with contextlib.suppress(KafkaException):
            producer.abort_transaction(_TIMEOUT_S)


def _edited(record: DltRecord, edited: DltRecord) -> bool:
    return (edited.key, edited.value, tuple(map(tuple, edited.headers))) != (
        record.key,
        record.value,
        record.headers,
    )


def _shown(partition: int) -> int | None:
    return None if partition == BY_KEY else partition


def replay_dlt(
    topology: Topology, kafka_config: Mapping[str, Any], request: ReplayRequest, **kwargs: Any
) -> ReplaySummary:
    """Run one replay (see :class:`Replay` for the keyword arguments)."""
    return Replay(topology, kafka_config, request, **kwargs).run()
