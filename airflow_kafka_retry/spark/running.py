"""
Finding ``spark-submit``, and running it to its end within a deadline (``submit.run_spark_submit``).

``spark-submit`` starts in a process group of its own. When it has not ended by its deadline, or when
the caller stops waiting (an error, Ctrl-C), the whole group is stopped: SIGTERM, then SIGKILL
:data:`KILL_AFTER_S` later. So the JVM it started, and whatever that started in turn, ends with it.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_kafka_retry.engine.drain.options import DrainOptions
    from airflow_kafka_retry.spark.masking import OutputMasker

log = logging.getLogger(__name__)

#: added to the run's own deadline: Spark's start and stop, the partitions' last chunk, the result
SPARK_SUBMIT_GRACE_S = 300.0
#: how long a run without a deadline (``DrainOptions.deadline_ms`` None) may take
DEFAULT_SPARK_SUBMIT_TIMEOUT_S = 6 * 3600.0
#: between the SIGTERM and the SIGKILL of a process group being stopped
KILL_AFTER_S = 5.0


def spark_home() -> str | None:
    """``$SPARK_HOME``, else the folder of the installed ``pyspark`` package (which bundles Spark)."""
    if os.environ.get("SPARK_HOME"):
        return os.environ["SPARK_HOME"]
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(iter(spec.submodule_search_locations))


def find_spark_submit(binary: str = "spark-submit") -> str:
    """``binary`` on PATH, next to this Python (a virtualenv's bin), or in Spark's home."""
    candidates = [shutil.which(binary), os.path.join(os.path.dirname(sys.executable), binary)]
    home = spark_home()
    if home:
        candidates.append(os.path.join(home, "bin", binary))
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(f"cannot find {binary}: put it on PATH, set SPARK_HOME, or install pyspark")


def submit_timeout_s(options: DrainOptions, *, now_ms: int | None = None) -> float:
    """
    How long to wait for ``spark-submit`` by default.

    The time left until ``options.deadline_ms`` (none when it has passed) plus
    :data:`SPARK_SUBMIT_GRACE_S`; :data:`DEFAULT_SPARK_SUBMIT_TIMEOUT_S` for a run without a deadline.
    """
    if options.deadline_ms is None:
        return DEFAULT_SPARK_SUBMIT_TIMEOUT_S
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return max(0.0, (options.deadline_ms - now) / 1000) + SPARK_SUBMIT_GRACE_S


def stop_group(process: subprocess.Popen[str]) -> None:
    """Stop ``process`` and its process group (it leads one: ``start_new_session``); SIGKILL if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        if sig == signal.SIGTERM:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(KILL_AFTER_S)


@contextlib.contextmanager
def deadline(process: subprocess.Popen[str], timeout_s: float) -> Iterator[threading.Event]:
    """
    Stop ``process``'s group after ``timeout_s`` seconds, or when the block raises.

    Yields an event that is set when the deadline stopped it.
    """
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        log.warning(
            "spark-submit (pid %s) did not end within %g s: stopping its process group",
            process.pid,
            timeout_s,
        )
        stop_group(process)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    try:
        yield expired
    except BaseException:
        timer.cancel()
        stop_group(process)
        raise
    finally:
        timer.cancel()


def stream(
    process: subprocess.Popen[str],
    on_output: Callable[[str], None] | None,
    tail: collections.deque[str],
    mask: OutputMasker,
) -> None:
    """Log, keep the tail of and hand on (``on_output``) each line ``process`` prints, masked first."""
    if process.stdout is None:
        raise RuntimeError("spark-submit was started without a stdout pipe")
    for raw in process.stdout:
        line = mask(raw.rstrip("\n"))
        tail.append(line)
        log.info("%s", line)
        if on_output is not None:
            on_output(line)
