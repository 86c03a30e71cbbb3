"""
One round of a scheduled redrive policy (``redrive:`` in the topology): DLT replays with the round's say.

A round of policy ``P`` at tick ``T`` has the replay id ``redrive.<T>.<P>``
(:mod:`~airflow_kafka_retry.policy.redrive.rounds`). It:

1. reads the replay logs of the topology's DLTs and parking topic, which say how many times each record was
   redriven (never a header alone: :func:`~airflow_kafka_retry.policy.redrive.rounds.redrive_count`);
2. **parking pass** (once the parking topic exists): replays the parking topic with the policy's filters
   (exception, original topic, dead-lettered ``after`` ago), target and rate, taking only the records the
   round's rules say to redrive; those redriven ``max_redrives`` times stay parked;
3. **DLT pass**: the same on the policy's DLT;
4. **park pass**, when the DLT pass met records already redriven ``max_redrives`` times (a copy a service
   outside this engine dead-lettered to the DLT; the engine parks its own): a replay of the DLT to the
   parking topic, replay id ``<round>.park``, its copies keeping their exception headers.

Every pass is a :class:`~airflow_kafka_retry.dlt.replay.Replay`: each record moved once, with its copy, in
one transaction with its replay log entry (which adds ``redrives``, ``policy`` and, for a park, ``parked``);
its status in the log (``dlt replay-status --replay-id redrive.<T>.<P>``, ``--dlt parking`` for the parking
pass); stopped by ``dlt replay-stop`` at a chunk boundary, which ends the round; resumed by running the same
round again (an Airflow retry of the task). A pass that finds nothing to move writes nothing. The parking
pass runs before the DLT pass, so a copy the DLT pass moves that fails again within the round is not read
in it; the round's rules leave any copy of the same tick for the next round.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.dlt.replay import Replay
from airflow_kafka_retry.dlt.replay_request import ReplayRequest
from airflow_kafka_retry.dlt.replay_targets import source_topic, source_topics
from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError, NotAuthorized
from airflow_kafka_retry.engine.kafka.reading import TopicReader
from airflow_kafka_retry.engine.logs.replay_log import ReplayLog, log_topic, read_log
from airflow_kafka_retry.policy.redrive.rounds import Action, RoundRules, park_id, redrive_count, round_id
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms
from airflow_kafka_retry.policy.timing.durations import format_duration_ms

if TYPE_CHECKING:
    from airflow_kafka_retry.dlt.records import DltRecord
    from airflow_kafka_retry.dlt.summary import ReplaySummary
    from airflow_kafka_retry.policy.redrive.policies import RedrivePolicy
    from airflow_kafka_retry.policy.topology.model import Topology

log = logging.getLogger(__name__)


@dataclass
class RoundSelector:
    """
    The round's say on each record one pass selects: it takes those whose action is ``want``.

    Each record is decided once (a replay asks again when it moves it); :attr:`decided` holds every decision.
    """

    rules: RoundRules
    policy: str
    sources: Collection[str]
    logs: Mapping[str, ReplayLog]
    want: Action
    keeps_failure: bool = False
    decided: dict[tuple[str, int, int], tuple[Action, int]] = field(default_factory=dict)

    def _decision(self, record: DltRecord) -> tuple[Action, int]:
        coords = (record.topic, record.partition, record.offset)
        if coords not in self.decided:
            count, moved_by = redrive_count(
                record.headers, record.key, record.value, sources=self.sources, entry_of=self._entry
            )
            self.decided[coords] = (self.rules.decide(count, moved_by), count)
        return self.decided[coords]

    def _entry(self, topic: str, partition: int, offset: int) -> Mapping[str, Any] | None:
        found = self.logs.get(topic)
        return None if found is None else found.moved.get((partition, offset))

    def keep(self, record: DltRecord) -> bool:
        return self._decision(record)[0] == self.want

    def log_fields(self, record: DltRecord) -> dict[str, Any]:
        action, count = self._decision(record)
        return RoundRules.log_fields(action, count, self.policy)

    def tally(self) -> Counter[str]:
        return Counter(action for action, _ in self.decided.values())


@dataclass
class RoundResult:
    """
    What a round did (the task's XCom; never payloads).

    ``redriven``: records moved back (in a dry run: would be); ``parked``: DLT records moved to the parking
    topic; ``held``: parked records left there, redriven ``max_redrives`` times; ``later``: copies of this
    tick, left for the next round; ``passes``: each pass's replay summary (moves by coordinates).
    """

    policy: str
    round_id: str
    tick_ms: int
    dry_run: bool
    status: str = "done"  # done | stopped (at a chunk boundary: the next round takes the rest)
    reason: str | None = None
    redriven: int = 0
    parked: int = 0
    held: int = 0
    later: int = 0
    passes: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        verb = "would redrive" if self.dry_run else "redrove"
        return (
            f"redrive round {self.round_id}: {self.status}; {verb} {self.redriven}, parked {self.parked}, "
            f"left parked (max_redrives reached) {self.held}, left for the next round {self.later}"
            + (f" ({self.reason})" if self.reason else "")
        )


def run_round(
    topology: Topology,
    kafka_config: Mapping[str, Any],
    policy: RedrivePolicy,
    *,
    tick_ms: int,
    dry_run: bool = False,
    chunk_size: int = 100,
    move_cap: int | None = 1000,
    max_run_s: float | None = None,
    stop_now: Callable[[], str | None] = lambda: None,
    airflow: Mapping[str, Any] | None = None,
    clock: Callable[[], int] = wall_clock_ms,
) -> RoundResult:
    """
    Run ``policy``'s round of the tick ``tick_ms`` (see the module's docstring).

    Bad input raises :class:`~airflow_kafka_retry.policy.errors.ReplayError` before its pass moves anything;
    a pass that fails part way raises :class:`~airflow_kafka_retry.dlt.errors.ReplayAbortedError` (running
    the same round again finishes it, moving each record once).

    :param max_run_s: the round's deadline, seconds from now: a pass holding its rate past it stops cleanly.
    :param stop_now: asked while a pass runs; a reason ends it at once, its chunk aborted.
    :param airflow: the DAG, run and task of the round, for its statuses.
    """
    replay_id = round_id(policy.name, tick_ms)
    rules = RoundRules(policy.max_redrives, tick_ms)
    sources = source_topics(topology)
    dlt = source_topic(topology, policy.dlt)
    parking = topology.parking_topic
    logs, existing = _read_logs(kafka_config, sources)
    deadline = None if max_run_s is None else time.monotonic() + max_run_s
    result = RoundResult(policy.name, replay_id, tick_ms, dry_run)

    def selector(want: Action, keeps_failure: bool = False) -> RoundSelector:
        return RoundSelector(rules, policy.name, sources, logs, want, keeps_failure)

    def run_pass(source: str, pass_id: str, to: str, chosen: RoundSelector) -> ReplaySummary | None:
        """One replay; None when the round is out of time or stopped before it."""
        left = None if deadline is None else deadline - time.monotonic()
        if result.status != "done" or (left is not None and left <= 0):
            result.status, result.reason = "stopped", result.reason or "the run's deadline"
            return None
        request = ReplayRequest(
            dlt=source,
            exception=list(policy.exception) or None,
            original_topic=list(policy.original_topic) or None,
            until=format_duration_ms(policy.after_ms) if policy.after_ms else None,
            to=to,
        )
        summary = Replay(
            topology,
            kafka_config,
            request,
            replay_id=pass_id,
            dry_run=dry_run,
            chunk_size=chunk_size,
            move_cap=move_cap,
            clock=clock,
            allowed_targets=[parking] if parking and to == parking else [],
            stop_now=stop_now,
            rate=policy.rate,
            max_run_s=left,
            airflow=airflow,
            selector=chosen,
            log_idle=False,
        ).run()
        for line in summary.lines()[-2:]:
            log.info("%s", line)
        result.passes.append(summary.to_dict())
        if summary.status == "stopped":
            result.status, result.reason = "stopped", summary.error
        return summary

    if parking is not None and parking in existing:
        parked = selector("redrive")
        if (summary := run_pass(parking, replay_id, policy.to, parked)) is not None:
            result.redriven += _moved(summary)
            result.held += parked.tally()["park"]
            result.later += parked.tally()["later"]
    first = selector("redrive")
    if (summary := run_pass(dlt, replay_id, policy.to, first)) is not None:
        result.redriven += _moved(summary)
        result.later += first.tally()["later"]
    unfinished = park_id(replay_id) in logs[dlt].plans and park_id(replay_id) not in logs[dlt].done
    if parking is not None and (first.tally()["park"] or unfinished):
        to_park = selector("park", keeps_failure=True)
        if (summary := run_pass(dlt, park_id(replay_id), parking, to_park)) is not None:
            result.parked += _moved(summary)
    log.info("%s", result.line())
    return result


def _moved(summary: ReplaySummary) -> int:
    """What a pass moved (its dry run: would move, this run)."""
    return summary.selected - summary.moved_before if summary.dry_run else summary.moved


def _read_logs(
    kafka_config: Mapping[str, Any], sources: Collection[str]
) -> tuple[dict[str, ReplayLog], set[str]]:
    """The replay log of each source (empty when it has none yet), and which sources exist."""
    logs: dict[str, ReplayLog] = {}
    existing: set[str] = set()
    with TopicReader(kafka_config) as reader:
        for source in sources:
            try:
                reader.partitions(source)
                existing.add(source)
            except NotAuthorized:
                raise
            except KafkaConfigError:  # not created yet (the parking topic of an older deployment)
                pass
            logs[source] = read_log(reader, log_topic(source))
    return logs, existing
