"""
The replay log: a compacted ``<dlt>-replay-log`` topic that says which DLT records were replayed.

Keys (UTF-8) and values (JSON, ``engine/logs/compacted_log.py``'s codec; a tombstone deletes its key):

* ``record/<partition>/<offset>``: the DLT record at those coordinates was moved -- by which replay,
  to which topic, partition and offset, when, and ``copy``: the
  :func:`~airflow_kafka_retry.policy.headers.replay.copy_digest` of the copy produced (replay id, key,
  value). Written in the same Kafka transaction as the moved record itself, so a record is in the
  log exactly when its copy is in the target: a later replay, whatever its filters, never moves it
  again. Only a failing record whose own key and value give ``copy`` is trusted as that copy
  (:meth:`ReplayLog.confirms`). An entry written before ``copy`` existed is still read: its DLT
  record counts as replayed (never moved again, shown by ``dlt inspect``), but it confirms no
  claim, so such a copy that fails again is dead-lettered rather than parked.
* ``plan/<replay id>``: the options of a replay and the end of each DLT partition when it began,
  written before its first move; a rerun with the same id must give the same options and works on
  the same records, so a replay killed half way is finished by running it again.
* ``done/<replay id>``: the counts of a finished replay.
* ``status/<replay id>``: what the replay is doing or how it ended (``dlt/replay_status.py``): written when
  it starts moving, in each chunk's transaction, and when it ends (done, stopped, failed).
* ``stop/<replay id>``: a request to stop the replay at its next chunk boundary (``dlt replay-stop``),
  deleted (a tombstone) by the run that honours it and by the next run of that id when it starts.

Readers ignore kinds they do not know, so an older version reads a log with ``status`` and ``stop`` entries.

The log has one partition (created on a replay's first non-dry run). It is read to its end,
``read_committed``, after the replay's transactional producer has fenced any earlier run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError, NotAuthorized
from airflow_kafka_retry.engine.kafka.messages import offset_of
from airflow_kafka_retry.engine.logs.compacted_log import decode_entry
from airflow_kafka_retry.engine.logs.log_topic import ensure_compacted_log, log_topic_name
from airflow_kafka_retry.policy.client_names import REPLAY_LOG_SUFFIX
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.headers.replay import entry_confirms

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.kafka.reading import TopicReader
    from airflow_kafka_retry.policy.headers.replay import ReplayAudit

LOG_SUFFIX = REPLAY_LOG_SUFFIX


def log_topic(source: str) -> str:
    """The replay log of ``source`` (a DLT or parking topic)."""
    return log_topic_name(
        source,
        LOG_SUFFIX,
        what=f"the replay log of {source!r}",
        fix="shorten the topic name",
        error=ReplayError,
    )


def record_key(partition: int, offset: int) -> bytes:
    return f"record/{partition}/{offset}".encode()


def plan_key(replay_id: str) -> bytes:
    return f"plan/{replay_id}".encode()


def done_key(replay_id: str) -> bytes:
    return f"done/{replay_id}".encode()


def status_key(replay_id: str) -> bytes:
    return f"status/{replay_id}".encode()


def stop_key(replay_id: str) -> bytes:
    return f"stop/{replay_id}".encode()


@dataclass
class ReplayLog:
    """
    What the log says (last value per key): moved coordinates, plans, finished replays, statuses, stops.

    ``position``: the offset after the last entry read.
    """

    topic: str
    moved: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    stops: dict[str, dict[str, Any]] = field(default_factory=dict)
    position: int = 0

    def replays(self) -> list[dict[str, Any]]:
        """
        Every replay in the log, oldest first: id, start, records moved, and whether it finished.

        An unfinished one was stopped part way (killed, fenced, failed): rerun it with its id.
        """
        out = []
        for replay_id, plan in sorted(self.plans.items(), key=lambda item: item[1].get("started_ms", 0)):
            moved = sum(1 for entry in self.moved.values() if entry.get("replay_id") == replay_id)
            out.append(
                {
                    "replay_id": replay_id,
                    "started_ms": plan.get("started_ms"),
                    "moved": moved,
                    "finished": replay_id in self.done,
                }
            )
        return out

    def confirms(self, audit: ReplayAudit, digest: str) -> bool:
        """
        True when this log recorded ``audit``'s move of the copy whose digest is ``digest``.

        The entry of (DLT partition, offset) must name the audit's replay id and that digest; an entry
        without a digest (written by an older version) confirms nothing.
        """
        return entry_confirms(self.moved.get((audit.partition, audit.offset)), audit, digest)

    def add(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        kind, _, rest = key.decode("utf-8", errors="replace").partition("/")
        data = decode_entry(value)
        if kind == "record":
            partition, _, offset = rest.partition("/")
            coords = (int(partition), int(offset))
            if data is None:
                self.moved.pop(coords, None)
            else:
                self.moved[coords] = data
        elif kind in ("plan", "done", "status", "stop"):
            table = {"plan": self.plans, "done": self.done, "status": self.statuses, "stop": self.stops}[kind]
            if data is None:
                table.pop(rest, None)
            else:
                table[rest] = data


def read_log(
    reader: TopicReader, topic: str, *, known: ReplayLog | None = None, start: int | None = None
) -> ReplayLog:
    """
    Read the whole log; an empty log when the topic does not exist yet.

    With ``known`` (what the log said up to offset ``start`` of its one partition), only the entries from
    ``start`` on are read, into ``known``: each entry's last value wins, as compaction keeps it. The
    result's ``position`` is where the next incremental read starts.
    """
    result = known if known is not None else ReplayLog(topic)
    try:
        partitions = reader.partitions(topic)
    except NotAuthorized:
        raise  # the log may well exist: its reader may not see it
    except KafkaConfigError:  # no log yet
        return result
    for partition in range(partitions):
        for message in reader.read(topic, partition, start=start if known is not None else None):
            result.position = max(result.position, offset_of(message) + 1)
            try:
                result.add(message.key(), message.value())
            except (ValueError, UnicodeDecodeError) as exc:
                raise ReplayError(
                    f"{topic}[{partition}]@{message.offset()} is not a replay log entry ({exc}); "
                    f"{topic} must only be written by airflow-kafka-retry replays"
                ) from None
    return result


def ensure_replay_log(kafka_config: Mapping[str, Any], topic: str, *, timeout: float = 30.0) -> bool:
    """Create the compacted log topic (one partition) if it is missing; True when it was created."""
    what, config = "the replay log topic", {"cleanup.policy": "compact"}
    return ensure_compacted_log(
        kafka_config, topic, what=what, config=config, error=ReplayError, timeout=timeout
    )
