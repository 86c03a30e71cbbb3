"""The local engine: reprocess every partition of a tier in this process."""

from __future__ import annotations

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
    parallelism: int = 1,
    clock: Callable[[], int] = wall_clock_ms,
    should_stop: Callable[[], str | None] | None = None,
) -> RunSummary:
    """Reprocess ``tier`` in-process and return the run summary.

    :param partitions: only these partitions (default: all of the tier's topic).
    :param cutoff_ms: records due after this stay for a later run (default: now).
    :param parallelism: partitions processed at once, each with its own clients.
    :param should_stop: asked by every partition before each chunk; a reason (e.g. ``"killed"``) stops
        it there, after committing what it finished (``options.deadline_ms`` does the same at a time).
    """
    started = clock()
    cutoff = started if cutoff_ms is None else cutoff_ms
    summary = new_summary(topology, tier, options, engine="local", cutoff_ms=cutoff, started_ms=started)
    chosen = list(partitions) if partitions is not None else tier_partitions(topology, tier, kafka_config, options)
    jobs = [PartitionJob(topology, tier, p, kafka_config, options, cutoff_ms=cutoff, clock=clock,
                        should_stop=should_stop) for p in chosen]
    with ThreadPoolExecutor(max_workers=max(1, parallelism)) as pool:
        summary.partitions = list(pool.map(lambda job: job.run(), jobs))
    summary.finished_ms = clock()
    summary.note_stops()
    return summary
