"""
Step 2 of a replay: which DLT records it moves, and where (nothing is written here).

Every DLT partition asked for is read (without committing) up to its end (for a resumed replay id:
the ends recorded in its plan). Records pass the filters; those in the replay log are skipped
(whatever replay moved them); the transform runs on every remaining record and its result is checked;
each record's target is resolved (:class:`RecordEdit`, again when the record is moved) and every
target topic must exist. Bad input raises :class:`~airflow_kafka_retry.policy.errors.ReplayError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from airflow_kafka_retry.dlt.records import DltRecord
from airflow_kafka_retry.dlt.replay_targets import BY_KEY, Target, target_for
from airflow_kafka_retry.dlt.summary import Move
from airflow_kafka_retry.dlt.transform import Transform, apply_transform
from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError, NotAuthorized, partition_counts
from airflow_kafka_retry.engine.kafka.messages import offset_of
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.headers.bounds import bound_value

if TYPE_CHECKING:
    from airflow_kafka_retry.dlt.filters import ReplayFilter
    from airflow_kafka_retry.dlt.summary import ReplaySummary
    from airflow_kafka_retry.engine.kafka.reading import TopicReader
    from airflow_kafka_retry.engine.logs.replay_log import ReplayLog
    from airflow_kafka_retry.policy.dead_letters.families import Family
    from airflow_kafka_retry.policy.dead_letters.framework_headers import FrameworkHeaders
    from airflow_kafka_retry.policy.topology.model import Topology


class Selector(Protocol):
    """
    What a redrive round adds to a replay's selection (``dlt/redrive.py``): deterministic per record.

    ``keep`` leaves a record out (counted as ``left_out``) as a transform returning None does; ``log_fields``
    adds to a moved record's replay log entry; ``keeps_failure``: the copies keep their exception headers.
    """

    keeps_failure: bool

    def keep(self, record: DltRecord) -> bool: ...
    def log_fields(self, record: DltRecord) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RecordEdit:
    """
    How a replay edits a DLT record (its transform) and where the edited copy goes (its target).

    ``selector`` (a redrive round's): which records the round takes, and what their log entries add.
    """

    topology: Topology
    source: str
    to: str | None
    transform_name: str | None
    transform: Transform | None
    allowed_targets: frozenset[str]
    framework_headers: FrameworkHeaders = "auto"
    selector: Selector | None = None

    @property
    def queue_family(self) -> Family | None:
        """What the topology's ``dead_letter_queues`` says the source's headerless records are."""
        return self.topology.queue_family(self.source)

    def apply(self, record: DltRecord) -> DltRecord | None:
        """The record as the transform edits it; None when the transform (or the selector) leaves it out."""
        if self.selector is not None and not self.selector.keep(record):
            return None
        return apply_transform(self.transform, self.transform_name, record)

    def log_fields(self, record: DltRecord) -> dict[str, Any]:
        """What the selector adds to ``record``'s replay log entry (nothing without one)."""
        return {} if self.selector is None else self.selector.log_fields(record)

    def target(self, record: DltRecord, edited: DltRecord) -> Target:
        return target_for(
            self.topology,
            self.source,
            self.to,
            record,
            key_changed=edited.key != record.key,
            allowed=self.allowed_targets,
        )


@dataclass
class Candidate:
    """A selected DLT record: where it goes, and whether this replay id moved it in an earlier run."""

    partition: int
    offset: int
    timestamp_ms: int
    target: Target
    transformed: bool
    moved_before: bool = False

    def planned(self) -> Move:
        """The move a dry run lists for it."""
        partition = self.target.partition
        return Move(
            self.partition,
            self.offset,
            self.target.topic,
            shown(partition),
            self.target.attempt,
            self.transformed,
            by_key=partition == BY_KEY,
        )


def select_candidates(
    reader: TopicReader,
    edit: RecordEdit,
    replay_id: str,
    selection: ReplayFilter,
    replay_log: ReplayLog,
    ends: Mapping[int, int] | None,
    summary: ReplaySummary,
) -> tuple[list[Candidate], dict[int, int]]:
    """The records to move, sorted by (partition, offset), and the end each DLT partition was read to."""
    source = edit.source
    candidates: list[Candidate] = []
    seen_ends: dict[int, int] = {}
    for partition in selection.chosen_partitions(reader.partitions(source)):
        end = None if ends is None else ends.get(partition, 0)
        seen_ends[partition] = end if end is not None else 0
        for message in reader.read(source, partition, start=selection.start_offset, end=end):
            if end is None:
                seen_ends[partition] = offset_of(message) + 1
            summary.scanned += 1
            record = DltRecord.from_message(message, queue_family=edit.queue_family)
            if not selection.matches(record):
                continue
            summary.matched += 1
            entry = replay_log.moved.get((record.partition, record.offset))
            if entry is not None and entry.get("replay_id") != replay_id:
                summary.already_replayed += 1
                continue
            if entry is not None:
                target = Target(entry["target"], entry.get("target_partition", BY_KEY), entry.get("attempt"))
                candidates.append(
                    Candidate(
                        partition,
                        record.offset,
                        record.timestamp_ms,
                        target,
                        bool(entry.get("transformed")),
                        moved_before=True,
                    )
                )
                continue
            if not record.dead_letter.record_copied:
                summary.add_not_replayable(nothing_to_replay(record))
                continue
            edited = edit.apply(record)
            if edited is None:
                summary.left_out += 1
                continue
            target = edit.target(record, edited)
            candidates.append(
                Candidate(partition, record.offset, record.timestamp_ms, target, was_edited(record, edited))
            )
    if selection.limit is not None and len(candidates) > selection.limit:
        candidates.sort(key=lambda c: (c.timestamp_ms, c.partition, c.offset))
        summary.beyond_limit = len(candidates) - selection.limit
        candidates = candidates[: selection.limit]
    candidates.sort(key=lambda c: (c.partition, c.offset))
    summary.selected = len(candidates)
    summary.moved_before = sum(1 for c in candidates if c.moved_before)
    return candidates, seen_ends


def check_targets(reader: TopicReader, source: str, candidates: list[Candidate]) -> None:
    """Every target topic must exist; a partition the target lacks becomes 'by key'."""
    topics = sorted({c.target.topic for c in candidates if not c.moved_before})
    counts: dict[str, int] = {}
    missing: list[str] = []
    for topic in topics:
        try:
            counts[topic] = partition_counts(reader.consumer, [topic], kafka_config=reader.kafka_config)[
                topic
            ]
        except NotAuthorized:
            raise  # it exists, or not: the principal may not see it
        except KafkaConfigError:
            missing.append(topic)
    if missing:
        examples = {
            t: [f"{source}[{c.partition}]@{c.offset}" for c in candidates if c.target.topic == t][:3]
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


def nothing_to_replay(record: DltRecord) -> dict[str, object]:
    """A share-group dead letter without its record, by coordinates, and why it cannot be replayed."""
    letter = record.dead_letter
    origin = (
        f"{bound_value(letter.original_topic)}[{letter.original_partition}]@{letter.original_offset}"
        if letter.original_topic
        else "an unknown record"
    )
    return {
        "partition": record.partition,
        "offset": record.offset,
        "original_topic": bound_value(letter.original_topic),
        "original_partition": letter.original_partition,
        "original_offset": letter.original_offset,
        "reason": (
            f"nothing to replay: the share group {bound_value(letter.group)!r} dead-lettered {origin} "
            "without copying it (errors.deadletterqueue.copy.record.enable=false): no key, no value; "
            "read the source topic at those coordinates while its retention keeps them"
        ),
    }


def was_edited(record: DltRecord, edited: DltRecord) -> bool:
    return (edited.key, edited.value, tuple(map(tuple, edited.headers))) != (
        record.key,
        record.value,
        record.headers,
    )


def shown(partition: int) -> int | None:
    """A target partition as a summary shows it: None for 'by key'."""
    return None if partition == BY_KEY else partition
