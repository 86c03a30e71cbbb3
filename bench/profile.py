"""
Where the local engine's time goes: phase timers and a cProfile of every partition thread.

Run as the ``local_txn_profile`` case (its numbers are not compared: profiling slows it down).
cProfile and the phase timers see one process, so the profiled drain runs its partitions in
threads of this process (``in_process=True``); a partition does the same work, record for record,
in a worker process. Phases are wall and thread-CPU seconds summed over the partition threads:

* ``start``: ``init_transactions`` (fencing earlier runs of the partition);
* ``read``: fetching and due-checking records (``PartitionReader.read``; waits for the broker);
* ``handle``: building records, calling the handler, resolving failures (``HandlingLane.handle``);
* ``commit``: producing routed records and committing the chunk's transaction (``ChunkTransaction.commit``);
* ``job``: the whole partition job, client creation and metadata included.
"""

from __future__ import annotations

import collections
import cProfile
import io
import pstats
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.workload import Workload

_PHASES = {
    "start": ("airflow_kafka_retry.engine.drain.transaction", "ChunkTransaction", "start"),
    "read": ("airflow_kafka_retry.engine.drain.due_records", "PartitionReader", "read"),
    "handle": ("airflow_kafka_retry.engine.drain.lanes", "HandlingLane", "handle"),
    "commit": ("airflow_kafka_retry.engine.drain.transaction", "ChunkTransaction", "commit"),
}


def _timed(
    method: Callable[..., Any], wall: collections.Counter[str], cpu: collections.Counter[str], phase: str
) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started, started_cpu = time.perf_counter(), time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            wall[phase] += time.perf_counter() - started
            cpu[phase] += time.thread_time() - started_cpu

    return wrapper


def profile_local(
    workload: Workload,
    group: str,
    spec: dict[str, Any],
    drain: Callable[[Workload, str, dict[str, Any]], tuple[int, dict[str, Any]]],
) -> tuple[int, dict[str, Any]]:
    """Drain the tier with ``drain`` (the local engine in-process), timing phases, profiling every thread."""
    import importlib

    from airflow_kafka_retry.engine.drain.partition import PartitionJob

    wall: collections.Counter[str] = collections.Counter()
    cpu: collections.Counter[str] = collections.Counter()
    for phase, (module, cls, name) in _PHASES.items():
        owner = getattr(importlib.import_module(module), cls)
        setattr(owner, name, _timed(getattr(owner, name), wall, cpu, phase))
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()
    original_run = PartitionJob.run

    def profiled_run(self: PartitionJob) -> Any:
        profile = cProfile.Profile()
        started, started_cpu = time.perf_counter(), time.thread_time()
        profile.enable()
        try:
            return original_run(self)
        finally:
            profile.disable()
            with lock:
                profiles.append(profile)
                wall["job"] += time.perf_counter() - started
                cpu["job"] += time.thread_time() - started_cpu

    PartitionJob.run = profiled_run  # type: ignore[method-assign]
    count, details = drain(workload, group, spec)
    stats = pstats.Stats(profiles[0], stream=io.StringIO())
    for profile in profiles[1:]:
        stats.add(profile)
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:20]  # type: ignore[attr-defined]
    details["phases"] = {
        phase: {"wall_s": round(wall[phase], 3), "thread_cpu_s": round(cpu[phase], 3)}
        for phase in (*_PHASES, "job")
    }
    details["top_functions"] = [
        {
            "function": f"{path.rsplit('/', 1)[-1]}:{line}({name})",
            "calls": calls,
            "own_s": round(own, 3),
            "cumulative_s": round(cumulative, 3),
        }
        for (path, line, name), (_, calls, own, cumulative, _) in rows
    ]
    return count, details
