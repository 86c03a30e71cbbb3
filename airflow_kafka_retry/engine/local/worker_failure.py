"""
What a partition's summary says when its worker process ended before reporting it.

Pure: the pool (:mod:`~airflow_kafka_retry.engine.local.worker_pool`) gives the process's pid, its exit status
and the worker's last progress report; what the worker committed stays committed, and the error names the
partition, the process and its signal or exit status.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_kafka_retry.engine.drain.summary import PartitionSummary
from airflow_kafka_retry.engine.kafka.child_pipes import describe_exit


def worker_failure(
    topic: str,
    partition: int,
    group: str,
    *,
    pid: int,
    returncode: int | None,
    progress: dict[str, Any] | None,
    setup_error: str | None,
    started: float | None,
) -> PartitionSummary:
    """
    The failed summary of a partition whose worker process ended before reporting it.

    It keeps what the worker reported as committed (``progress``): those chunks are in Kafka.
    """
    summary = PartitionSummary.from_dict(progress) if progress else PartitionSummary(topic, partition, group)
    summary.status = "failed"
    summary.stop_reason = None
    if setup_error is not None:
        summary.error = (
            f"WorkerSetupError: the worker process {pid} for {topic}[{partition}] could not start: "
            f"{setup_error}"
        )
    else:
        resume = summary.committed_offset if summary.committed_offset is not None else summary.start_offset
        summary.error = (
            f"WorkerDiedError: the worker process {pid} running {topic}[{partition}] "
            f"{describe_exit(returncode)}; its open transaction was not committed and the next run "
            f"resumes the partition at its committed offset"
            f"{f' ({resume})' if resume is not None else ''}"
        )
    if started is not None:
        summary.duration_s = round(time.monotonic() - started, 3)
    return summary
