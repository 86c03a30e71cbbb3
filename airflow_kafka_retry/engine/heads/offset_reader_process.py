"""
The committed-offset reader's child process, run as ``python -m`` (this module).

``python -m airflow_kafka_retry.engine.heads.offset_reader_process`` is started by
:mod:`~airflow_kafka_retry.engine.heads.offset_reader` with its control and answers pipes (frames as in
:mod:`~airflow_kafka_retry.engine.local.worker_protocol`). The first message is ``("setup", sys_path,
pickled kafka_config)`` (unpickled once the parent's ``sys.path`` is taken: an ``oauth_cb`` may name a
module of the user's); each later one is ``("ask", ident, group, [(topic, partition), ...],
timeout_s)``, answered with ``("answer", ident, [(topic, partition, offset, error or None), ...])``
or ``("failed", ident, message, error code name or None)``. Requests run at once, side by side: each is an
``AdminClient.list_consumer_group_offsets`` (stable offsets, as a ``read_committed`` consumer of the
group reads them) whose future answers from the client's own thread.

It lives as long as its parent: the control pipe closing, or the parent gone (it looks every second),
ends it. SIGINT and SIGTERM are ignored, as the triggerer signals its whole process group and the parent
decides. Nothing here logs the configuration or reads a record.
"""

from __future__ import annotations

import functools
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from airflow_kafka_retry.engine.kafka.child_pipes import (
    EXIT_ENGINE_GONE,
    FrameReader,
    FrameWriter,
    PipeClosed,
)

#: Seconds between two looks at whether the parent is still there.
PARENT_CHECK_S = 1.0


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(EXIT_ENGINE_GONE)
        time.sleep(PARENT_CHECK_S)


def _answer(answers: FrameWriter, ident: int, future: Future[Any]) -> None:
    try:
        found = future.result(0)
        listed = [
            (tp.topic, tp.partition, tp.offset, None if tp.error is None else str(tp.error))
            for tp in found.topic_partitions or []
        ]
        message: tuple[Any, ...] = ("answer", ident, listed)
    except Exception as exc:  # the request failed: the parent names the group and partitions
        message = ("failed", ident, f"{type(exc).__name__}: {exc}", _code(exc))
    try:
        answers.send(message)
    except OSError:  # the parent is gone
        os._exit(EXIT_ENGINE_GONE)


def _code(exc: BaseException) -> str | None:
    """The name of a client error's code (``_TIMED_OUT``), else None."""
    error = exc.args[0] if exc.args else None
    name = getattr(error, "name", None)
    return str(name()) if callable(name) else None


def serve(control: FrameReader, answers: FrameWriter, kafka_config: Mapping[str, Any]) -> None:
    """Answer every ``ask`` until the control pipe closes."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    from airflow_kafka_retry.engine.kafka.clients import admin_config

    admin = AdminClient(admin_config(kafka_config))
    while True:
        try:
            message = control.recv()
        except PipeClosed:
            return
        if message[0] != "ask" or len(message) != 5:
            raise ValueError(f"offset reader: unexpected message {message[0]!r}")
        _, ident, group, keys, timeout_s = message
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in keys])]
        try:
            futures = admin.list_consumer_group_offsets(
                request, require_stable=True, request_timeout=timeout_s
            )
        except Exception as exc:  # a request the client refuses (e.g. a bad group name)
            answers.send(("failed", ident, f"{type(exc).__name__}: {exc}", _code(exc)))
            continue
        futures[group].add_done_callback(functools.partial(_answer, answers, ident))


def main(argv: list[str]) -> int:
    control_fd, answers_fd, parent_pid = (int(a) for a in argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="parent-watch", daemon=True).start()
    control, answers = FrameReader(control_fd), FrameWriter(answers_fd)
    try:
        setup = control.recv()
    except PipeClosed:
        return EXIT_ENGINE_GONE
    if setup[0] != "setup" or len(setup) != 3:
        answers.send(("setup_failed", f"expected the setup first, got {setup[0]!r}"))
        return 1
    sys.path[:] = [str(p) for p in setup[1]] or sys.path
    try:
        serve(control, answers, pickle.loads(setup[2]))
    except Exception as exc:  # e.g. a configuration the client refuses: every request fails with it
        answers.send(("setup_failed", f"{type(exc).__name__}: {exc}"))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
