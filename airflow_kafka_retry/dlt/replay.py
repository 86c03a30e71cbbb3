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
   Bad input raises :class:`~airflow_kafka_retry.policy.errors.ReplayError` here, having moved
   nothing. A dry run stops here and reports every move it would make.
3. **Move.** The plan is logged, then records go in chunks, one transaction per chunk, each begun when
   the rate allows and after a look for a stop request (``dlt/replay_control.py``): the copies
   (with audit headers and a fresh attempt count) are produced and acknowledged, then their
   ``record/<partition>/<offset>`` log entries (each with the digest of its copy's replay id, key
   and value) are produced, then the transaction commits. A record's copy and its log entry are
   committed together or not at all. The replay's status (``status/<replay id>`` in the log) is written
   when it starts moving, in each chunk's transaction, and when it ends: done, stopped, or failed.

A replay never hangs on the cluster: its writes run under the engine's deadlines
(:mod:`~airflow_kafka_retry.engine.kafka.deadlines`), and a write that overruns, or fails on the cluster (a
timeout, a moved coordinator, too few in-sync replicas), is tried again for ``broker_retry_s`` under the
same replay id: the next attempt's producer (same transactional id) fences the old one and aborts its open
chunk, and the replay resumes from what its log holds, so each record still moves once.

This module runs the steps; the request and replay ids are in :mod:`.replay_request`, step 2 in
:mod:`.replay_select`, step 3 in :mod:`.replay_moves` and :mod:`.replay_control` (rate, stop, status).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, Producer

from airflow_kafka_retry.dlt.errors import ReplayAbortedError, ReplayStopped
from airflow_kafka_retry.dlt.replay_acls import lacking_acls
from airflow_kafka_retry.dlt.replay_control import RunControl, run_control
from airflow_kafka_retry.dlt.replay_marks import check_hold_partitions
from airflow_kafka_retry.dlt.replay_moves import TIMEOUT_S, ReplayMoves
from airflow_kafka_retry.dlt.replay_request import ReplayRequest, check_replay_id, new_replay_id
from airflow_kafka_retry.dlt.replay_select import RecordEdit, check_targets, select_candidates
from airflow_kafka_retry.dlt.replay_targets import check_target_spec, source_topic
from airflow_kafka_retry.dlt.summary import ReplaySummary
from airflow_kafka_retry.dlt.transform import Transform, load_transform, resolve_transform
from airflow_kafka_retry.engine.drain.supervisor import broker_transient
from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError, init_transactions, producer_config
from airflow_kafka_retry.engine.kafka.deadlines import (
    AttemptStopped,
    CallDeadlines,
    CallStuckError,
    run_watched,
)
from airflow_kafka_retry.engine.kafka.reading import TopicReader
from airflow_kafka_retry.engine.logs.compacted_log import encode_entry
from airflow_kafka_retry.engine.logs.replay_log import (
    ReplayLog,
    done_key,
    ensure_replay_log,
    log_topic,
    plan_key,
    read_log,
)
from airflow_kafka_retry.policy.client_names import (
    DEFAULT_TRANSACTIONAL_ID_PREFIX,
    replay_transactional_id,
)
from airflow_kafka_retry.policy.dead_letters.framework_headers import check_mode
from airflow_kafka_retry.policy.errors import ReplayError
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms
from airflow_kafka_retry.policy.timing.pacing import paced_chunk, parse_rate

if TYPE_CHECKING:
    from airflow_kafka_retry.dlt.filters import ReplayFilter
    from airflow_kafka_retry.dlt.replay_select import Candidate, Selector
    from airflow_kafka_retry.policy.topology.model import Topology


log = logging.getLogger(__name__)


