"""
A reprocess or replay task that outlives its Airflow supervisor stops at once, its chunk in progress aborted.

Airflow's task supervisor (in a LocalExecutor worker of the scheduler, a Celery worker, a pod) forks
the task process into a process group of its own. When the supervisor dies -- a scheduler killed with
its process group, a worker process OOM-killed -- the task process goes on with nobody to heartbeat
for it or report its state, and Airflow resets the task instance and starts its next try after the
health-check threshold, on the same partitions. Measured in ``tests/integration/test_airflow_ha.py``
before this watch: the orphaned try went on draining for 24 s, 11 s of it alongside the next try, each
try's transactional producer fencing the other's at every pass, until the broker failed one try's
commit (``UNKNOWN_SERVER_ERROR``: Kafka 4.1's coordinator raising on an ``EndTxn`` while an epoch fence
was pending) and that try failed. So a reprocess task watches its parent process while it runs: once
the parent is gone (the task was re-parented) it stops every partition at once (an
``engine.kafka.deadlines.AbortNow`` reason: the chunk in progress is aborted at its next piece or client call,
not finished as after ``on_kill``), and ends without reporting (there is no supervisor to report to); a
replay task stops its replay the same way. Nothing committed is lost or doubled either way; what the
watch saves is the overlap of two tries and the failed run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: How often the watch looks at the parent process (``os.getppid()``, a system call).
INTERVAL_S = 0.5


@contextmanager
def stop_when_supervisor_dies(
    stop: Callable[[str], None], *, interval_s: float = INTERVAL_S
) -> Iterator[int]:
    """
    Call ``stop(reason)`` once if this process's parent (the supervisor) dies inside the block.

    Yields the supervisor's pid. ``stop`` runs in the watch's own thread, while the task's thread is
    blocked in its work: it must not wait on that work, only end it (ask the engine to stop, or, for a
    Spark run, run the Spark provider's ``on_kill``, see the Spark operator's ``_supervisor_gone``).
    """
    supervisor = os.getppid()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(interval_s):
            if os.getppid() != supervisor:
                stop(f"the task's supervisor (pid {supervisor}) is gone")
                return

    thread = threading.Thread(target=watch, name="kafka-retry-supervisor-watch", daemon=True)
    thread.start()
    try:
        yield supervisor
    finally:
        done.set()
        thread.join()
