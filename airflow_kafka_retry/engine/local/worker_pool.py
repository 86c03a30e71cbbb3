"""
Partitions drained by worker processes: the local engine past the GIL.

Record work and the handler are Python work, which threads of one process take turns at. Here worker
processes (``python -m airflow_kafka_retry.engine.local.worker``, one per core at most, each a fresh
interpreter: no fork of a process running librdkafka threads) take partitions a few at a time (in threads,
so one partition's waits overlap another's record work) and run each as a partition thread would; their
summaries come back over a pipe (:meth:`PartitionSummary.to_dict`) and make up the one run summary.

* **Stopping**: ``should_stop`` is asked every ``poll_s`` and its reason sent to every worker, whose
  partitions stop at their next chunk boundary (at once for an ``AbortNow`` reason).
* **A worker that dies** (killed, out of memory, a crash in native code), or stays silent for
  ``WORKER_SILENCE_S`` and is killed, fails the partitions it was running, naming the partition, the
  process and why; what it committed stays committed (its last progress report says up to where), its
  open transaction never is, and the partitions not yet started go to the other workers (or a new one).
* **The engine dying** takes the workers with it (:mod:`~airflow_kafka_retry.engine.local.worker`); what
  ends a run (:meth:`ProcessPool.run`, ``LocalEngine``'s ``with``) reaps them: no worker outlives a run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_retry.engine.drain.summary import PartitionSummary
from airflow_kafka_retry.engine.kafka.child_pipes import (
    FrameReader,
    FrameWriter,
    PipeClosed,
    describe_exit,
    start_piped,
)
from airflow_kafka_retry.engine.kafka.deadlines import AbortNow
from airflow_kafka_retry.engine.local.worker_failure import worker_failure
from airflow_kafka_retry.engine.local.worker_protocol import HEARTBEAT_S, WorkerSetup, setup_message

log = logging.getLogger(__name__)

#: Seconds between two questions to ``should_stop``.
STOP_POLL_S = 0.2
#: Seconds a worker gets to exit once its pipes are closed, before it is killed.
EXIT_GRACE_S = 5.0
#: Seconds a worker running partitions may stay silent (no heartbeat, log or result) before the engine
#: kills it: its interpreter is wedged (every client call has a deadline of its own, drain/supervisor.py).
WORKER_SILENCE_S = 60.0


@dataclass
class _Run:
    """A partition a worker is running: when it was handed over, and its last progress report."""

    started: float
    progress: dict[str, Any] | None = None


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    control: FrameWriter
    results: FrameReader
    running: dict[int, _Run] = field(default_factory=dict)
    setup_error: str | None = None
    heard: float = field(default_factory=time.monotonic)  # when it last sent anything
    silenced: str | None = None  # why the engine killed it
    alive: bool = True
    exiting: bool = False
    reader: threading.Thread | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid


def _stop_message(reason: str) -> tuple[str, str]:
    """``("abort", reason)`` for an :class:`AbortNow` reason (stop at once), else ``("stop", reason)``."""
    return ("abort" if isinstance(reason, AbortNow) else "stop", str(reason))


def _relog(fields: dict[str, Any]) -> None:
    record = logging.makeLogRecord(fields)
    logging.getLogger(record.name).handle(record)


class ProcessPool:
    """
    Runs partitions of one tier run in worker processes (see the module's docstring).

    One-shot: :meth:`run`. Kept across the passes of a run (``engine/drain/follow.py``): :meth:`start` the
    workers (they start up while the run waits for its wave), then :meth:`drain` once per pass, each with
    its own cutoff, then :meth:`close`; the workers then import the handler and start up once per run.

    :param setup: what every worker needs (pickled once per worker); its cutoff is the default of a pass.
    :param parallelism: partitions running at once, over all workers.
    :param processes: worker processes (at most ``parallelism``); each runs up to
        ``ceil(parallelism / processes)`` partitions at once, in threads, so that one partition's waits
        (client start-up, fetches, transaction commits) overlap another's record work.
    :param should_stop: asked every ``poll_s`` during a pass; its first reason is sent to every worker.
    """

    def __init__(
        self,
        setup: WorkerSetup,
        parallelism: int,
        processes: int,
        *,
        should_stop: Callable[[], str | None] | None = None,
        poll_s: float = STOP_POLL_S,
        silence_s: float | None = None,
    ) -> None:
        self.setup = setup
        self.parallelism = max(1, parallelism)
        self.processes = max(1, min(processes, self.parallelism))
        self.slots = -(-self.parallelism // self.processes)
        self.should_stop = should_stop
        self.poll_s = poll_s
        self.silence_s = WORKER_SILENCE_S if silence_s is None else silence_s
        self._events: queue.Queue[tuple[_Worker, tuple[Any, ...] | None]] = queue.Queue()
        self._stop_sent: str | None = None
        self._setup_frame = setup_message(setup, sys.path)
        self._workers: list[_Worker] = []
        self._cutoff_ms = setup.cutoff_ms
        self.pids: list[int] = []  # every worker process started (for tests and logs)
        self.peak_rss_mb: dict[int, float] = {}  # worker pid -> its peak RSS, as it reported when done

    # ------------------------------------------------------------------ workers
    def _start(self) -> _Worker:
        process, control, results = start_piped(
            "airflow_kafka_retry.engine.local.worker", str(os.getpid()), str(self.slots)
        )
        worker = _Worker(process, control, results)
        self._workers.append(worker)
        self.pids.append(process.pid)
        worker.reader = threading.Thread(
            target=self._read, args=(worker,), name=f"worker-{process.pid}-results", daemon=True
        )
        worker.reader.start()
        self._send(worker, self._setup_frame)
        if self._stop_sent is not None:
            self._send(worker, _stop_message(self._stop_sent))
        return worker

    def _read(self, worker: _Worker) -> None:
        while True:
            try:
                message = worker.results.recv()
            except (PipeClosed, OSError, ValueError):
                self._events.put((worker, None))
                return
            self._events.put((worker, message))

    def _send(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError):  # the worker is gone; its results pipe's end reports it
            worker.control.send(message)

    @property
    def _group(self) -> str:
        """The consumer group the run's partitions are read with (named in a failed partition's summary)."""
        return self.setup.options.consumer_group or self.setup.topology.consumer_group(self.setup.tier)

    def _live(self) -> list[_Worker]:
        return [w for w in self._workers if w.alive and not w.exiting]

    def _fill(self, pending: deque[int]) -> None:
        """
        Hand pending partitions to the least busy live workers, up to ``parallelism`` at once.

        A replacement is started if every worker is gone.
        """
        live = self._live()
        if pending and not live:
            live = [self._start()]
        while pending:
            if sum(len(w.running) for w in live) >= self.parallelism:
                break
            free = [w for w in live if len(w.running) < self.slots and w.setup_error is None]
            if not free:
                break
            worker = min(free, key=lambda w: len(w.running))
            partition = pending.popleft()
            worker.running[partition] = _Run(time.monotonic())
            self._send(worker, ("run", partition, self._cutoff_ms))

    def _check_stop(self) -> None:
        """Send a new stop reason to every worker; an :class:`AbortNow` one even after a plain stop."""
        if self.should_stop is None or isinstance(self._stop_sent, AbortNow):
            return
        reason = self.should_stop()
        if reason is None or (self._stop_sent is not None and not isinstance(reason, AbortNow)):
            return
        self._stop_sent = reason
        when = (
            "at once, aborting their open chunks"
            if isinstance(reason, AbortNow)
            else "at its next chunk boundary"
        )
        for worker in self._workers:  # before the log line: an orphaned task's log may block
            if worker.alive:
                self._send(worker, _stop_message(reason))
        log.info("stopping every partition worker %s (%s)", when, reason)

    # ------------------------------------------------------------------ the run
    def start(self, count: int | None = None) -> None:
        """
        Start the workers that are not running yet: ``count`` at most (default: ``processes``).

        They start up (the interpreter, the package, the setup, the handler's import) while the caller
        does other things.
        """
        want = self.processes if count is None else min(self.processes, count)
        for _ in range(want - len(self._live())):
            self._start()

    def run(self, partitions: Sequence[int]) -> list[PartitionSummary]:
        """One pass at the setup's cutoff, then the workers end: :meth:`drain` then :meth:`close`."""
        try:
            return self.drain(partitions)
        finally:
            self.close()

    def drain(self, partitions: Sequence[int], cutoff_ms: int | None = None) -> list[PartitionSummary]:
        """
        One pass: the summaries of ``partitions``, in the order they finished.

        A pass drains records due by ``cutoff_ms`` (default: the setup's); the workers stay for the
        next pass. Never raises for a partition's failure.
        """
        pending = deque(partitions)
        results: dict[int, PartitionSummary] = {}
        self._cutoff_ms = self.setup.cutoff_ms if cutoff_ms is None else cutoff_ms
        self._take_events(pending, results)  # a worker that ended since the last pass is known as gone
        self.start(len(pending))
        self._fill(pending)
        while (pending or any(w.running for w in self._workers if w.alive)) and any(
            w.alive for w in self._workers
        ):
            self._check_stop()
            self._check_silence()
            try:
                worker, message = self._events.get(timeout=self.poll_s)
            except queue.Empty:
                continue
            self._handle(worker, message, pending, results)
        topic = self.setup.tier.topic
        for partition in pending:  # every worker failed to start
            summary = PartitionSummary(topic, partition, self._group, status="failed")
            summary.error = (
                f"WorkerSetupError: {topic}[{partition}] was not run: no worker process of the run "
                "could start (see the other partitions' errors); nothing of it was read"
            )
            results[partition] = summary
        return list(results.values())

    def _check_silence(self) -> None:
        """Kill a worker that runs partitions and has said nothing for ``silence_s``: its partitions fail."""
        now = time.monotonic()
        for worker in self._workers:
            if (
                worker.alive
                and worker.running
                and worker.silenced is None
                and now - worker.heard > self.silence_s
            ):
                worker.silenced = (
                    f"killed by the engine after {now - worker.heard:.0f}s without a word from it "
                    f"(heartbeats every {HEARTBEAT_S:g}s)"
                )
                log.error("partition worker %s is silent: %s", worker.pid, worker.silenced)
                worker.process.kill()  # its results pipe closes: _ended fails what it was running

    def _take_events(self, pending: deque[int], results: dict[int, PartitionSummary]) -> None:
        while True:
            try:
                worker, message = self._events.get_nowait()
            except queue.Empty:
                return
            self._handle(worker, message, pending, results)

    def _handle(
        self,
        worker: _Worker,
        message: tuple[Any, ...] | None,
        pending: deque[int],
        results: dict[int, PartitionSummary],
    ) -> None:
        if message is None:  # the worker's results pipe closed: it exited
            self._ended(worker, pending, results)
            return
        worker.heard = time.monotonic()
        kind = message[0]
        if kind == "log":
            _relog(message[1])
        elif kind == "progress" and message[1] in worker.running:
            worker.running[message[1]].progress = message[2]
        elif kind == "done" and message[1] in worker.running:
            del worker.running[message[1]]
            results[message[1]] = PartitionSummary.from_dict(message[2])
            self._fill(pending)
        elif kind == "setup_failed":
            worker.setup_error = str(message[1])
        elif kind == "exit" and message[1] is not None:
            self.peak_rss_mb[worker.pid] = float(message[1])

    def _ended(self, worker: _Worker, pending: deque[int], results: dict[int, PartitionSummary]) -> None:
        worker.alive = False
        try:
            returncode = worker.process.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:  # closed its results pipe but lives on: make sure it ends
            worker.process.kill()
            returncode = worker.process.wait()
        if not worker.running:
            if returncode != 0:
                log.warning(
                    "partition worker %s %s after its last partition", worker.pid, describe_exit(returncode)
                )
            return
        tier = self.setup.tier
        for partition, run in sorted(worker.running.items()):
            failed = worker_failure(
                tier.topic,
                partition,
                self._group,
                pid=worker.pid,
                returncode=returncode,
                progress=run.progress,
                setup_error=worker.setup_error,
                started=run.started,
            )
            if worker.silenced is not None:
                failed.error = f"{failed.error} ({worker.silenced})"
            log.error("%s[%s]: partition run failed: %s", tier.topic, partition, failed.error)
            results[partition] = failed
        worker.running.clear()
        if worker.setup_error is not None:
            if all(w.setup_error is not None for w in self._workers):
                return  # no worker can start: the pending partitions are reported as not run
        self._fill(pending)  # the partitions not yet started go to the other workers, or a new one

    def close(self) -> None:
        """Tell the workers to exit, take their last words (peak RSS), and reap them; none outlives this."""
        for worker in self._workers:
            if worker.alive and not worker.exiting:
                worker.exiting = True
                self._send(worker, ("exit",))
        deadline = time.monotonic() + EXIT_GRACE_S
        unused: deque[int] = deque()
        while any(w.alive for w in self._workers) and (left := deadline - time.monotonic()) > 0:
            try:
                worker, message = self._events.get(timeout=min(left, self.poll_s))
            except queue.Empty:
                continue
            self._handle(worker, message, unused, {})
        workers = self._workers
        for worker in workers:
            worker.control.close()  # a worker still running sees the pipe close and exits at once
        deadline = time.monotonic() + EXIT_GRACE_S
        for worker in workers:
            try:
                worker.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
        for worker in workers:
            if worker.reader is not None:
                worker.reader.join(timeout=EXIT_GRACE_S)
            worker.results.close()
        if self.peak_rss_mb:
            log.info(
                "%s: %s worker process(es), peak RSS %.0f MB together (largest %.0f MB)",
                self.setup.tier.topic,
                len(self.pids),
                sum(self.peak_rss_mb.values()),
                max(self.peak_rss_mb.values()),
            )
