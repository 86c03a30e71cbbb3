"""
A partition run that never hangs: its attempts watched, the broker failures among them retried.

Every engine runs a partition through :func:`run_supervised`: in a thread of the task (local engine), in
a worker process, or in a Spark executor. The partition's attempt runs in a daemon thread of its own;
this thread asks the attempt's :class:`~airflow_kafka_retry.engine.kafka.deadlines.CallDeadlines` every
``poll_s`` whether a client call is past the engine's deadline. Then, or when an attempt fails on the
cluster (a timeout, a coordinator or leader that moved, too few in-sync replicas: :func:`broker_transient`),
the partition is tried again with fresh clients, on the brokers that are left:

* the new attempt's ``init_transactions`` (same transactional id) fences the old one and aborts what it
  left open, so nothing of the abandoned chunk is ever committed by it, and reads the committed offset
  after that: it resumes exactly where the last commit left the partition;
* retries go on for ``options.broker_retry_s`` after the partition's first broker failure, never past
  ``options.deadline_ms`` or a stop request; each later attempt's calls are cut to that window;
* then the partition fails with the last attempt's error, which names the partition, the call and what
  it waited for, and the cluster's brokers as they answer now.

What each attempt committed is kept: the summaries of the attempts add up (``PartitionSummary.absorb``).
Records of an abandoned chunk are handed to the handler again by the next attempt (at least once, as
after any crash); Kafka's outputs hold them once.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException

from airflow_kafka_retry.engine.drain.summary import MAX_RETRY_ERRORS, PartitionSummary
from airflow_kafka_retry.engine.kafka.clients import AUTHORIZATION_CODES
from airflow_kafka_retry.engine.kafka.deadlines import (
    POLL_S,
    AbortNow,
    AttemptStopped,
    CallDeadlines,
    CallStuckError,
    bounded,
    run_watched,
)

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.options import DrainOptions
    from airflow_kafka_retry.engine.drain.partition import PartitionJob
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

log = logging.getLogger(__name__)

#: Pause before the n-th retry: 0.5 s, 1 s, 2 s, then 3 s.
_BACKOFF_S = (0.5, 1.0, 2.0, 3.0)

#: librdkafka errors that say the cluster is moving or missing a broker, not that the input is wrong.
_CLUSTER_CODES = frozenset(
    {
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._WAIT_COORD,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.CONCURRENT_TRANSACTIONS,
        KafkaError.NETWORK_EXCEPTION,
    }
)
#: Never retried: another run of the partition took over (retrying would fight it).
_FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


def broker_transient(error: BaseException | None) -> bool:
    """
    Whether a partition attempt's failure came from the cluster (and another attempt may succeed).

    A stuck call, an exception marked ``transient``, or a Kafka error of the cluster's (timeouts, moved or
    missing coordinators and leaders, too few in-sync replicas, an abortable transaction failure) anywhere
    in the exception's chain. A fenced producer never is.
    """
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, CallStuckError):
            return True
        marked = getattr(error, "transient", None)
        if marked is not None:
            return bool(marked)
        if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
            kafka_error: KafkaError = error.args[0]
            if kafka_error.code() in _FENCED_CODES or kafka_error.fatal():
                return False
            if kafka_error.code() in AUTHORIZATION_CODES:  # an ACL is missing: no attempt will differ
                return False
            if kafka_error.code() in _CLUSTER_CODES or kafka_error.retriable():
                return True
            return bool(kafka_error.txn_requires_abort())
        error = error.__cause__ or error.__context__
    return False


def run_partition(
    topology: Topology,
    tier: Tier,
    partition: int,
    kafka_config: Mapping[str, Any],
    options: DrainOptions,
    *,
    cutoff_ms: int,
    clock: Callable[[], int] | None = None,
    should_stop: Callable[[], str | None] | None = None,
    on_chunk: Callable[[PartitionSummary], None] | None = None,
) -> PartitionSummary:
    """
    One partition of a tier run, as every engine runs it: :class:`PartitionJob` attempts, supervised.

    The arguments are :class:`~airflow_kafka_retry.engine.drain.partition.PartitionJob`'s. Never raises for
    the partition's failure: the summary says ``failed``.
    """
    from airflow_kafka_retry.engine.drain.partition import PartitionJob
    from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

    wall = clock or wall_clock_ms

    def attempt(deadlines: CallDeadlines) -> PartitionJob:
        return PartitionJob(
            topology,
            tier,
            partition,
            kafka_config,
            options,
            cutoff_ms=cutoff_ms,
            clock=wall,
            should_stop=should_stop,
            on_chunk=on_chunk,
            deadlines=deadlines,
        )

    return run_supervised(
        attempt,
        where=f"{tier.topic}[{partition}]",
        retry_s=options.broker_retry_s,
        deadline_ms=options.deadline_ms,
        wall_ms=wall,
        should_stop=should_stop,
        describe_cluster=lambda: cluster_now(kafka_config, tier.topic, partition),
        explain=lambda error: _lacking_acls(error, topology, tier, kafka_config, options),
    )


def _lacking_acls(
    error: BaseException | None,
    topology: Topology,
    tier: Tier,
    kafka_config: Mapping[str, Any],
    options: DrainOptions,
) -> str | None:
    """The ACLs of the tier run its principal lacks, when they explain ``error`` (engine/authorization)."""
    from airflow_kafka_retry.engine.kafka.authorization import explain
    from airflow_kafka_retry.policy.topology.acl import AclScope, tier_run_bindings

    scope = AclScope(transactional_id_prefix=options.transactional_id_prefix)
    needed = tier_run_bindings(topology, tier, scope, group=options.consumer_group)
    return explain(error, kafka_config, needed, timeout=min(10.0, options.call_timeout_s))


def _explained(
    total: PartitionSummary,
    error: BaseException | None,
    explain: Callable[[BaseException | None], str | None] | None,
) -> PartitionSummary:
    """A failed summary's error with what ``explain`` adds (the ACLs its principal lacks)."""
    if total.status != "ok" and explain is not None:
        note = explain(error)
        if note:
            total.error = f"{total.error}; {note}" if total.error else note
            log.error("%s[%s]: %s", total.topic, total.partition, note)
    return total


