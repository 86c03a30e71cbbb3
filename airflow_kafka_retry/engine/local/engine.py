"""
The local engine: reprocess every partition of a tier on this machine.

With a parallelism above one, partitions run in worker processes (one per core at most, each running
a few partitions at once; see :mod:`~airflow_kafka_retry.engine.local.worker_pool`), so that record work
and handlers use every core; with one, on one core, or in-process on request, they run in threads of
this process.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from airflow_kafka_retry.engine.drain.summary import PartitionSummary, RunSummary
from airflow_kafka_retry.engine.drain.supervisor import run_partition
from airflow_kafka_retry.engine.kafka.clients import KafkaConfigError, open_consumer, partition_counts
from airflow_kafka_retry.engine.local.worker_pool import ProcessPool
from airflow_kafka_retry.engine.local.worker_protocol import WorkerSetup
from airflow_kafka_retry.policy.routing.resolver import wall_clock_ms

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.options import DrainOptions
    from airflow_kafka_retry.policy.topology.model import Tier, Topology

log = logging.getLogger(__name__)


def tier_partitions(
    topology: Topology, tier: Tier, kafka_config: Mapping[str, Any], options: DrainOptions
) -> list[int]:
    """The partitions of ``tier``'s topic (the topic must exist)."""
    group = options.consumer_group or topology.consumer_group(tier)
    with open_consumer(kafka_config, group) as consumer:
        try:
            count = partition_counts(
                consumer, [tier.topic], timeout=min(10.0, options.call_timeout_s), kafka_config=kafka_config
            )
        except KafkaConfigError as exc:
            if exc.__cause__ is None:  # the topic does not exist: the message says so
                raise
            # no broker answered: say which ones were asked (bootstrap addresses are not secrets)
            raise KafkaConfigError(
                f"{exc}; no broker of bootstrap.servers={kafka_config.get('bootstrap.servers')!r} answered, "
                "nothing was read or committed"
            ) from exc
        return list(range(count[tier.topic]))


#: Upper bound of :func:`default_parallelism` (a caller may ask for more).
MAX_DEFAULT_PARALLELISM = 8


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_parallelism(partitions: int, cores: int | None = None) -> int:
    """
    Partitions to process at once when the caller does not say: one more than the cores, at most 8.

    Partitions at work are spread over one worker process per core (:func:`worker_processes`), so
    record work runs on every core; the extra one keeps a partition's fetches, client start-up and
    transaction commits (waits) overlapping the others' processing. The cap bounds memory: each
    partition at work holds its consumer's bounded prefetch and one piece of its chunk, and each
    worker process is an interpreter of its own (one running two partitions at once peaked at 87 MB in a
    200k-record drain with Spring's headers).
    """
    cores = available_cores() if cores is None else cores
    return max(1, min(partitions, MAX_DEFAULT_PARALLELISM, cores + 1))


def new_summary(
    topology: Topology, tier: Tier, options: DrainOptions, *, engine: str, cutoff_ms: int, started_ms: int
) -> RunSummary:
    return RunSummary(
        topology=topology.source,
        tier=tier.index,
        topic=tier.topic,
        group=options.consumer_group or topology.consumer_group(tier),
        engine=engine,
        cutoff_ms=cutoff_ms,
        started_ms=started_ms,
    )


def worker_processes(parallelism: int, cores: int | None = None) -> int:
    """
    Worker processes for ``parallelism`` partitions at once: one per core at most.

    Each then runs a few partitions, in threads; 0 (partitions in threads of this process) when fewer than two
    would run.
    """
    cores = available_cores() if cores is None else cores
    processes = min(parallelism, cores)
    return processes if processes >= 2 else 0


