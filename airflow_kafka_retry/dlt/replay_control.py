"""
A running replay's controls: its rate, its stop requests, and its status entries in the replay log.

At each chunk boundary (:meth:`RunControl.boundary`) the run waits until its rate lets the next chunk
begin (:class:`~airflow_kafka_retry.policy.timing.pacing.Pacer`), then reads what was appended to the
replay log since it last read it (the log it already follows: one incremental read, on a consumer of its
own that stays on the log's one partition; a few milliseconds when only its own chunk was appended) and
ends cleanly, with
:class:`~airflow_kafka_retry.dlt.errors.ReplayStopped`, when a ``stop/<replay id>`` entry is there. The
chunk before the boundary committed; the one after it has not begun, so nothing is half-moved.

The ``status/<replay id>`` entry (:meth:`RunControl.entry`) is written when the run starts moving (with
a tombstone for any stop request left from an earlier run of the id), in each chunk's transaction, and
when the run ends. Its fields: the replay id, the DLT and its log, the filters, target and transform,
who started it and where (OS user, host, Airflow run), ``state`` (running, done, stopped, failed) and
``reason``, the counts (``moved`` in total by the id, ``moved_this_run``, ``skipped``, ``selected``,
``remaining``), ``rate`` (asked, per second) and ``measured_rate`` (this run's moves per second since its
first move), ``started_ms`` (the id's first run), ``run_started_ms``, ``updated_ms`` and ``ended_ms``.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from airflow_kafka_retry.dlt.errors import ReplayAbortedError, ReplayStopped
from airflow_kafka_retry.engine.kafka.deadlines import CallDeadlines
from airflow_kafka_retry.engine.kafka.messages import offset_of
from airflow_kafka_retry.engine.kafka.reading import reader_config
from airflow_kafka_retry.engine.kafka.scan import ReadError, ReadTimeout
from airflow_kafka_retry.engine.logs.compacted_log import encode_entry
from airflow_kafka_retry.engine.logs.replay_log import ReplayLog, status_key, stop_key
from airflow_kafka_retry.policy.timing.pacing import Pacer, PastDeadline, measured_rate

if TYPE_CHECKING:
    from confluent_kafka import Producer

    from airflow_kafka_retry.dlt.summary import ReplaySummary

log = logging.getLogger(__name__)

#: How long writing a failed run's status may take (the cluster may be what failed).
FAILED_STATUS_TIMEOUT_S = 5.0
#: How long one look for stop requests may wait for the log's leader.
FOLLOW_TIMEOUT_S = 10.0


def started_by(airflow: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Who starts a replay, and where: the OS user, the host and (from Airflow) the DAG, run and task."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for the process's uid (a container's)
        user = None
    return {"user": user, "host": socket.gethostname(), "airflow": dict(airflow) if airflow else None}


@dataclass
class RunControl:
    """
    The rate, stop requests and status of one run of one replay id (see the module's docstring).

    :param info: the status fields fixed for the run (filters, target, who, rate...).
    :param pacer: holds the rate.
    :param clock: wall-clock milliseconds.
    :param replay_log: the log as the attempt read it; stop requests are read into it from its position.
    :param kafka_config: for the consumer that follows the log (None: stop requests are not looked for).
    :param deadlines: the attempt's deadlines, for that consumer's calls.
    """

    replay_id: str
    log_topic: str
    info: dict[str, Any]
    pacer: Pacer
    clock: Callable[[], int]
    run_started_ms: int = 0
    replay_log: ReplayLog | None = field(default=None, repr=False)
    kafka_config: Mapping[str, Any] | None = field(default=None, repr=False)
    deadlines: CallDeadlines | None = field(default=None, repr=False)
    _consumer: Consumer | None = field(default=None, init=False, repr=False)

    def close(self) -> None:
        """Close the consumer following the log (no group to leave: at once)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def start_entries(self, summary: ReplaySummary) -> list[tuple[bytes, bytes | None]]:
        """
        The status ``running``, a tombstone for an old stop request, other replays' ``failed`` statuses.

        Every other replay of the DLT whose status still says running gets the status ``failed``: one replay
        of a DLT runs at a time (one transactional id per DLT), this run's producer fenced any other, and a
        fenced replay cannot write its own status, which would say running for ever.
        """
        entries: list[tuple[bytes, bytes | None]] = [
            (status_key(self.replay_id), self.entry(summary, "running")),
            (stop_key(self.replay_id), None),
        ]
        for other, status in sorted((self.replay_log.statuses if self.replay_log else {}).items()):
            if other == self.replay_id or status.get("state") != "running":
                continue
            reason = (
                f"fenced by replay {self.replay_id} of the same DLT, which started after it (one replay of "
                f"a DLT runs at a time); what it moved is logged: rerun replay id {other} to finish it"
            )
            now = self.clock()
            fenced = {**status, "state": "failed", "reason": reason, "updated_ms": now, "ended_ms": now}
            entries.append((status_key(other), encode_entry(fenced)))
        return entries

    def end_entries(
        self, summary: ReplaySummary, state: str, reason: str | None = None
    ) -> list[tuple[bytes, bytes | None]]:
        """The final status (done, stopped) and a tombstone for the stop request it honoured, if any."""
        entries: list[tuple[bytes, bytes | None]] = [
            (status_key(self.replay_id), self.entry(summary, state, reason=reason))
        ]
        return [*entries, (stop_key(self.replay_id), None)] if state == "stopped" else entries

    def progress(self, summary: ReplaySummary, pending: int) -> tuple[bytes, bytes]:
        """The status written in a chunk's transaction, its ``pending`` moves counted."""
        return status_key(self.replay_id), self.entry(summary, "running", pending=pending)

    def entry(
        self, summary: ReplaySummary, state: str, *, pending: int = 0, reason: str | None = None
    ) -> bytes:
        now, moved = self.clock(), summary.moved + pending
        summary.measured_rate = measured_rate(moved, self.pacer.elapsed())
        return encode_entry(
            {
                **self.info,
                "state": state,
                "reason": reason,
                "moved": summary.moved_before + moved,
                "moved_this_run": moved,
                "skipped": summary.already_replayed + summary.left_out + summary.not_replayable,
                "selected": summary.selected,
                "remaining": summary.selected - summary.moved_before - moved,
                "measured_rate": summary.measured_rate,
                "started_ms": summary.started_ms,
                "run_started_ms": self.run_started_ms,
                "updated_ms": now,
                "ended_ms": None if state == "running" else now,
            }
        )

    def boundary(self, summary: ReplaySummary, check: Callable[[], None]) -> None:
        """
        Between two chunks: hold the rate, then look for a stop request.

        :raises ReplayStopped: a stop was requested, or the rate could be held only past the run's deadline.
        """
        try:
            self.pacer.wait(summary.moved, check)
        except PastDeadline as exc:
            raise ReplayStopped(f"the run's deadline: {exc}") from None
        if self.replay_log is None or self.kafka_config is None:
            return
        try:
            self._read_new(self.replay_log, self.kafka_config)
        except (KafkaException, ReadError) as exc:  # a ReadTimeout is transient: the attempt is retried
            raise ReplayAbortedError(
                f"replay {self.replay_id}: cannot look for stop requests: {exc}"
            ) from exc
        request = self.replay_log.stops.get(self.replay_id)
        if request is not None:
            who = request.get("requested_by") or {}
            reason = request.get("reason") or "no reason given"
            raise ReplayStopped(
                f"stop requested by {who.get('user') or 'an unknown user'} on {who.get('host') or '?'} "
                f"({reason})"
            )

    def _read_new(self, replay_log: ReplayLog, kafka_config: Mapping[str, Any]) -> None:
        """
        What was committed to the log since ``replay_log.position``, read into it.

        The consumer stays assigned to the log between boundaries, so what the run's own chunk appended is
        usually fetched already: a boundary costs one ListOffsets request and a few polls.
        """
        tp, where = TopicPartition(self.log_topic, 0), f"the leader of {self.log_topic}[0]"
        if self._consumer is None:
            self._consumer = Consumer({**reader_config(kafka_config), "fetch.wait.max.ms": 10})
            self._consumer.assign([TopicPartition(self.log_topic, 0, replay_log.position)])
        deadlines = self.deadlines or CallDeadlines(f"{self.log_topic}[0]")
        with deadlines.call("get_watermark_offsets", FOLLOW_TIMEOUT_S, where):
            _, high = self._consumer.get_watermark_offsets(tp, timeout=FOLLOW_TIMEOUT_S, cached=False)
        until = time.monotonic() + FOLLOW_TIMEOUT_S
        while replay_log.position < high:
            if time.monotonic() > until:
                raise ReadTimeout(f"{self.log_topic}[0]: not read to offset {high} in {FOLLOW_TIMEOUT_S:g}s")
            with deadlines.call("poll", 1.0, where):
                message = self._consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                # the end of what is committed (a commit marker is never a record): read from there next
                replay_log.position = max(replay_log.position, offset_of(message))
                return
            if error is not None:
                raise KafkaException(error)
            replay_log.add(message.key(), message.value())
            replay_log.position = offset_of(message) + 1

    def write_failed(self, producer: Producer, summary: ReplaySummary, reason: str) -> None:
        """
        Best effort: the status ``failed``, in a transaction of its own, within a few seconds.

        Not when the run was fenced: the run that fenced it (same DLT) writes its status
        (:meth:`start_entries`).
        """
        if "fenced" in reason:
            return
        try:
            producer.begin_transaction()
            key, value = status_key(self.replay_id), self.entry(summary, "failed", reason=reason)
            producer.produce(self.log_topic, key=key, value=value)
            producer.commit_transaction(FAILED_STATUS_TIMEOUT_S)
        except Exception as exc:  # the cluster may be what failed: the status then says running, not updated
            log.warning(
                "replay %s: cannot write its failed status to %s: %s", self.replay_id, self.log_topic, exc
            )
            with contextlib.suppress(Exception):
                producer.abort_transaction(FAILED_STATUS_TIMEOUT_S)


class _Replaying(Protocol):
    """What :func:`run_control` reads of a :class:`~airflow_kafka_retry.dlt.replay.Replay`."""

    replay_id: str
    source: str
    log_topic: str
    request: Any
    airflow: Mapping[str, Any] | None
    rate: float | None
    deadline: float | None
    clock: Callable[[], int]
    kafka_config: Mapping[str, Any]


def run_control(
    replay: _Replaying, deadlines: CallDeadlines, replay_log: ReplayLog, summary: ReplaySummary
) -> RunControl:
    """The controls of one attempt of ``replay`` that moves records."""
    info: dict[str, Any] = {
        "replay_id": replay.replay_id,
        "dlt": replay.source,
        "replay_log": replay.log_topic,
    }
    info |= {"filters": summary.filters, "to": replay.request.to, "transform": replay.request.transform}
    info |= {"started_by": started_by(replay.airflow), "rate": replay.rate}
    return RunControl(
        replay.replay_id,
        replay.log_topic,
        info,
        Pacer(replay.rate, replay.deadline),
        replay.clock,
        replay.clock(),
        replay_log,
        replay.kafka_config,
        deadlines,
    )