def run_supervised(
    make_job: Callable[[CallDeadlines], PartitionJob],
    *,
    where: str,
    retry_s: float,
    deadline_ms: int | None = None,
    wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    should_stop: Callable[[], str | None] | None = None,
    describe_cluster: Callable[[], str] | None = None,
    explain: Callable[[BaseException | None], str | None] | None = None,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
) -> PartitionSummary:
    """
    Run a partition (``make_job(deadlines)`` builds each attempt) until it ends, retrying broker failures.

    :param where: ``topic[partition]``, for messages.
    :param retry_s: seconds after the first broker failure during which the partition is tried again.
    :param deadline_ms: the run's wall-clock deadline: no retry starts after it.
    :param should_stop: a stop request (kill, window closed) ends the retries too.
    :param describe_cluster: what the cluster looks like now (brokers, leaders), added to a final failure.
    :param explain: what else explains a final failure (the ACLs its principal lacks), added to it.
    """
    total: PartitionSummary | None = None
    give_up_at: float | None = None
    attempt = 0
    while True:
        attempt += 1
        deadlines = CallDeadlines(where, give_up_at=give_up_at, clock=clock)
        job = make_job(deadlines)
        if total is not None:
            _report_totals(job, total)
        summary, error = _attempt(job, deadlines, poll_s, should_stop)
        total = summary if total is None else _continued(total, summary)
        if summary.status == "ok" or not broker_transient(error):
            return _explained(total, error, explain)
        now = clock()
        give_up_at = now + retry_s if give_up_at is None else give_up_at
        why_not = _why_not_retry(now, give_up_at, deadline_ms, wall_ms, should_stop)
        if why_not is not None:
            total.error = _final_error(summary.error, attempt, why_not, describe_cluster)
            log.error("%s: partition run failed: %s", where, total.error)
            return _explained(total, error, explain)
        total.retries += 1
        if len(total.retry_errors) < MAX_RETRY_ERRORS and summary.error:
            total.retry_errors.append(summary.error[:500])
        pause = min(_BACKOFF_S[min(attempt - 1, len(_BACKOFF_S) - 1)], max(0.0, give_up_at - now))
        log.warning(
            "%s: attempt %s failed on the cluster (%s); trying again with fresh clients in %.1fs "
            "(%.0fs left for retries)",
            where,
            attempt,
            summary.error,
            pause,
            give_up_at - now,
        )
        time.sleep(pause)


