"""
Any group's committed offsets, read in a child process: one per process and Kafka configuration.

The shared watch consumer (``shared_consumer.py``) needs the committed offsets of every watch's group,
which a consumer can read only for its own; an admin client's ``ListConsumerGroupOffsets`` reads them
for any group. But librdkafka (2.16) crashes the process that sends it when a group coordinator moves:
its admin thread, handling the response's ``NOT_COORDINATOR``, asks the client's consumer group to look
for the coordinator again, and an admin client has none (``rd_kafka_handle_OffsetFetch`` ->
``rd_kafka_cgrp_op`` on NULL: SIGSEGV; docs/capacity.md). In the triggerer that took the trigger runner
and every watcher with it. So the request is sent from a child process (``python -m
airflow_kafka_retry.engine.heads.offset_reader_process``, a fresh interpreter, no fork of a process running
librdkafka threads): when it crashes, only the requests in flight fail, with :class:`OffsetReaderDied`
naming the process and how it ended, as a broker error would (a watch asks again at its next check), and
the next request starts a new child.

A request that timed out retires its child: the next requests start a new one, and the old one ends once
it answered those in flight. After a rolling restart of a cluster, a long-lived admin client went on timing
out every request for its groups' offsets (30 s each, while the consumers of the drains read and committed
them), until the triggerer restarted; a new client read them at once.

Every request has a deadline this side enforces: the child's answer is awaited ``timeout_s`` plus
:data:`ANSWER_GRACE_S`; a child that misses it is killed (its other requests fail with it) and the caller
gets :class:`OffsetReaderStuck`. The Kafka configuration reaches the child through its pipe, never its
command line or environment. Never closed by its callers: the child lives as long as the process (it
exits when its control pipe closes or its parent is gone), and a forked child of the process starts its
own at its first request.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Hashable, Mapping, Sequence
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import KafkaException

from airflow_kafka_retry.engine.kafka.child_pipes import PipeClosed, describe_exit, start_piped
from airflow_kafka_retry.engine.kafka.clients import admin_config
from airflow_kafka_retry.engine.kafka.process_clients import config_key

log = logging.getLogger(__name__)

Key = tuple[str, int]
#: Seconds past a request's own timeout its answer may take before the child counts as stuck.
ANSWER_GRACE_S = 5.0
#: Seconds a stopped child gets to exit before it is killed.
EXIT_GRACE_S = 2.0
#: The client errors of a request that retire its child (its admin client may be stuck on a connection).
RETIRING_ERRORS = frozenset({"_TIMED_OUT"})


class OffsetReaderDied(KafkaException):
    """The child process ended before it answered; the message says how."""


class OffsetReaderStuck(KafkaException):
    """The child did not answer within the request's deadline; it was killed."""


