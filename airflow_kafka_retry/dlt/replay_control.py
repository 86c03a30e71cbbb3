"""
A running replay's controls: its rate, its stop requests, and its status entries in the replay log.

At each chunk boundary (:meth:`RunControl.boundary`) the run waits until its rate lets the next chunk
begin (:class:`~airflow_kafka_retry.policy.timing.pacing.Pacer`), then reads what was appended to the
replay log since it last read it (the log it already follows: one incremental read) and ends cleanly, with
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.dlt.errors import ReplayStopped
from airflow_kafka_retry.engine.logs.compacted_log import encode_entry
from airflow_kafka_retry.engine.logs.replay_log import ReplayLog, read_log, status_key, stop_key
from airflow_kafka_retry.policy.timing.pacing import Pacer, PastDeadline, measured_rate

if TYPE_CHECKING:
    from confluent_kafka import Producer

    from airflow_kafka_retry.dlt.summary import ReplaySummary
    from airflow_kafka_retry.engine.kafka.reading import TopicReader

log = logging.getLogger(__name__)

#: How long writing a failed run's status may take (the cluster may be what failed).
FAILED_STATUS_TIMEOUT_S = 5.0


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
    """

    replay_id: str
    log_topic: str
    info: dict[str, Any]
    pacer: Pacer
    clock: Callable[[], int]
    run_started_ms: int = 0
    reader: TopicReader | None = field(default=None, repr=False)
    replay_log: ReplayLog | None = field(default=None, repr=False)

    def begin(self, reader: TopicReader, replay_log: ReplayLog) -> None:
        """The attempt's reader, and the log as it read it: where stop requests are looked for."""
        self.reader, self.replay_log = reader, replay_log

    def start_entries(self, summary: ReplaySummary) -> list[tuple[bytes, bytes | None]]:
        """The status ``running``, and a tombstone for a stop request left from an earlier run."""
        return [
            (status_key(self.replay_id), self.entry(summary, "running")),
            (stop_key(self.replay_id), None),
        ]

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
        if self.reader is None or self.replay_log is None:
            return
        self.replay_log = read_log(
            self.reader, self.log_topic, known=self.replay_log, start=self.replay_log.position
        )
        request = self.replay_log.stops.get(self.replay_id)
        if request is not None:
            who = request.get("requested_by") or {}
            reason = request.get("reason") or "no reason given"
            raise ReplayStopped(
                f"stop requested by {who.get('user') or 'an unknown user'} on {who.get('host') or '?'} "
                f"({reason})"
            )

    def write_failed(self, producer: Producer, summary: ReplaySummary, reason: str) -> None:
        """
        Best effort: the status ``failed``, in a transaction of its own, within a few seconds.

        Not when the run was fenced: the run that fenced it (same DLT) owns the status now.
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
