"""
Step 3 of a replay: moving the selected records, one Kafka transaction per chunk.

In each transaction the copies (with audit headers and a fresh attempt count) are produced and
acknowledged, then their ``record/<partition>/<offset>`` replay log entries (each with the digest of
its copy's replay id, key and value) are produced, then the transaction commits: a record's copy and
its log entry are committed together or not at all. A failure aborts the chunk and raises
:class:`~airflow_kafka_retry.dlt.errors.ReplayAbortedError`; what earlier chunks moved stays moved
and logged, so a rerun with the same replay id finishes the job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException

from airflow_kafka_retry.dlt.errors import ReplayAbortedError
from airflow_kafka_retry.dlt.records import DltRecord
from airflow_kafka_retry.dlt.replay_marks import hold_of, moved_mark, write_mark
from airflow_kafka_retry.dlt.replay_select import Candidate, RecordEdit, shown, was_edited
from airflow_kafka_retry.dlt.replay_targets import BY_KEY
from airflow_kafka_retry.dlt.summary import Move, ReplaySummary
from airflow_kafka_retry.engine.kafka.deadlines import AttemptAbandoned, CallDeadlines
from airflow_kafka_retry.engine.kafka.messages import offset_of
from airflow_kafka_retry.engine.logs.compacted_log import encode_entry
from airflow_kafka_retry.engine.logs.replay_log import record_key
from airflow_kafka_retry.policy.dead_letters.framework_headers import framework_headers_kept
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.headers.replay import ReplayAudit, copy_digest, replayed_headers

if TYPE_CHECKING:
    from confluent_kafka import Producer

    from airflow_kafka_retry.engine.kafka.reading import TopicReader

#: How long a transaction's flush and commit may take.
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ReplayMoves:
    """
    The writes of one replay, on its transactional producer: moved records and replay log entries.

    :param chunk_size: records per Kafka transaction.
    :param move_cap: at most this many moves listed in the summary (None: all).
    :param deadlines: the engine's deadlines on the producer's blocking calls (one attempt's; see
        ``dlt/replay.py``).
    :param boundary: called before each chunk (its rate held, a stop looked for; ``dlt/replay_control.py``).
    :param progress: the replay log entry (the status) written in each chunk's transaction, given its moves.
    """

    replay_id: str
    source: str
    log_topic: str
    edit: RecordEdit
    clock: Callable[[], int]
    chunk_size: int
    move_cap: int | None
    deadlines: CallDeadlines = field(default_factory=lambda: CallDeadlines("replay"))
    boundary: Callable[[ReplaySummary, Callable[[], None]], None] = lambda summary, check: None
    progress: Callable[[ReplaySummary, int], tuple[bytes, bytes]] | None = None

    @property
    def hold_topic(self) -> str | None:
        """Under ``ordering: key``, ``release_on: replay``: where each keyed move is marked."""
        return hold_of(self.edit.topology, self.source)

    @property
    def _coordinator(self) -> str:
        return f"the transaction coordinator of the replays of {self.source}"

    def move(
        self, reader: TopicReader, producer: Producer, todo: list[Candidate], summary: ReplaySummary
    ) -> None:
        """Move ``todo`` (sorted by partition and offset) in chunks of :attr:`chunk_size` records."""
        by_partition: dict[int, dict[int, Candidate]] = {}
        for c in todo:
            by_partition.setdefault(c.partition, {})[c.offset] = c
        chunk: list[tuple[DltRecord, Candidate]] = []
        for partition, wanted in sorted(by_partition.items()):
            first, last = min(wanted), max(wanted)
            for message in reader.read(self.source, partition, start=first, end=last + 1):
                candidate = wanted.get(offset_of(message))
                if candidate is None:
                    continue
                record = DltRecord.from_message(message, queue_family=self.edit.queue_family)
                chunk.append((record, candidate))
                if len(chunk) >= self.chunk_size:
                    self.deadlines.check()  # a replay stopped at once ends between chunks too
                    self.boundary(summary, self.deadlines.check)
                    self._commit_chunk(producer, chunk, summary)
                    chunk = []
        if chunk:
            self.boundary(summary, self.deadlines.check)
            self._commit_chunk(producer, chunk, summary)
        if summary.moved != len(todo):
            raise ReplayAbortedError(
                f"replay {self.replay_id}: found {summary.moved} of the {len(todo)} selected "
                f"records of {self.source} when moving them; rerun with the same replay id"
            )

    def _commit_chunk(
        self, producer: Producer, chunk: list[tuple[DltRecord, Candidate]], summary: ReplaySummary
    ) -> None:
        moves: list[tuple[Move, str]] = []  # each move and the digest of its copy
        records = [record for record, _ in chunk]
        failures: list[str] = []
        try:
            producer.begin_transaction()
            for record, candidate in chunk:
                moves.append(self._produce(producer, record, candidate, failures))
            # copies first, acknowledged, then their log entries: a log entry never exists without its copy
            with self.deadlines.call("flush", TIMEOUT_S, "the leaders of the replay's targets"):
                pending = producer.flush(TIMEOUT_S)
            if pending or failures:
                raise ReplayAbortedError(
                    f"replay {self.replay_id}: {len(failures)} replayed record(s) were not "
                    f"delivered ({'; '.join(failures[:3])}); the chunk was aborted"
                )
            at = self.clock()
            hold = self.hold_topic
            if hold is not None:  # where each head went, now its copy's offset is known
                for record, (move, _) in zip(records, moves, strict=True):
                    if (mark := moved_mark(record, move, at)) is not None:
                        write_mark(producer, hold, record.partition, mark)
            for record, (move, digest) in zip(records, moves, strict=True):
                producer.produce(
                    self.log_topic,
                    key=record_key(move.partition, move.offset),
                    value=encode_entry(
                        {
                            **self.edit.log_fields(record),
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
            if self.progress is not None:
                status, value = self.progress(summary, len(moves))
                producer.produce(self.log_topic, key=status, value=value)
            with self.deadlines.call("commit_transaction", TIMEOUT_S, self._coordinator):
                producer.commit_transaction(TIMEOUT_S)
        except AttemptAbandoned:
            # stopped or stuck: end the open transaction now (unwatched: this attempt is over anyway)
            with contextlib.suppress(KafkaException):
                producer.abort_transaction(5.0)
            raise
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
        self, producer: Producer, record: DltRecord, candidate: Candidate, failures: list[str]
    ) -> tuple[Move, str]:
        edited = self.edit.apply(record)
        if edited is None:
            raise ReplayError(
                f"transform {self.edit.transform_name!r} left out {record.coordinates} when moving it, "
                "but kept it when the replay was checked; the transform must be deterministic"
            )
        target = self.edit.target(record, edited)
        if target.topic != candidate.target.topic:
            raise ReplayError(f"{record.coordinates}: target changed between check and move")
        partition = candidate.target.partition
        now = self.clock()
        audit = ReplayAudit(self.replay_id, record.topic, record.partition, record.offset, now)
        kept = framework_headers_kept(edited.headers, self.edit.framework_headers)
        keep_failure = self.edit.selector is not None and self.edit.selector.keeps_failure
        headers = replayed_headers(kept, audit, attempt=target.attempt, due_ms=now, keep_failure=keep_failure)
        move = Move(
            record.partition,
            record.offset,
            target.topic,
            shown(partition),
            target.attempt,
            was_edited(record, edited),
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

    def log_only(self, producer: Producer, key: bytes, value: dict[str, Any]) -> None:
        """One replay log entry (a plan, a finished replay) in a transaction of its own."""
        self.log_entries(producer, [(key, encode_entry(value))])

    def log_entries(self, producer: Producer, entries: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Replay log entries (encoded; None: a tombstone) in a transaction of their own."""
        try:
            producer.begin_transaction()
            for key, value in entries:
                producer.produce(self.log_topic, key=key, value=value)
            with self.deadlines.call("commit_transaction", TIMEOUT_S, self._coordinator):
                producer.commit_transaction(TIMEOUT_S)
        except KafkaException as exc:
            self._abort(producer)
            keys = ", ".join(key.decode() for key, _ in entries)
            raise ReplayAbortedError(
                f"replay {self.replay_id}: cannot write {keys} to {self.log_topic}: {exc.args[0].str()}"
            ) from exc

    def _abort(self, producer: Producer) -> None:
        # on failure the broker times the transaction out; the next replay's init_transactions fences it
        with (
            contextlib.suppress(KafkaException),
            self.deadlines.call("abort_transaction", TIMEOUT_S, self._coordinator),
        ):
            producer.abort_transaction(TIMEOUT_S)