class _Child:
    """One child process, its pipes and the requests waiting for its answers."""

    def __init__(self, kafka_config: Mapping[str, Any]) -> None:
        self.process, self.control, self.answers = start_piped(
            "airflow_kafka_retry.engine.heads.offset_reader_process", str(os.getpid())
        )
        self.lock = threading.Lock()
        self.pending: dict[int, Future[list[tuple[Any, ...]]]] = {}
        self.closing = False  # no more requests: the child is ending or has ended
        self.retiring = False  # no new requests: it ends once those in flight are answered
        self.ended: str | None = None  # how it ended
        self.control.send(("setup", list(sys.path), pickle.dumps(dict(kafka_config))))
        threading.Thread(target=self._listen, name=f"offset-reader-{self.pid}", daemon=True).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def ask(self, ident: int, group: str, keys: Sequence[Key], timeout_s: float) -> Future[Any]:
        future: Future[list[tuple[Any, ...]]] = Future()
        with self.lock:
            if self.closing:
                raise OffsetReaderDied(self.ended or f"the committed-offset reader {self.pid} is ending")
            self.pending[ident] = future
        with contextlib.suppress(OSError):  # the child is gone: the end of its answers pipe reports how
            self.control.send(("ask", ident, group, [tuple(k) for k in keys], timeout_s))
        return future

    def _listen(self) -> None:
        why = None
        while True:
            try:
                message = self.answers.recv()
            except (PipeClosed, OSError, ValueError):
                break
            kind = message[0]
            if kind == "setup_failed":
                why = f"could not start: {message[1]}"
                break
            with self.lock:
                future = self.pending.pop(message[1], None)
            if future is None:
                continue  # a request whose caller gave up
            if kind == "answer":
                future.set_result(message[2])
            else:
                future.set_exception(KafkaException(message[2]))
                if len(message) > 3 and message[3] in RETIRING_ERRORS and not self.retiring:
                    self.retiring = True
                    log.warning(
                        "the committed-offset reader process %s: a request failed (%s); the next requests "
                        "start a new process",
                        self.pid,
                        message[2],
                    )
            with self.lock:
                if self.retiring and not self.pending:
                    why = "was replaced after a request timed out"
                    break
        self.end(why)
        self.answers.close()  # only here: this thread may be reading it until now

    def end(self, why: str | None = None) -> None:
        """Take no more requests; fail those waiting, naming the process and how it ended; reap it."""
        with self.lock:
            if self.closing:
                return
            self.closing = True
        self.control.close()  # the child exits when its control pipe closes
        try:
            code = self.process.wait(EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        with self.lock:
            self.ended = f"the committed-offset reader process {self.pid} {why or describe_exit(code)}"
            pending, self.pending = self.pending, {}
        if why is None and code != 0:  # it crashed (librdkafka's admin thread, see above)
            log.warning("%s; %d request(s) failed, the next starts a new process", self.ended, len(pending))
        for future in pending.values():
            future.set_exception(OffsetReaderDied(self.ended))

    def kill(self, why: str) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.end(why)


class OffsetReader:
    """Committed offsets of any group, for one Kafka configuration, through a child process."""

    def __init__(self, kafka_config: Mapping[str, Any]) -> None:
        self._kafka_config = dict(kafka_config)
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._idents = itertools.count(1)

    def _running(self) -> _Child:
        with self._lock:
            if self._child is None or self._child.closing or self._child.retiring:
                self._child = _Child(self._kafka_config)
            return self._child

    def committed(self, group: str, keys: Sequence[Key], timeout_s: float) -> dict[Key, int]:
        """
        ``group``'s committed offset of each partition (-1: none), as a ``read_committed`` consumer sees it.

        Raises :class:`~confluent_kafka.KafkaException` (or its :class:`OffsetReaderDied` and
        :class:`OffsetReaderStuck`) naming the group and the partition when an offset cannot be read.
        """
        child = self._running()
        future = child.ask(next(self._idents), group, keys, timeout_s)
        try:
            found = future.result(timeout_s + ANSWER_GRACE_S)
        except FutureTimeout:
            child.kill(f"gave no answer within {timeout_s + ANSWER_GRACE_S:.0f} s and was killed")
            waited = timeout_s + ANSWER_GRACE_S
            raise OffsetReaderStuck(
                f"group {group!r}: no answer for its committed offsets within {waited:.0f} s from the "
                f"committed-offset reader process {child.pid} (killed; the next request starts a new one)"
            ) from None
        offsets: dict[Key, int] = {}
        for topic, partition, offset, error in found:
            if error is not None:
                raise KafkaException(f"{topic}[{partition}]: group {group!r}: {error}")
            offsets[(topic, partition)] = offset if offset >= 0 else -1
        missing = [k for k in keys if tuple(k) not in offsets]
        if missing:
            raise KafkaException(f"group {group!r}: no committed offset returned for {missing}")
        return offsets

    @property
    def pid(self) -> int | None:
        """The running child's process id (None before the first request or after it ended)."""
        child = self._child
        return child.pid if child is not None and not child.closing else None

    def close(self) -> None:
        """Stop the child (tests and a process's end; the registry's readers are never closed)."""
        with self._lock:
            child, self._child = self._child, None
        if child is not None:
            child.end("was stopped")


# ---------------------------------------------------------------------- the process's registry
_LOCK = threading.Lock()
_READERS: dict[Hashable, OffsetReader] = {}


def offset_reader(kafka_config: Mapping[str, Any]) -> OffsetReader:
    """The reader of this process for ``kafka_config`` (its child starts at the first request)."""
    key = config_key(admin_config(kafka_config))
    with _LOCK:
        reader = _READERS.get(key)
        if reader is None:
            reader = _READERS[key] = OffsetReader(kafka_config)
        return reader


def _forget_in_child() -> None:
    """In a forked child: its own readers at the next request (the inherited child belongs to the parent)."""
    _READERS.clear()


os.register_at_fork(after_in_child=_forget_in_child)
