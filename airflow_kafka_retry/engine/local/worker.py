"""
A partition worker process of the local engine: ``python -m airflow_kafka_retry.engine.local.worker``.

Started by :mod:`airflow_kafka_retry.engine.local.worker_pool` with the file descriptors of its control
and results pipes (see :mod:`~airflow_kafka_retry.engine.local.worker_protocol`). It runs the partitions it
is handed one at a time with :class:`~airflow_kafka_retry.engine.drain.partition.PartitionJob` -- its own
consumer and transactional producer per partition, exactly as the in-process engine does -- and
reports each one's summary.

It obeys its engine only: SIGINT and SIGTERM are ignored (Airflow signals the task's whole process
group; the engine's ``on_kill`` then asks every worker to stop at its next chunk boundary), and it
dies with its engine: on Linux the kernel sends it SIGKILL when the engine's thread that started it
ends (``PR_SET_PDEATHSIG``), and everywhere the control pipe closing without an ``exit`` message
makes it exit at once. Whatever chunk it was in is then not committed: its transaction is aborted
by the broker (or fenced by the next run of the partition, whose ``init_transactions`` also waits
for it), and the next run resumes at the committed offset.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import queue
import signal
import sys
import threading
import time
from typing import Any

from airflow_kafka_retry.engine.kafka.child_pipes import (
    EXIT_ENGINE_GONE,
    FrameReader,
    FrameWriter,
    PipeClosed,
)
from airflow_kafka_retry.engine.kafka.deadlines import AbortNow
from airflow_kafka_retry.engine.local.worker_protocol import HEARTBEAT_S, WorkerSetup, read_setup

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent goes (Linux); exit if it is already gone."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the control pipe's end still stops the worker
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(EXIT_ENGINE_GONE)


class _ForwardHandler(logging.Handler):
    """Sends each log record to the engine, which logs it through its own handlers (e.g. the task log)."""

    def __init__(self, results: FrameWriter) -> None:
        super().__init__()
        self.results = results

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = {
                "name": record.name,
                "levelno": record.levelno,
                "levelname": record.levelname,
                "msg": record.getMessage(),
                "pathname": record.pathname,
                "lineno": record.lineno,
                "funcName": record.funcName,
                "created": record.created,
                "threadName": record.threadName,
                "processName": f"partition-worker-{os.getpid()}",
                "process": os.getpid(),
                "exc_text": self.formatter.formatException(record.exc_info)
                if record.exc_info and self.formatter
                else record.exc_text,
            }
            self.results.send(("log", fields))
        except Exception:  # a log line must never fail the partition
            self.handleError(record)


def _configure_logging(results: FrameWriter, levels: dict[str, int]) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = _ForwardHandler(results)
    handler.setFormatter(logging.Formatter())
    root.addHandler(handler)
    for name, level in levels.items():
        logging.getLogger(name or None).setLevel(level)


class _Control:
    """
    The engine's messages, read by a thread of their own.

    Runs queue up, a stop is kept, EOF ends the worker.
    """

    def __init__(self, reader: FrameReader) -> None:
        self.reader = reader
        self.runs: queue.Queue[tuple[int, int | None] | None] = queue.Queue()
        self.stop_reason: str | None = None

    def should_stop(self) -> str | None:
        return self.stop_reason

    def listen(self) -> None:
        while True:
            try:
                message = self.reader.recv()
            except (PipeClosed, OSError, ValueError):
                os._exit(EXIT_ENGINE_GONE)  # the engine is gone: nobody would receive what this run does
            kind = message[0]
            if kind == "run":  # ("run", partition) or ("run", partition, cutoff_ms): this pass's cutoff
                cutoff = int(message[2]) if len(message) > 2 and message[2] is not None else None
                self.runs.put((int(message[1]), cutoff))
            elif kind == "stop" and self.stop_reason is None:
                self.stop_reason = str(message[1])
            elif kind == "abort":  # at once, the open chunk aborted (engine/drain/supervisor.py)
                self.stop_reason = AbortNow(str(message[1]))
            elif kind == "exit":
                self.runs.put(None)
                return


def peak_rss_mb() -> float | None:
    """This process's peak resident memory (``VmHWM``), None where ``/proc`` does not say."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def serve(setup: WorkerSetup, control: _Control, results: FrameWriter, slots: int = 1) -> None:
    """
    Run every partition the engine hands over, until it says ``exit``.

    Up to ``slots`` at once, in threads.
    """
    from airflow_kafka_retry.engine.drain.summary import PartitionSummary
    from airflow_kafka_retry.engine.drain.supervisor import run_partition
    from airflow_kafka_retry.engine.kafka.loading import load_callable

    # the handler's import now, while the engine may still wait for the pass's records to fall due; a
    # handler that does not import (even one that calls sys.exit) is reported by each partition that loads
    # it, as in a thread
    with contextlib.suppress(BaseException):
        load_callable(setup.options.handler, what="handler")

    def runner() -> None:
        while True:
            handed = control.runs.get()
            if handed is None:
                control.runs.put(None)  # the next runner ends too
                return
            partition, cutoff = handed

            def progress(summary: Any, partition: int = partition) -> None:
                results.send(("progress", partition, summary.to_dict()))

            try:
                summary = run_partition(
                    setup.topology,
                    setup.tier,
                    partition,
                    setup.kafka_config,
                    setup.options,
                    cutoff_ms=setup.cutoff_ms if cutoff is None else cutoff,
                    should_stop=control.should_stop,
                    on_chunk=progress,
                )
            except Exception as exc:  # the partition's summary says why, not a worker that exits 0
                group = setup.options.consumer_group or setup.topology.consumer_group(setup.tier)
                summary = PartitionSummary(
                    setup.tier.topic, partition, group, status="failed", error=f"{type(exc).__name__}: {exc}"
                )
            results.send(("done", partition, summary.to_dict()))

    def heartbeat() -> None:  # the engine kills a worker that stays silent (its interpreter is wedged)
        with contextlib.suppress(OSError):
            while True:
                results.send(("alive",))
                time.sleep(HEARTBEAT_S)

    threading.Thread(target=heartbeat, name="heartbeat", daemon=True).start()
    threads = [threading.Thread(target=runner, name=f"partition-slot-{i}") for i in range(max(1, slots))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def main(argv: list[str]) -> int:
    control_fd, results_fd, parent_pid, slots = (int(a) for a in argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    die_with_parent(parent_pid)
    reader, results = FrameReader(control_fd), FrameWriter(results_fd)
    try:
        message = reader.recv()
    except PipeClosed:
        return EXIT_ENGINE_GONE
    try:
        setup = read_setup(message)
    except Exception as exc:  # e.g. a Kafka configuration value that does not unpickle here
        results.send(("setup_failed", f"{type(exc).__name__}: {exc}"))
        return 1
    _configure_logging(results, setup.log_levels)
    control = _Control(reader)
    threading.Thread(target=control.listen, name="engine-control", daemon=True).start()
    serve(setup, control, results, slots)
    results.send(("exit", peak_rss_mb()))
    results.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