def _shippable(setup: WorkerSetup) -> str | None:
    """Why ``setup`` cannot reach a worker process (None: it can)."""
    try:
        pickle.dumps(setup, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        keys = sorted(k for k, v in setup.kafka_config.items() if not _picklable(v))
        what = f"Kafka configuration key(s) {', '.join(keys)}" if keys else "the run's setup"
        return f"{what} cannot be sent to a worker process ({type(exc).__name__})"
    return None


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except (pickle.PicklingError, TypeError, AttributeError):
        return False
    return True


class LocalEngine:
    """
    One tier run on this machine, kept across its passes (``engine/drain/follow.py``).

    :meth:`start` resolves the partitions and, past one core, starts the worker processes, which then
    start up (interpreter, package, handler import) while the run waits for its wave; :meth:`drain` runs
    one pass, at its own cutoff, on the same workers; :meth:`close` ends them. A context manager:
    ``with LocalEngine(...) as engine: engine.drain(cutoff)``. The arguments are :func:`run_local`'s.
    """

    def __init__(
        self,
        topology: Topology,
        tier: Tier,
        kafka_config: Mapping[str, Any],
        options: DrainOptions,
        *,
        partitions: Iterable[int] | None = None,
        parallelism: int | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        should_stop: Callable[[], str | None] | None = None,
        in_process: bool = False,
    ) -> None:
        self.topology, self.tier, self.options = topology, tier, options
        self.kafka_config = dict(kafka_config)
        self.clock, self.should_stop, self.in_process = clock, should_stop, in_process
        self._partitions, self._parallelism = partitions, parallelism
        self.chosen: list[int] = []  # the partitions of the run (resolved by start())
        self.started = False
        self.workers = 1
        self.pool: ProcessPool | None = None

    def start(self) -> LocalEngine:
        """Resolve the partitions and start the worker processes, if any (idempotent)."""
        if self.started:
            return self
        t, tier = self.topology, self.tier
        self.chosen = (
            list(self._partitions)
            if self._partitions is not None
            else tier_partitions(t, tier, self.kafka_config, self.options)
        )
        self.started = True
        workers = (
            default_parallelism(len(self.chosen)) if self._parallelism is None else max(1, self._parallelism)
        )
        self.workers = min(workers, max(1, len(self.chosen)))
        processes = (
            0 if self.in_process or self.clock is not wall_clock_ms else worker_processes(self.workers)
        )
        if processes:
            levels = {
                name: logging.getLogger(name or None).getEffectiveLevel()
                for name in ("", "airflow_kafka_retry")
            }
            setup = WorkerSetup(t, tier, self.kafka_config, self.options, self.clock(), log_levels=levels)
            why_not = _shippable(setup)
            if why_not is not None:
                log.warning("%s: partitions run in threads of this process: %s", tier.topic, why_not)
            else:
                self.pool = ProcessPool(setup, self.workers, processes, should_stop=self.should_stop)
                self.pool.start(len(self.chosen))
        return self

    def drain(self, cutoff_ms: int | None = None) -> RunSummary:
        """One pass: every chosen partition, records due by ``cutoff_ms`` (default: now)."""
        chosen = self.start().chosen
        started = self.clock()
        cutoff = started if cutoff_ms is None else cutoff_ms
        summary = new_summary(
            self.topology, self.tier, self.options, engine="local", cutoff_ms=cutoff, started_ms=started
        )
        if self.pool is not None:
            summary.partitions = self.pool.drain(chosen, cutoff)
        else:
            summary.partitions = _run_threads(
                self.topology,
                self.tier,
                self.kafka_config,
                self.options,
                chosen,
                self.workers,
                cutoff=cutoff,
                clock=self.clock,
                should_stop=self.should_stop,
            )
        summary.finished_ms = self.clock()
        summary.note_stops()
        return summary

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def __enter__(self) -> LocalEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_local(
    topology: Topology,
    tier: Tier,
    kafka_config: Mapping[str, Any],
    options: DrainOptions,
    *,
    partitions: Iterable[int] | None = None,
    cutoff_ms: int | None = None,
    parallelism: int | None = None,
    clock: Callable[[], int] = wall_clock_ms,
    should_stop: Callable[[], str | None] | None = None,
    in_process: bool = False,
) -> RunSummary:
    """
    Reprocess ``tier`` on this machine (one pass) and return the run summary.

    :param partitions: only these partitions (default: all of the tier's topic).
    :param cutoff_ms: records due after this stay for a later run (default: now).
    :param parallelism: partitions processed at once, each with its own clients (default:
        :func:`default_parallelism` of the partition count). Above one (on more than one core), they run
        in :func:`worker_processes` processes.
    :param should_stop: asked while partitions run; a reason (e.g. ``"killed"``) stops each at its next
        chunk boundary, after committing what it finished (``options.deadline_ms`` does the same at a time).
    :param clock: epoch milliseconds; a clock other than the wall clock (a test's) keeps the run in-process.
    :param in_process: run partitions in threads of this process whatever the parallelism (the handler
        then shares this process's state; record work uses one core).
    """
    engine = LocalEngine(
        topology,
        tier,
        kafka_config,
        options,
        partitions=partitions,
        parallelism=parallelism,
        clock=clock,
        should_stop=should_stop,
        in_process=in_process,
    )
    with engine:
        return engine.drain(cutoff_ms)


def _run_threads(
    topology: Topology,
    tier: Tier,
    kafka_config: Mapping[str, Any],
    options: DrainOptions,
    partitions: list[int],
    workers: int,
    *,
    cutoff: int,
    clock: Callable[[], int],
    should_stop: Callable[[], str | None] | None,
) -> list[PartitionSummary]:
    def run(partition: int) -> PartitionSummary:
        return run_partition(
            topology,
            tier,
            partition,
            kafka_config,
            options,
            cutoff_ms=cutoff,
            clock=clock,
            should_stop=should_stop,
        )

    # each partition's attempts run in daemon threads of their own (engine/drain/supervisor.py): an attempt
    # stuck inside a client call is abandoned there, and neither this pool nor the process's exit waits
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run, partitions))
