"""The local engine: reprocess every partition of a tier in this process."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from airflow_kafka_retry.engine.clients import open_consumer, partition_counts
from airflow_kafka_retry.engine.options import DrainOptions
from airflow_kafka_retry.engine.partition import PartitionJob
from airflow_kafka_retry.engine.summary import RunSummary
from airflow_kafka_retry.policy.resolver import wall_clock_ms
from airflow_kafka_retry.policy.topology import Tier, Topology


def tier_partitions(topology: Topology, tier: Tier, kafka_config: Mapping[str, Any],
                    options: DrainOptions) -> list[int]:
    """The partitions of ``tier``'s topic (the topic must exist)."""
    group = options.consumer_group or topology.consumer_group(tier)
    with open_consumer(kafka_config, group) as consumer:
        return list(range(partition_counts(consumer, [tier.topic])[tier.topic]))


#: Upper bound of :func:`default_parallelism` (a caller may ask for more).
MAX_DEFAULT_PARALLELISM = 8


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_parallelism(partitions: int, cores: int | None = None) -> int:
    """Partitions to process at once when the caller does not say: one more than the cores, at most 8.

    Record work and the handler run under the GIL, so threads beyond the cores add no processing;
    the extra one keeps a partition's fetches, client start-up and transaction commits (waits that
    release the GIL) overlapping the others' processing. Measured on 2 cores (bench/): 3 threads
    drain fastest, 2 and 4 are a little slower, 8 spend a third more CPU on contention. The cap
    bounds memory: each partition at work holds its consumer's bounded prefetch and one piece of
    its chunk.
    """
    cores = available_cores() if cores is None else cores
    return max(1, min(partitions, MAX_DEFAULT_PARALLELISM, cores + 1))


def new_summary(topology: Topology, tier: Tier, options: DrainOptions, *, engine: str, cutoff_ms: int,
                started_ms: int) -> RunSummary:
    return RunSummary(topology=topology.source, tier=tier.index, topic=tier.topic,
                      group=options.consumer_group or topology.consumer_group(tier), engine=engine,
                      cutoff_ms=cutoff_ms, started_ms=started_ms)


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
) -> RunSummary:
    """Reprocess ``tier`` in-process and return the run summary.

    :param partitions: only these partitions (default: all of the tier's topic).
    :param cutoff_ms: records due after this stay for a later run (default: now).
    :param parallelism: partitions processed at once, each with its own clients (default:
        :func:`default_parallelism` of the partition count).
    :param should_stop: asked by every partition before each chunk; a reason (e.g. ``"killed"``) stops
        it there, after committing what it finished (``options.deadline_ms`` does the same at a time).
    """
    started = clock()
    cutoff = started if cutoff_ms is None else cutoff_ms
    summary = new_summary(topology, tier, options, engine="local", cutoff_ms=cutoff, started_ms=started)
    chosen = list(partitions) if partitions is not None else tier_partitions(topology, tier, kafka_config, options)
    jobs = [PartitionJob(topology, tier, p, kafka_config, options, cutoff_ms=cutoff, clock=clock,
                         should_stop=should_stop) for p in chosen]
    workers = default_parallelism(len(jobs)) if parallelism is None else max(1, parallelism)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        summary.partitions = list(pool.map(lambda job: job.run(), jobs))
    summary.finished_ms = clock()
    summary.note_stops()
    return summary