class Replay:
    """
    One replay of one DLT. :meth:`run` returns the summary; bad input raises :class:`ReplayError`.

    :param topology: the retry path (its DLTs, parking topic, tiers).
    :param kafka_config: librdkafka configuration.
    :param request: filters, target and transform.
    :param replay_id: a fresh one by default; the same id resumes a replay that was stopped.
    :param dry_run: report what would move and write nothing (not even the log topic).
    :param chunk_size: records per Kafka transaction (with a rate: at most a quarter of a second's worth).
    :param move_cap: at most this many moves listed in the summary (None: all).
    :param transforms: when given (the replay DAG, the operator), ``request.transform`` is a name of
        this mapping (name -> ``package.module:function``); any other value fails before anything is
        imported or read. None (the command line): ``request.transform`` is the path itself.
    :param allowed_targets: topics beyond the topology's main topic and retry tiers that records may
        be replayed to (``--to`` or the original-topic header).
    :param broker_retry_s: how long after its first broker failure the replay is tried again (0: never).
    :param stop_now: asked while the replay runs; a reason ends it at once, its chunk in progress aborted
        (:class:`ReplayAbortedError`; a rerun with the same replay id finishes the job).
    :param rate: moves per second (``N/s``, ``N`` or a number; None: as fast as Kafka takes them).
    :param max_run_s: the run's deadline, seconds from its start: a rate held past it ends the run cleanly
        (status ``stopped``) at the last chunk boundary before it.
    :param airflow: the DAG, run and task that started the replay, for its status (None: not Airflow).
    :param selector: a redrive round's say on each record and its log entry (``dlt/redrive.py``).
    :param log_idle: False: a first run that finds nothing to move writes nothing to the replay log (a
        redrive round every hour would otherwise log a plan and a status per round for ever).
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
        broker_retry_s: float = 30.0,
        stop_now: Callable[[], str | None] = lambda: None,
        rate: Any = None,
        max_run_s: float | None = None,
        airflow: Mapping[str, Any] | None = None,
        selector: Selector | None = None,
        log_idle: bool = True,
    ) -> None:
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ReplayError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
        self.topology = topology
        self.kafka_config = kafka_config
        self.request = request
        self.clock = clock
        self.replay_id = check_replay_id(replay_id) if replay_id else new_replay_id(clock())
        self.dry_run = dry_run
        self.rate = parse_rate(rate)
        self.chunk_size = chunk_size = paced_chunk(chunk_size, self.rate)
        self.airflow = airflow
        self.deadline = None if max_run_s is None else time.monotonic() + max_run_s
        self.move_cap = move_cap
        self.source = source_topic(topology, request.dlt)
        request.build_filter(clock())  # a bad filter fails here, before any Kafka client is created
        check_mode(request.framework_headers)
        self.allowed_targets = frozenset(allowed_targets)
        check_target_spec(topology, self.source, request.to, self.allowed_targets)
        self.transform: Transform | None = load_transform(resolve_transform(request.transform, transforms))
        self.log_topic = log_topic(self.source)
        self._prefix = transactional_id_prefix
        self.transactional_id = replay_transactional_id(transactional_id_prefix, self.source)
        self.summary: ReplaySummary | None = None
        self.broker_retry_s = broker_retry_s
        self.stop_now = stop_now
        self.retries = 0  # attempts tried again after a broker failure
        self.edit = RecordEdit(
            topology,
            self.source,
            request.to,
            request.transform,
            self.transform,
            self.allowed_targets,
            check_mode(request.framework_headers),
            selector,
        )
        self.log_idle = log_idle
        self.moves = ReplayMoves(
            self.replay_id, self.source, self.log_topic, self.edit, clock, chunk_size, move_cap
        )

    def run(self) -> ReplaySummary:
        """
        Run the replay; a partial summary stays in :attr:`summary` when it stops with an error.

        A failure that a missing ACL explains says which (``engine/kafka/authorization.py``): the principal,
        the operation and the resource.
        """
        try:
            return self._run()
        except Exception as exc:
            note = self._lacking_acls(exc)
            if note is None:
                raise
            exc.args = (f"{exc}; {note}", *exc.args[1:])
            if self.summary is not None and self.summary.error:
                self.summary.error = str(exc)
            raise

    def _lacking_acls(self, error: BaseException) -> str | None:
        ours = {self.source, self.log_topic, self.transactional_id}
        return lacking_acls(
            error,
            self.topology,
            self.kafka_config,
            ours=ours,
            allowed_targets=self.allowed_targets,
            transactional_id_prefix=self._prefix,
        )

    def _run(self) -> ReplaySummary:
        """
        Run the replay (see :meth:`run`).

        Attempts run under the engine's deadlines; a broker failure is tried again under the same replay
        id (see the module's docstring), then raises :class:`ReplayAbortedError` naming what it waited for.
        """
        give_up_at: float | None = None
        while True:
            deadlines = CallDeadlines(f"replay {self.replay_id} of {self.source}", give_up_at=give_up_at)
            try:
                summary = run_watched(
                    functools.partial(self._attempt, deadlines), deadlines, stop_now=self.stop_now
                )
            except AttemptStopped as exc:
                if self.summary is not None:
                    self.summary.status, self.summary.error = "failed", str(exc)
                raise ReplayAbortedError(
                    f"replay {self.replay_id} of {self.source}: {exc}; its chunk in progress was aborted, "
                    "records moved so far are logged, rerun with the same replay id to finish"
                ) from exc
            except (CallStuckError, ReplayAbortedError) as exc:
                now = time.monotonic()
                give_up_at = now + self.broker_retry_s if give_up_at is None else give_up_at
                if not broker_transient(exc) or now >= give_up_at:
                    if isinstance(exc, ReplayAbortedError) and not self.retries:
                        raise
                    if self.summary is not None:
                        self.summary.status, self.summary.error = "failed", str(exc)
                    raise ReplayAbortedError(
                        f"{exc} [gave up after {self.retries + 1} attempt(s); records moved so far are "
                        "logged, rerun with the same replay id to finish]"
                    ) from exc
                self.retries += 1
                log.warning(
                    "replay %s: attempt %s failed on the cluster (%s); resuming it with a fresh producer "
                    "(%.0fs left for retries)",
                    self.replay_id,
                    self.retries,
                    exc,
                    give_up_at - now,
                )
                time.sleep(min(0.5 * self.retries, 3.0))
                continue
            if summary is None:
                raise RuntimeError("a replay attempt ended without a summary")
            return summary

    # ------------------------------------------------------------------ the three steps
    def _attempt(self, deadlines: CallDeadlines) -> ReplaySummary:
        """One attempt of the three steps, its writes under ``deadlines``."""
        moves = dataclasses.replace(self.moves, deadlines=deadlines)
        with TopicReader(self.kafka_config) as reader:
            partitions = self._partitions(reader, self.source, "--dlt")
            check_hold_partitions(reader, self.topology, self.source, partitions)
            producer = None if self.dry_run else self._fence(deadlines)
            control: RunControl | None = None
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
                    rate=self.rate,
                )
                candidates, seen_ends = select_candidates(
                    reader, self.edit, self.replay_id, selection, replay_log, plan.get("ends"), summary
                )
                check_targets(reader, self.source, candidates)
                if producer is None:
                    for c in (c for c in candidates if not c.moved_before):
                        summary.add_move(c.planned(), self.move_cap)
                elif candidates or self.log_idle or "ends" in plan:
                    control = run_control(self, deadlines, replay_log, summary)
                    self._write(
                        dataclasses.replace(moves, boundary=control.boundary, progress=control.progress),
                        control,
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
                    if producer is not None and control is not None:
                        control.write_failed(producer, self.summary, str(exc))
                raise
            finally:
                if control is not None:
                    control.close()
            # No flush on the way out (as kafka.clients.open_producer): the producer is transactional, so
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
        moves: ReplayMoves,
        control: RunControl,
        reader: TopicReader,
        producer: Producer,
        summary: ReplaySummary,
        plan: dict[str, Any],
        seen_ends: dict[int, int],
        todo: list[Candidate],
    ) -> None:
        """Log the plan (first run of this id) and the status, move ``todo``, log how the replay ended."""
        begin = control.start_entries(summary)
        if "ends" not in plan:
            entry = {
                "replay_id": self.replay_id,
                "request": self.request.spec(),
                "started_ms": plan["started_ms"],
                "ends": {str(p): e for p, e in seen_ends.items()},
            }
            begin.insert(0, (plan_key(self.replay_id), encode_entry(entry)))
        moves.log_entries(producer, begin)
        try:
            moves.move(reader, producer, todo, summary)
        except ReplayStopped as stop:
            summary.status, summary.error = "stopped", str(stop)
            log.warning("replay %s stopped after %s move(s): %s", self.replay_id, summary.moved, stop)
            moves.log_entries(producer, control.end_entries(summary, "stopped", str(stop)))
            return
        done = {"replay_id": self.replay_id, "moved": summary.moved + summary.moved_before}
        done |= {"targets": summary.targets, "finished_ms": self.clock()}
        moves.log_entries(
            producer, [(done_key(self.replay_id), encode_entry(done)), *control.end_entries(summary, "done")]
        )

    def _partitions(self, reader: TopicReader, topic: str, option: str) -> int:
        try:
            return reader.partitions(topic)
        except KafkaConfigError as exc:
            raise ReplayError(f"{option} {topic}: {exc}") from None

    def _fence(self, deadlines: CallDeadlines) -> Producer:
        ensure_replay_log(self.kafka_config, self.log_topic)
        producer = Producer(producer_config(self.kafka_config, self.transactional_id))
        timeout = deadlines.timeout(TIMEOUT_S)
        try:
            with deadlines.call(
                "init_transactions", timeout, f"the transaction coordinator of {self.transactional_id}"
            ):
                init_transactions(producer, timeout, topic=self.log_topic)
        except KafkaException as exc:
            raise ReplayAbortedError(
                f"cannot initialise transactions for replays of {self.source}: {exc.args[0].str()}"
            ) from exc
        return producer


def replay_dlt(
    topology: Topology, kafka_config: Mapping[str, Any], request: ReplayRequest, **kwargs: Any
) -> ReplaySummary:
    """Run one replay (see :class:`Replay` for the keyword arguments)."""
    return Replay(topology, kafka_config, request, **kwargs).run()
