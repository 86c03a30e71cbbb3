"""
``dlt replay-status`` and ``dlt replay-stop``: a replay's status, and a request to stop it, in its replay log.

The status of each replay id is the ``status/<replay id>`` entry its runs write
(:mod:`~airflow_kafka_retry.dlt.replay_control`); reading it needs only read access to the replay log. A
replay logged by a version without statuses shows what its plan and ``done`` entries say. A stop request is
a ``stop/<replay id>`` entry (who asked, where, when, why), written without a transaction; the running
replay honours it at its next chunk boundary and writes its status ``stopped``. Writing it needs write
access to the replay log, which the replay role has (``policy/topology/acl.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, Producer

from airflow_kafka_retry.dlt.replay_control import started_by
from airflow_kafka_retry.dlt.replay_targets import source_topic
from airflow_kafka_retry.engine.kafka.clients import producer_config
from airflow_kafka_retry.engine.kafka.reading import TopicReader
from airflow_kafka_retry.engine.logs.compacted_log import encode_entry
from airflow_kafka_retry.engine.logs.replay_log import ReplayLog, log_topic, read_log, stop_key
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

if TYPE_CHECKING:
    from airflow_kafka_retry.policy.topology.model import Topology

#: How long writing a stop request may take.
STOP_TIMEOUT_S = 15.0
#: The states of a replay that has ended.
ENDED = frozenset({"done", "stopped", "failed"})


def statuses(replay_log: ReplayLog) -> dict[str, dict[str, Any]]:
    """Every replay id's status, by id, oldest first; a stop request not yet honoured: ``stop_requested``."""
    out: dict[str, dict[str, Any]] = {}
    for replay_id in sorted(
        set(replay_log.plans) | set(replay_log.statuses),
        key=lambda i: (replay_log.statuses.get(i) or replay_log.plans.get(i) or {}).get("started_ms") or 0,
    ):
        status = replay_log.statuses.get(replay_id)
        if status is None:  # logged by a version without statuses
            plan, done = replay_log.plans.get(replay_id, {}), replay_log.done.get(replay_id)
            moved = sum(1 for e in replay_log.moved.values() if e.get("replay_id") == replay_id)
            status = {
                "replay_id": replay_id,
                "replay_log": replay_log.topic,
                "state": "done" if done else "unfinished",
                "reason": None if done else "no status logged (an older version): rerun its id to finish it",
                "filters": plan.get("request"),
                "moved": moved,
                "started_ms": plan.get("started_ms"),
                "ended_ms": done.get("finished_ms") if done else None,
            }
        out[replay_id] = {**status, "stop_requested": replay_log.stops.get(replay_id)}
    return out


class ReplayStatusView:
    """The replay log of one DLT of ``topology``, read for statuses and written for stop requests."""

    def __init__(
        self,
        topology: Topology,
        kafka_config: Mapping[str, Any],
        dlt: str | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.kafka_config, self.clock = kafka_config, clock
        self.source = source_topic(topology, dlt)
        self.log_topic = log_topic(self.source)

    def read(self, replay_id: str | None = None) -> list[dict[str, Any]]:
        """The status of ``replay_id`` (a bad id: :class:`ReplayError`), or of every replay of the DLT."""
        with TopicReader(self.kafka_config) as reader:
            found = statuses(read_log(reader, self.log_topic))
        if replay_id is None:
            return list(found.values())
        if replay_id not in found:
            raise ReplayError(f"--replay-id {replay_id}: no replay of that id in {self.log_topic}")
        return [found[replay_id]]

    def stop(
        self,
        replay_id: str,
        *,
        reason: str | None = None,
        wait_s: float = 0.0,
        requested_by: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """
        Ask the running replay ``replay_id`` to stop at its next chunk boundary; its status.

        :param wait_s: wait this long for its status to say it ended (0: do not wait).
        :param requested_by: who asks, and where (default: this process's OS user and host).
        :raises ReplayError: no such replay id, or it has ended already.
        """
        (status,) = self.read(replay_id)
        if status.get("state") in ENDED or status.get("state") == "unfinished":
            state = status.get("state")
            raise ReplayError(
                f"--replay-id {replay_id}: not running (its status says {state}); nothing to stop"
            )
        request = {
            "replay_id": replay_id,
            "requested_by": dict(requested_by) if requested_by is not None else started_by(),
            "at_ms": self.clock(),
            "reason": reason,
        }
        self._write(stop_key(replay_id), encode_entry(request))
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            (status,) = self.read(replay_id)
            if status.get("state") in ENDED:
                break
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        return status

    def _write(self, key: bytes, value: bytes) -> None:
        failures: list[str] = []

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append(err.str())

        producer = Producer(producer_config(self.kafka_config, None))
        try:
            producer.produce(self.log_topic, key=key, value=value, on_delivery=delivered)
            pending = producer.flush(STOP_TIMEOUT_S)
        except KafkaException as exc:
            failures.append(exc.args[0].str())
            pending = 0
        if failures:
            raise ReplayError(
                f"cannot write {key.decode()} to {self.log_topic}: {'; '.join(failures)}; "
                "the replay was not asked to stop"
            )
        if pending:
            producer.purge()
            raise ReplayError(
                f"cannot write {key.decode()} to {self.log_topic} within {STOP_TIMEOUT_S:g}s: not "
                "acknowledged; a broker that got it but did not answer may still write it, so check "
                "`dlt replay-status` before asking again"
            )


def _when(ms: Any) -> str:
    return (
        "-" if not isinstance(ms, int) else f"{datetime.fromtimestamp(ms / 1000, tz=UTC):%Y-%m-%dT%H:%M:%SZ}"
    )


def status_lines(status: Mapping[str, Any]) -> list[str]:
    """One replay's status for people."""
    who = status.get("started_by") or {}
    airflow = who.get("airflow")
    where = f"{who.get('user') or '?'} on {who.get('host') or '?'}" if who else "?"
    if airflow:
        where += " (Airflow " + "/".join(str(airflow.get(k)) for k in ("dag_id", "run_id", "task_id")) + ")"
    state = str(status.get("state"))
    if status.get("reason"):
        state += f": {status['reason']}"
    g = status.get
    counts = f"moved {g('moved')} (this run {g('moved_this_run', '-')}), skipped {g('skipped', '-')}"
    times = f"this run {_when(g('run_started_ms'))}, updated {_when(g('updated_ms'))}"
    what = f"to: {g('to') or 'original topic'}, transform: {g('transform') or 'none'}"
    lines = [
        f"replay {g('replay_id')} of {g('dlt') or '?'}: {state}",
        f"  {counts}, remaining {g('remaining', '-')} of {g('selected', '-')}",
        f"  rate: asked {g('rate') or 'none'}/s, measured {g('measured_rate') or '-'}/s",
        f"  started {_when(g('started_ms'))} by {where}; {times}, ended {_when(g('ended_ms'))}",
        f"  filters: {g('filters')}, {what}",
    ]
    stop = status.get("stop_requested")
    if stop:
        by = stop.get("requested_by") or {}
        lines.append(f"  stop requested {_when(stop.get('at_ms'))} by {by.get('user')} on {by.get('host')}")
    return lines