def _attempt(
    job: PartitionJob, deadlines: CallDeadlines, poll_s: float, should_stop: Callable[[], str | None] | None
) -> tuple[PartitionSummary, BaseException | None]:
    """One attempt in a daemon thread of its own: its summary and failure, or the stuck call's."""

    def stop_now() -> str | None:
        reason = should_stop() if should_stop is not None else None
        return reason if isinstance(reason, AbortNow) else None

    try:
        run_watched(job.run, deadlines, settled=lambda: job.settled, stop_now=stop_now, poll_s=poll_s)
    except AttemptStopped as stopped:
        if stopped.may_have_committed:  # its summary does not count that chunk; the committed offset says
            log.warning("%s: %s; the next run resumes at the committed offset", job.where, stopped)
        else:
            log.warning("%s: %s; its open chunk is aborted, nothing of it committed", job.where, stopped)
        return job.stopped_summary(stop_now() or str(stopped)), None
    except CallStuckError as stuck:
        log.error("%s: %s; the attempt is abandoned", job.where, stuck)
        return job.abandoned_summary(str(stuck)), stuck
    return job.summary, job.failure


def _report_totals(job: PartitionJob, before: PartitionSummary) -> None:
    """
    Make a later attempt's progress reports (``on_chunk``) carry what the earlier attempts committed too.

    A worker process reports each chunk with them; should it die, its engine builds the partition's summary
    from the last report, which then still counts the chunks of the attempts before the retry.
    """
    report = job.on_chunk
    if report is None:
        return
    earlier = before.to_dict()

    def on_chunk(summary: PartitionSummary) -> None:
        report(_continued(PartitionSummary.from_dict(earlier), summary))

    job.on_chunk = on_chunk


def _continued(before: PartitionSummary, later: PartitionSummary) -> PartitionSummary:
    """``before`` (what earlier attempts committed) with a later attempt of the same partition added."""
    status, error = later.status, later.error
    before.status, before.error = "ok", None
    before.absorb(later)
    before.status, before.error = status, error
    return before


def _why_not_retry(
    now: float,
    give_up_at: float,
    deadline_ms: int | None,
    wall_ms: Callable[[], int],
    should_stop: Callable[[], str | None] | None,
) -> str | None:
    reason = should_stop() if should_stop is not None else None
    if reason is not None:
        return f"the run was asked to stop ({reason})"
    if deadline_ms is not None and wall_ms() >= deadline_ms:
        return "the run's deadline has passed"
    if now >= give_up_at:
        return "the broker retries (broker_retry_s) are used up"
    return None


def _final_error(
    error: str | None, attempts: int, why: str, describe_cluster: Callable[[], str] | None
) -> str:
    text = f"{error} [gave up after {attempts} attempt(s): {why}"
    if describe_cluster is not None:
        text += f"; {describe_cluster()}"
    return text + "]"


def _accepts(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether a TCP connection to ``host:port`` opens within ``timeout_s``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def cluster_now(kafka_config: Mapping[str, Any], topic: str, partition: int, timeout_s: float = 5.0) -> str:
    """
    The brokers the cluster's metadata names now and the partition's leader, in one line; never hangs.

    Asked in a daemon thread the engine waits for a few seconds past ``timeout_s``: the answer, or a sentence
    saying none came.
    """
    where = f"{topic}[{partition}]"

    def ask() -> str:
        from confluent_kafka.admin import AdminClient

        from airflow_kafka_retry.engine.kafka.clients import admin_config

        try:
            metadata = AdminClient(admin_config(kafka_config)).list_topics(topic, timeout=timeout_s)
        except KafkaException as exc:
            return f"the cluster did not answer a metadata request ({exc.args[0]})"
        # a broker that lost the controller quorum still lists brokers that are gone: try each one's port
        named = sorted(metadata.brokers.values(), key=lambda b: b.id)
        down = {b.id for b in named if not _accepts(str(b.host), int(b.port))}
        brokers = ", ".join(
            f"{b.id} ({b.host}:{b.port}{', not answering' if b.id in down else ''})" for b in named
        )
        info = metadata.topics.get(topic)
        part = info.partitions.get(partition) if info is not None else None
        leader = f"broker {part.leader}" if part is not None and part.leader >= 0 else "none"
        return f"brokers in the cluster's metadata now: {brokers or 'none'}; leader of {where}: {leader}"

    try:  # one second per broker's port at most, besides the metadata request
        return bounded(ask, seconds=timeout_s + 5.0, what="the cluster's metadata")
    except CallStuckError:
        return f"the cluster did not answer a metadata request within {timeout_s:g}s"
